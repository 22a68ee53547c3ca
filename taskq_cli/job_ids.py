"""Naming a job on the command line: its whole id, or any unique prefix or suffix of it.

Tables and the dashboard show ids whole or as their last digits; an operator copies either
and pastes it. A whole UUID is used as given (an unknown one is reported where it is read);
a piece is looked up with ``list_job_ids_matching``, and an ambiguous piece is refused with how many
jobs it matches, so nothing is ever done to a job the operator did not mean.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from uuid import UUID

from taskq_core.backend.protocol import Backend, JobRow
from taskq_core.backend.protocol.admin import normalize_id_fragment
from taskq_core.errors import ConfigError, JobNotFoundError, TaskqError

# How many candidates an ambiguous piece reports by id before it only counts them.
_SHOWN = 5
# Past this many matches, "more than N" is all an operator needs to know.
_COUNTED = 20


def full_job_id(text: str) -> UUID | None:
    """The UUID when ``text`` is a whole job id, else None."""
    try:
        return UUID(text.strip())
    except ValueError:
        return None


def check_job_ref(text: str) -> str:
    """``text`` when it can name a job (a UUID, or hex digits of one), checked before any
    database is reached; else the JobNotFoundError an unknown id gets."""
    return check_id_ref(text, "job", JobNotFoundError)


def check_id_ref(text: str, noun: str, not_found: type[TaskqError]) -> str:
    """``text`` when it can name a ``noun`` (a job, a batch: a UUID, or hex digits of one),
    checked before any database is reached; else ``not_found``, the error an unknown id
    gets."""
    if full_job_id(text) is None:
        try:
            normalize_id_fragment(text)
        except ValueError:
            raise not_found(
                f"{text!r} is not a {noun} id (expected a UUID or a unique part of one)"
            ) from None
    return text


def one_among(
    text: str,
    newest: Sequence[UUID],
    scan: int,
    nouns: tuple[str, str],
    not_found: type[TaskqError],
) -> UUID:
    """The one of ``newest`` (the newest ``scan`` batches, workflows: ``nouns`` is the
    singular and the plural) whose id starts or ends with the hex digits of ``text``; else
    ``not_found``, or ConfigError naming the matches when the piece is ambiguous."""
    noun, plural = nouns
    digits = normalize_id_fragment(text)
    found = [i for i in newest if i.hex.startswith(digits) or i.hex.endswith(digits)]
    if not found:
        among = f" among the newest {scan}" if len(newest) == scan else ""
        raise not_found(
            f"no {noun} id{among} starts or ends with {text.strip()!r} (give the whole id)"
        )
    if len(found) > 1:
        shown = ", ".join(str(ident) for ident in found[:_SHOWN])
        raise ConfigError(
            f"{noun} id {text.strip()!r} is ambiguous: {len(found)} {plural} match ({shown}); "
            "give more of the id"
        )
    return found[0]


async def id_among_newest(
    text: str,
    newest: Callable[[], Awaitable[Sequence[UUID]]],
    scan: int,
    nouns: tuple[str, str],
    not_found: type[TaskqError],
) -> UUID:
    """The one ``text`` names: a whole id as given (checked by ``check_id_ref`` first), else
    ``one_among`` the ids ``newest`` reads (the newest ``scan`` batches, workflows)."""
    whole = full_job_id(check_id_ref(text, nouns[0], not_found))
    if whole is not None:
        return whole
    return one_among(text, await newest(), scan, nouns, not_found)


async def resolve_job_id(backend: Backend, text: str) -> UUID:
    """The one job ``text`` names: a whole id, or a unique prefix or suffix of one.

    JobNotFoundError when it is not part of an id or nothing matches; ConfigError, naming
    how many jobs match, when it is ambiguous.
    """
    whole = full_job_id(check_job_ref(text))
    if whole is not None:
        return whole
    found = await backend.list_job_ids_matching(text, _COUNTED + 1)
    if not found:
        raise JobNotFoundError(f"no job id starts or ends with {text.strip()!r}")
    if len(found) == 1:
        return found[0]
    count = f"more than {_COUNTED}" if len(found) > _COUNTED else str(len(found))
    shown = ", ".join(str(ident) for ident in found[:_SHOWN])
    more = ", ..." if len(found) > _SHOWN else ""
    raise ConfigError(
        f"job id {text.strip()!r} is ambiguous: {count} jobs match ({shown}{more}); "
        "give more of the id"
    )


async def live_job(backend: Backend, ident: UUID, act: str) -> JobRow:
    """The job ``act`` (``cancel``, ``retry``, ...) is about to change. A job the prune moved
    to the archive is answered as archived (``jobs show`` finds it there), not as unknown."""
    job = await backend.get(ident)
    if job is not None:
        return job
    archived = await backend.get_archived_job(ident)
    if archived is None:
        raise JobNotFoundError(f"no job with id {ident}")
    ended = archived.job
    when = f" at {ended.finished_at:%Y-%m-%d %H:%M:%S}Z" if ended.finished_at else ""
    raise ConfigError(
        f"job {ident} is archived: it ended {ended.status.value}{when} and the prune moved it "
        f"to the archive, so there is nothing to {act} (taskq jobs show {ident} reads it)"
    )
