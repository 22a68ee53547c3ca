"""Actors for the span export tests: one that reads, annotates and parents its own span on the
CONSUMER span it runs under, and one that waits to be told to end."""

from __future__ import annotations

import asyncio
from typing import Any

from opentelemetry import trace

from taskq_core import actor


@actor
async def traced(payload: dict[str, Any]) -> str:
    span = trace.get_current_span()
    span.set_attribute("app.order", payload["order"])
    span.add_event("app.checked", {"app.items": 3})
    with trace.get_tracer("app").start_as_current_span("app.charge"):
        pass
    return format(span.get_span_context().trace_id, "032x")


@actor
async def plain(payload: dict[str, Any]) -> None:
    return None


@actor
async def waits(payload: dict[str, Any]) -> None:
    await asyncio.sleep(3600)


registry = [traced, plain, waits]
