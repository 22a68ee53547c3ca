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
