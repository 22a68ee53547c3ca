from __future__ import annotations

import pytest

from taskq_core.constants import validate_identifier, wake_channel
from taskq_core.errors import InvalidIdentifierError


@pytest.mark.parametrize("name", ["x;drop", "1abc", "a-b", "", "a b", 't"x', "é", "a" * 41])
def test_unsafe_identifiers_are_rejected(name: str) -> None:
    with pytest.raises(InvalidIdentifierError):
        validate_identifier(name)


def test_channels_embed_the_validated_schema() -> None:
    assert wake_channel("taskq") == "taskq_wake_taskq"
    with pytest.raises(InvalidIdentifierError):
        wake_channel("x;drop")
