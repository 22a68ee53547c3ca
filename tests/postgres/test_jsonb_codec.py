"""The pool's jsonb codec (rows.py) decodes what PostgreSQL sends as json.loads would: it
reads the value with json's scanner directly, relying on jsonb's text having no whitespace
around the value, and falls back to json.loads otherwise."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taskq_core.backend.postgres.rows import _decode_jsonb, init_connection

pytestmark = pytest.mark.postgres

# jsonb stores no NUL and no lone surrogate
TEXT = st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=JSON)
async def test_a_stored_value_reads_back_as_json_loads_reads_its_text(
    conn: asyncpg.Connection, value: Any
) -> None:
    await init_connection(conn)
    text = json.dumps(value)
    stored, rendered = await conn.fetchrow("SELECT $1::text::jsonb, $1::text::jsonb::text", text)
    assert stored == json.loads(rendered)


@pytest.mark.parametrize(
    "sent", [b'\x01 {"a": 1} ', b"\x01\n[1]", b'\x01"x" ', b"\x01{}", b"\x01null"]
)
def test_whitespace_around_the_value_still_decodes(sent: bytes) -> None:
    assert _decode_jsonb(sent) == json.loads(sent[1:])


@pytest.mark.parametrize("sent", [b'\x01{"a": ', b"\x01[1] [2]", b"\x01", b"\x01nul"])
def test_malformed_text_raises_as_json_loads_does(sent: bytes) -> None:
    with pytest.raises(json.JSONDecodeError) as raised:
        _decode_jsonb(sent)
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(sent[1:])
    assert str(raised.value) == str(expected.value)
