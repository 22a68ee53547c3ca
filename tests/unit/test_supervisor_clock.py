"""The supervisor reads time only through its injected Clock, so FakeClock replays stay exact.

A direct ``time.monotonic()`` or ``datetime.now()`` in ``taskq_core/supervisor`` would mix the
host's clock with a test's FakeClock; this check keeps such a read from creeping back in.
"""

from __future__ import annotations

import ast
from pathlib import Path

import taskq_core.supervisor

SUPERVISOR = Path(taskq_core.supervisor.__file__).parent
WALL_CLOCK_READS = {"now", "utcnow", "today", "fromtimestamp"}


def direct_time_reads(source: str) -> list[str]:
    """Each import of ``time`` and each ``datetime.now()``-style call, as ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import time" for a in node.names if a.name == "time"]
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            found.append(f"{node.lineno}: from time import ...")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in WALL_CLOCK_READS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in ("datetime", "date")
        ):
            found.append(f"{node.lineno}: {node.func.value.id}.{node.func.attr}()")
    return found


def test_no_supervisor_module_reads_the_host_clock_directly() -> None:
    modules = sorted(SUPERVISOR.glob("*.py"))
    assert {"manager.py", "policy.py", "runtime.py"} <= {m.name for m in modules}
    reads = {m.name: direct_time_reads(m.read_text()) for m in modules}
    assert {name: found for name, found in reads.items() if found} == {}


def test_the_check_sees_the_reads_it_forbids() -> None:
    source = (
        "import time\nfrom datetime import datetime\nx = datetime.now()\ny = time.monotonic()\n"
    )
    assert direct_time_reads(source) == ["1: import time", "3: datetime.now()"]
