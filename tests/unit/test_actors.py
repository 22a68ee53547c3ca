from __future__ import annotations

import sys
import types
from datetime import timedelta

import pytest
from pydantic import BaseModel

from taskq_core.actors import JobContext, actor, load_registry
from taskq_core.errors import ConfigError, PayloadValidationError


class Resize(BaseModel):
    url: str
    width: int


@actor(queue="media", max_concurrent=4, result_ttl=60)
async def resize(payload: Resize, ctx: JobContext[Resize]) -> dict[str, bool]:
    return {"ok": True}


def test_decorator_reads_payload_model_context_and_options() -> None:
    assert resize.name == "resize" and resize.queue == "media"
    assert resize.payload_type is Resize and resize.context_param == "ctx"
    assert resize.max_concurrent == 4 and resize.result_ttl == timedelta(seconds=60)
    assert resize.is_async and resize.dependency_params == {}


def test_payload_validation_names_the_field() -> None:
    with pytest.raises(PayloadValidationError, match="width"):
        resize.validate_payload({"url": "u", "width": "wide"})
    assert resize.dump_payload(Resize(url="u", width=3)) == {"url": "u", "width": 3}


def test_plain_functions_are_actors_too() -> None:
    @actor(name="sq")
    def square(payload: dict[str, int]) -> int:
        return payload["x"] ** 2

    assert square.name == "sq" and not square.is_async and square.payload_type is None


@pytest.fixture
def module_with_registries() -> types.ModuleType:
    module = types.ModuleType("taskq_test_registries")
    module.as_list = [resize]  # type: ignore[attr-defined]
    module.as_mapping = {"resize": resize}  # type: ignore[attr-defined]
    module.as_generator = (a for a in [resize])  # type: ignore[attr-defined]
    module.as_text = "resize"  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    return module


def test_registries_load_from_lists_and_mappings(module_with_registries: types.ModuleType) -> None:
    assert set(load_registry("taskq_test_registries:as_list")) == {"resize"}
    assert set(load_registry("taskq_test_registries:as_mapping")) == {"resize"}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("taskq_test_registries:as_generator", "generator"),
        ("taskq_test_registries:as_text", "str"),
        ("taskq_test_registries:missing", "no attribute"),
        ("no_such_module_xyz:registry", "cannot import"),
        ("no_colon", "MODULE:ATTRIBUTE"),
    ],
)
def test_bad_registries_are_clear_errors(
    module_with_registries: types.ModuleType, spec: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_registry(spec)
