"""The garbage collector of a worker's process: young collections spaced out, start-up frozen.

A job makes a few dozen short-lived containers (its row, context, task, futures), so at the
default threshold of 700 the youngest generation was collected every few jobs, and every
tenth pass walked the middle generation too: 10-20% of a busy worker's CPU per job
(docs/performance.md). While any worker of the process runs (``Worker.run``), the youngest
generation is collected every ``GC_YOUNG_THRESHOLD`` allocations instead; the threshold the
process had comes back once the last of them stopped, so an application that runs a worker
inside its own process gets its collector back as it was. ``taskq worker``, whose process is
the worker's alone, also freezes what start-up built (``freeze_start_up``).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from taskq_core.constants import GC_YOUNG_THRESHOLD

# How many workers of this process run now, and the threshold the first of them found.
_running = 0
_found: tuple[int, int, int] | None = None


@contextmanager
def young_collections_spaced() -> Iterator[None]:
    """Collect the youngest generation every ``GC_YOUNG_THRESHOLD`` allocations meanwhile."""
    global _running, _found
    if _running == 0:
        _found = gc.get_threshold()
        gc.set_threshold(max(GC_YOUNG_THRESHOLD, _found[0]), _found[1], _found[2])
    _running += 1
    try:
        yield
    finally:
        _running -= 1
        if _running == 0 and _found is not None:
            gc.set_threshold(*_found)
            _found = None


def freeze_start_up() -> None:
    """Keep the collector off everything alive now (modules, classes, actors, settings):
    in a process of its own, they live as long as it does."""
    gc.collect()
    gc.freeze()
