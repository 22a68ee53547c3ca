from __future__ import annotations

from uuid import UUID

import pytest

from taskq_core.constants import validate_identifier, wake_channel, worker_channel
from taskq_core.errors import InvalidIdentifierError


@pytest.mark.parametrize("name", ["x;drop", "1abc", "a-b", "", "a b", 't"x', "é", "a" * 41])
def test_unsafe_identifiers_are_rejected(name: str) -> None:
    with pytest.raises(InvalidIdentifierError):
        validate_identifier(name)


def test_channels_embed_the_validated_schema() -> None:
    assert wake_channel("taskq") == "taskq_wake_taskq"
    worker = UUID(int=1)
    assert worker_channel("s1", worker).startswith("taskq_worker_s1_")
    with pytest.raises(InvalidIdentifierError):
        wake_channel("x;drop")
