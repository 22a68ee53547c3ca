"""Example actors: what the demo runs (``taskq worker --actors examples.actors:registry``)."""

from __future__ import annotations

import asyncio
import random
from datetime import timedelta

from pydantic import BaseModel

from taskq_core import JobContext, RetryPolicy, actor

QUICK_RETRY = RetryPolicy(kind="transient", max_attempts=4, base=timedelta(milliseconds=200))


class Resize(BaseModel):
    """An image to resize."""

    url: str
    width: int


@actor(queue="default", max_concurrent=16)
async def resize(payload: Resize, ctx: JobContext[Resize]) -> dict[str, object]:
    """Pretend to resize an image: a little I/O, then a result."""
    await asyncio.sleep(random.uniform(0.005, 0.02))
    return {"url": payload.url, "width": payload.width, "attempt": ctx.attempt}


class Flaky(BaseModel):
    """Fails until attempt ``succeed_on``."""

    succeed_on: int = 2


@actor(queue="default", retry=QUICK_RETRY)
async def flaky_upload(payload: Flaky, ctx: JobContext[Flaky]) -> str:
    """Fails with a transient error on early attempts, then succeeds."""
    if ctx.attempt < payload.succeed_on:
        raise ConnectionError(f"upstream unavailable (attempt {ctx.attempt})")
    return f"uploaded on attempt {ctx.attempt}"


class Charge(BaseModel):
    """A payment that will be declined."""

    amount_cents: int


@actor(queue="default", retry=RetryPolicy(kind="non_retryable"))
async def charge_card(payload: Charge) -> None:
    """Always declined: fails for good on the first attempt."""
    raise ValueError(f"card declined for {payload.amount_cents} cents")


class Report(BaseModel):
    """A report to build later."""

    name: str


@actor(queue="reports")
def build_report(payload: Report) -> dict[str, str]:
    """A plain function (runs in a thread): builds a report."""
    return {"report": payload.name, "status": "built"}


registry = [resize, flaky_upload, charge_card, build_report]
