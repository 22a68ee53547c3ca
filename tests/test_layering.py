"""taskq_core must never pull in the CLI stack: checked in a clean interpreter and in source."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

FORBIDDEN = ("taskq_cli", "typer", "textual", "rich")


def test_importing_taskq_core_loads_no_cli_or_tui_modules() -> None:
    # rich is left out here: structlog imports it on its own when it is installed.
    code = (
        "import sys, taskq_core, taskq_core.settings, taskq_core.backend.postgres.migrate;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('taskq_cli', 'typer', 'textual')];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_an_application_that_enqueues_or_runs_a_worker_loads_no_telemetry_sdk() -> None:
    # The SDK (about a tenth of the client's import on a slow host) is for a worker that
    # exports: taskq worker builds its providers only when an exporter is named.
    code = (
        "import sys, taskq_core.client, taskq_core.worker.runtime;"
        "print(','.join(m for m in sys.modules if m.startswith('opentelemetry.sdk')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_no_taskq_core_module_imports_the_cli_stack() -> None:
    root = Path(__file__).resolve().parents[1] / "taskq_core"
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []


def test_the_public_names_load_on_first_use_and_all_resolve() -> None:
    code = (
        "import sys, taskq_core.statemachine;"
        "early = [m for m in ('taskq_core.client', 'pydantic_settings') if m in sys.modules];"
        "import taskq_core;"
        "missing = [n for n in taskq_core.__all__ if getattr(taskq_core, n, None) is None];"
        "print(','.join(early) + '|' + ','.join(missing))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "|"


# --- The import graph of taskq_core and taskq_cli ------------------------------------------
# Every import statement counts: module level, inside functions (the lazy imports that keep
# start-up cheap are still dependencies) and under ``if TYPE_CHECKING:`` (a cycle that exists
# only for the type checker is still two modules that each need the other to be understood;
# two of the four circles issue 34 removed were of that kind). An import of ``a.b.c`` is an
# edge to the longest prefix that is one of our modules; ``from pkg import name`` is an edge
# to ``pkg.name`` when that is a module, else to ``pkg``. The parent packages Python loads
# along the way are not edges: every ``__init__`` here is a facade or empty.

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("taskq_core", "taskq_cli")


def _our_modules() -> dict[str, tuple[Path, bool]]:
    """Each module's dotted name -> (its file, whether it is a package's ``__init__``)."""
    found = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports."""
    modules = _our_modules()

    def ours(name: str) -> str | None:
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            candidate = ".".join(parts[:end])
            if candidate in modules:
                return candidate
        return None

    graph: dict[str, set[str]] = {}
    for module, (path, is_package) in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolved against the importing module's package
                    package = module.split(".")[: None if is_package else -1]
                    package = package[: len(package) - node.level + 1]
                    base = ".".join([*package, *([node.module] if node.module else [])])
                names = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            targets |= {t for t in map(ours, names) if t is not None and t != module}
        graph[module] = targets
    return graph


GRAPH = _import_graph()


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    assert _cycles(GRAPH) == []


# The one module outside the driver that may name it: the factory opens every backend.
POSTGRES = "taskq_core.backend.postgres"
FACTORY = "taskq_core.backend.factory"


def test_only_the_driver_and_the_factory_import_the_postgres_package() -> None:
    offenders = [
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if not _under(module, POSTGRES) and module != FACTORY
        for target in targets
        if _under(target, POSTGRES)
    ]
    assert offenders == []


_CLIENT = (
    "taskq_core.client",
    "taskq_core.client_batches",
    "taskq_core.client_progress",
    "taskq_core.client_reclaims",
    "taskq_core.client_workflows",
    "taskq_core.enqueue_plan",
)
_WORKER, _SUPERVISOR, _OBS = "taskq_core.worker", "taskq_core.supervisor", "taskq_core.obs"

# (modules under these prefixes, must not import modules under these, except these modules,
# why). The layers, bottom up: the backend (protocol, drivers); obs (telemetry over it); the
# client, the worker and the supervisor side by side; the CLI on top.
LAYER_RULES: list[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], str]] = [
    (("taskq_core",), ("taskq_cli",), (), "the library never imports the CLI"),
    (
        ("taskq_core.backend",),
        (_WORKER, _SUPERVISOR, _OBS, "taskq_core.actor_config", *_CLIENT),
        # The composition root: it opens the driver and installs obs's hooks on it.
        (FACTORY,),
        "the backend imports nothing above it; telemetry reaches it through backend.hooks",
    ),
    (
        (_OBS,),
        (_WORKER, _SUPERVISOR, POSTGRES, "taskq_core.backend.memory", FACTORY, *_CLIENT),
        (),
        "obs sees workers and drivers through protocols, never their modules",
    ),
    ((_WORKER,), (_SUPERVISOR, *_CLIENT), (), "the worker neither supervises nor enqueues"),
    ((_SUPERVISOR,), (_WORKER, *_CLIENT), (), "the supervisor runs workers as processes"),
    (_CLIENT, (_WORKER, _SUPERVISOR), (), "the client only talks to the backend"),
]


