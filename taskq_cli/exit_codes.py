"""The CLI's own exit codes, importable at start-up without loading the library.

``taskq_core.constants`` holds the worker's exit codes; the two here are the ones the
console script returns before (or without) loading it.
"""

from __future__ import annotations

# An error (taskq_core.constants.EXIT_ERROR, not imported: that loads the library).
EXIT_ERROR = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a Ctrl-C
