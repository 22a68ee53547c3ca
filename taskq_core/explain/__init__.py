"""Why is this job not running? ``explain_job`` answers it from the Backend protocol alone.

A job is in one of four situations, and each has its own checks:

- **terminal**: it finished for good; the one finding says how (last error, attempts used,
  cancel reason) and when. A poison job (failed by the reclaim sweep because its workers
  kept dying while running it) has its own finding, ``poison_job``, naming those workers.
- **running**: it is claimed by a worker. The question is whether that worker is alive:
  its ``last_seen_at`` older than ``worker_stale_after`` means the heartbeat stopped, and the
  leader's reclaim sweep takes the job back once its lease (plus the cancel headroom when a
  cancel is in flight) has passed: that moment is named.
- **archived**: it finished long enough ago that the prune moved it to the archive; nothing
  will run it again, and the finding says when it was archived and when the archive lets go
  of it (its events were deleted when it was archived, by design).
- **waiting** for its dependencies (a workflow step in status ``waiting``): the one finding
  names the dependencies that have not ended, with their statuses (``workflow.py``).
- **waiting** (pending or scheduled): every blocker the dispatch path has, checked in the
  order dispatch meets them: deadline passed, held back by a rate limit or a reservation (a
  worker claimed it and the limit said no: its last event names the limit), not yet due
  (or due but not yet promoted by
  the leader), queue paused, the actor registered on another queue than the job's (a job
  enqueued by name before its actor's first worker came), no live worker consuming the
  queue, no live consumer that registers the actor, every consumer at full concurrency, the
  queue's ``max_concurrent`` full, the actor's ``max_concurrent`` full, another job holding
  the identity key, and finally the jobs ahead of it in the queue's dispatch order (its
  fairness turn).

Every check is reported, whether it applies or not; the verdict is the first that applies.
Times come from the backend's clock (``get_dispatch_position``), never the caller's.
The answer and its wording are in ``answer.py``, the facts read in ``facts.py``, the checks
in ``ended.py`` (terminal, poison, archived, running) and ``waiting.py``.
"""

from __future__ import annotations

from uuid import UUID

from taskq_core.backend.protocol import Backend, JobSummary
from taskq_core.backend.protocol.admin import JobQuery
from taskq_core.backend.protocol.poison import is_poison
from taskq_core.errors import JobNotFoundError
from taskq_core.explain.answer import (
    Check,
    ExplainSettings,
    Explanation,
    Situation,
    job_origin,
)
from taskq_core.explain.ended import archived_check, poison_check, running_check, terminal_check
from taskq_core.explain.facts import JobFacts
from taskq_core.explain.waiting import WAITING_CHECKS
from taskq_core.explain.workflow import dependencies_check
from taskq_core.statemachine import JobStatus

# The most running jobs of one actor or queue a capacity check reads (a fleet runs fewer).
_RUNNING_MAX = 100_000

__all__ = ["Check", "ExplainSettings", "Explanation", "Situation", "explain_job", "job_origin"]


async def _running_jobs(
    backend: Backend,
    *,
    actors: tuple[str, ...] | None = None,
    queues: tuple[str, ...] | None = None,
) -> list[JobSummary]:
    """The running jobs of an actor or a queue, as summaries: their payloads and results are
    not read (a page that explains a job is refreshed every few seconds)."""
    query = JobQuery(
        statuses=(JobStatus.RUNNING,), actors=actors, queues=queues, limit=_RUNNING_MAX, count_max=0
    )
    return (await backend.search_jobs(query)).jobs


async def explain_job(
    backend: Backend, job_id: UUID, settings: ExplainSettings | None = None
) -> Explanation:
    """Check every blocker for ``job_id`` in dispatch order; an archived job is explained
    as archived; JobNotFoundError if neither ``jobs`` nor the archive holds it."""
    settings = settings or ExplainSettings()
    job = await backend.get(job_id)
    position = await backend.get_dispatch_position(job_id)
    if job is None or position is None:
        # Not live (or pruned between the two reads): the archive may hold it.
        archived = await backend.get_archived_job(job_id)
        if archived is None:
            raise JobNotFoundError(f"no job with id {job_id}")
        return Explanation(archived.job, None, "archived", [archived_check(archived)])
    context = JobFacts(
        job, position.now, position.ahead, position.ahead_other_cohorts, position.mode, settings
    )
    if job.is_terminal:
        if is_poison(job):
            context.events = await backend.get_events(job.id)
            return Explanation(job, position.now, "terminal", [poison_check(context)])
        return Explanation(job, position.now, "terminal", [terminal_check(context)])
    if job.status is JobStatus.WAITING:
        # A workflow step: dispatch never reads it until its dependencies release it.
        dependencies = await backend.list_step_dependencies(job.id)
        return Explanation(job, position.now, "waiting", [dependencies_check(job, dependencies)])
    context.workers = await backend.list_workers()
    context.leader = await backend.get_leader()
    if job.status is JobStatus.RUNNING:
        return Explanation(job, position.now, "running", [running_check(context)])
    context.queue = await backend.get_queue(job.queue)
    context.events = await backend.get_events(job.id)
    config = await backend.get_actor_config(job.actor)
    context.actor_cap = None if config is None else config.max_concurrent
    context.actor_queue = None if config is None else config.queue
    context.actor_running = await _running_jobs(backend, actors=(job.actor,))
    if context.queue is not None and context.queue.max_concurrent is not None:
        context.queue_running = await _running_jobs(backend, queues=(job.queue,))
    checks = [check(context) for check in WAITING_CHECKS]
    return Explanation(job, position.now, "waiting", checks)
