"""What an enqueue does when a job already holds its unique key (``on_conflict``).

``raise`` (the default): SingletonCollisionError, nothing inserted. ``return_existing``: the
holder's row comes back instead, no error. ``replace`` (debounce): a holder still waiting
(pending or scheduled) takes the new payload and start time, atomically against a claim
(``Backend.replace_waiting_job``); a running holder, or the ended holder of a windowed key,
still raises. A holder that ends or lets the key go between the refused insert and the
resolution is no holder any more: the insert is tried again.
"""

from __future__ import annotations

from typing import Any, Literal, get_args
from uuid import UUID

from taskq_core.backend.protocol import Backend, EnqueueArgs, JobRow
from taskq_core.backend.protocol.unique import holds_key
from taskq_core.errors import ConfigError, SingletonCollisionError

OnConflict = Literal["raise", "return_existing", "replace"]
ON_CONFLICT: tuple[str, ...] = get_args(OnConflict)
_TRIES = 5  # a holder that keeps ending as we resolve: then the last refusal is raised


def check_on_conflict(mode: str, unique_key: str | None) -> None:
    """ConfigError for an unknown mode, or a resolving mode without a unique key."""
    if mode not in ON_CONFLICT:
        raise ConfigError(f"on_conflict must be one of {', '.join(ON_CONFLICT)}, got {mode!r}")
    if mode != "raise" and unique_key is None:
        raise ConfigError(f"on_conflict={mode!r} needs a unique_key")


async def enqueue_resolving(
    backend: Backend, args: EnqueueArgs, mode: OnConflict, connection: Any = None
) -> JobRow:
    """Insert ``args``; a refusal for its unique key resolved as ``mode`` says."""
    refusal: SingletonCollisionError | None = None
    for _ in range(_TRIES):
        try:
            return await backend.enqueue(args, connection=connection)
        except SingletonCollisionError as exc:
            if mode == "raise" or exc.existing_job_id is None:
                raise
            refusal = exc
        holder_id = refusal.existing_job_id
        assert isinstance(holder_id, UUID)
        if mode == "return_existing":
            row = await backend.get(holder_id)
        else:
            row = await backend.replace_waiting_job(holder_id, args, connection=connection)
            if row is None and await _still_holds(backend, holder_id):
                raise refusal  # running, or a windowed key's holder that ended
        if row is not None:
            return row
    assert refusal is not None
    raise refusal


async def _still_holds(backend: Backend, job_id: UUID) -> bool:
    job = await backend.get(job_id)
    return job is not None and holds_key(job.status, job.unique_until)
