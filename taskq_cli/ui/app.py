"""The Litestar application: templates, static files, OpenAPI under /api, the read model.

The ``DashboardSource`` (taskq_cli/tui/source.py, shared with ``taskq top``) is built by the
caller; handlers reach it through the ``ui`` dependency (``Ui``: the source and the options),
so pages and ``/api/`` read through one place and no query is written twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar import Litestar
from litestar.contrib.jinja import JinjaTemplateEngine
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig

from taskq_cli.tui.source import DashboardSource
from taskq_cli.ui.config import HTMX_FILE, Ui, UiConfig
from taskq_cli.ui.pages import overview

HERE = Path(__file__).parent


def _ui(state: State) -> Ui:
    ui: Ui = state.ui
    return ui


def _template_globals(engine: JinjaTemplateEngine, config: UiConfig) -> None:
    env = engine.engine
    env.globals["htmx_file"] = HTMX_FILE
    env.globals["read_only"] = config.read_only
    env.globals["refresh_seconds"] = config.refresh_seconds


def create_app(source: DashboardSource, config: UiConfig, *, debug: bool = False) -> Litestar:
    """The admin UI over ``source``; the caller owns the source's backend (opens and closes it)."""

    def configure(engine: JinjaTemplateEngine) -> None:
        _template_globals(engine, config)

    handlers: list[Any] = [
        create_static_files_router(path="/static", directories=[HERE / "static"]),
        *overview.HANDLERS,
    ]
    return Litestar(
        route_handlers=handlers,
        dependencies={"ui": Provide(_ui, sync_to_thread=False)},
        state=State({"ui": Ui(source, config)}),
        template_config=TemplateConfig(
            directory=HERE / "templates", engine=JinjaTemplateEngine, engine_callback=configure
        ),
        openapi_config=OpenAPIConfig(title="TaskQ admin", version="1", path="/api"),
        debug=debug,
    )