def test_no_import_runs_up_the_layers() -> None:
    offenders = [
        f"{module} -> {target}: {why}"
        for sources, forbidden, exempt, why in LAYER_RULES
        for module, targets in GRAPH.items()
        if any(_under(module, s) for s in sources) and module not in exempt
        for target in targets
        if any(_under(target, f) for f in forbidden)
    ]
    assert offenders == []


def test_the_graph_sees_lazy_and_type_checking_imports() -> None:
    # The factory imports the driver only inside functions, the gauges' worker protocol
    # replaced a TYPE_CHECKING import: both kinds must be edges for the rules to hold.
    assert f"{POSTGRES}.backend" in GRAPH[FACTORY]
    assert "taskq_core.enqueue_plan" in GRAPH["taskq_core.client_batches"]


def _imported_modules(path: Path) -> list[str]:
    """Every module ``path`` imports, absolute names (its imports are all absolute)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def _offenders(package: str, forbidden: tuple[str, ...]) -> list[str]:
    """``file: module`` for each import under ``taskq_cli/<package>`` of a forbidden module
    (a forbidden name matches itself and everything under it)."""
    root = Path(__file__).resolve().parents[1] / "taskq_cli" / package
    return [
        f"{path.relative_to(root.parent)}: {name}"
        for path in sorted(root.rglob("*.py"))
        for name in _imported_modules(path)
        if any(name == bad or name.startswith(bad + ".") for bad in forbidden)
    ]


def test_the_web_ui_never_imports_the_terminal_ui() -> None:
    # The web UI reads through taskq_cli.dashboard, the read model both dashboards share.
    assert _offenders("ui", ("taskq_cli.tui", "textual")) == []


def test_the_shared_read_model_imports_neither_dashboard() -> None:
    forbidden = ("taskq_cli.tui", "taskq_cli.ui", "textual", "litestar", "typer")
    assert _offenders("dashboard", forbidden) == []


def test_serving_the_web_ui_loads_no_textual_module() -> None:
    code = (
        "import sys, taskq_cli.commands.ui, taskq_cli.ui.app;"
        "bad = [m for m in sys.modules"
        " if m.split('.')[0] == 'textual' or m.startswith('taskq_cli.tui')];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# --- The backends' parts: composed over one core, never over each other --------------------
# A part that needs another part's work calls a module-level function over the core (e.g.
# ``settle.settle_rows`` for the reclaim, ``enqueue.enqueue_job`` for a batch's finalizer);
# only the final backend class combines the parts.


def _parts(package: str) -> dict[str, type]:
    """Every class named ``*Part`` defined in the modules of ``package``."""
    import importlib
    import inspect

    found: dict[str, type] = {}
    for path in sorted((REPO / package.replace(".", "/")).glob("*.py")):
        module = importlib.import_module(f"{package}.{path.stem}".removesuffix(".__init__"))
        for name, member in vars(module).items():
            if (
                inspect.isclass(member)
                and name.endswith("Part")
                and member.__module__ == module.__name__
            ):
                found[f"{path.stem}.{name}"] = member
    return found


def test_no_memory_backend_part_inherits_from_another_part() -> None:
    from taskq_core.backend.memory import InMemoryBackend
    from taskq_core.backend.memory.store import MemoryStore

    parts = _parts("taskq_core.backend.memory")
    assert set(InMemoryBackend.__bases__) <= set(parts.values())
    assert {
        name: part.__bases__ for name, part in parts.items() if part.__bases__ != (MemoryStore,)
    } == {}


def test_no_postgres_backend_part_inherits_from_another_part() -> None:
    from taskq_core.backend.postgres.backend import PostgresBackend
    from taskq_core.backend.postgres.core import BackendCore

    parts = _parts("taskq_core.backend.postgres")
    assert set(PostgresBackend.__bases__) <= set(parts.values())
    assert {
        name: part.__bases__ for name, part in parts.items() if part.__bases__ != (BackendCore,)
    } == {}


# A module a reviewer reads in one sitting: past this, split it along its jobs (issue 34).
MAX_MODULE_LINES = 500


def test_no_module_is_longer_than_a_sitting() -> None:
    long = {
        str(path.relative_to(REPO)): n
        for package in PACKAGES
        for path in (REPO / package).rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}
