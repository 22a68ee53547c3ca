"""The Litestar application: templates, static files, OpenAPI under /api, the read model,
the security middleware, the checks made before routing and the outage answer.

The ``DashboardSource`` (taskq_cli/dashboard/, shared with ``taskq top``) is built by the
caller; handlers reach it through the ``ui`` dependency (``Ui``: the source, the schedules,
the fleet metrics and the options), so pages and ``/api/`` read through one place and no
query is written twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from litestar import Litestar, MediaType, Response, get
from litestar.datastructures import State
from litestar.di import Provide
from litestar.params import HeaderParameter
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig

from taskq_cli.dashboard.source import BackendSource, DashboardSource
from taskq_cli.ui import outage
from taskq_cli.ui.actions import BackendActions, OperatorActions
from taskq_cli.ui.config import (
    HTMX_FILE,
    MetricsExposition,
    ScheduleReader,
    Ui,
    UiConfig,
    UiDependency,
    WorkflowReader,
)
from taskq_cli.ui.format import FILTERS
from taskq_cli.ui.openapi import document_refusals, openapi_config
from taskq_cli.ui.pages import batches, job_detail, jobs, limits, login, overview, queues, workers
from taskq_cli.ui.pages import schedules as schedule_pages
from taskq_cli.ui.pages import workflows as workflow_pages
from taskq_cli.ui.request_guard import AdminRequest, RequestGuard
from taskq_cli.ui.security import SecurityMiddleware
from taskq_cli.ui.sign_ins import SignIns

HERE = Path(__file__).parent
# The bodies the UI takes are a login form and a reason; a larger one is 413.
MAX_BODY_BYTES = 64 * 1024


def _ui(state: State) -> Ui:
    ui: Ui = state.ui
    return ui


def _template_globals(engine: JinjaTemplateEngine, config: UiConfig) -> None:
    env = engine.engine
    env.autoescape = True  # Litestar's default too: every value from the database is escaped
    env.filters.update(FILTERS)
    env.globals["htmx_file"] = HTMX_FILE
    env.globals["read_only"] = config.read_only
    env.globals["refresh_seconds"] = config.refresh_seconds
    env.globals["signed_in"] = config.token is not None


@get("/metrics", include_in_schema=False, media_type=MediaType.TEXT)
async def metrics_endpoint(
    ui: UiDependency, accept: Annotated[str | None, HeaderParameter(name="accept")] = None
) -> Response[bytes]:
    """The fleet metrics (taskq_core/obs/fleet.py) in Prometheus' text format."""
    assert ui.metrics is not None, "registered only with metrics"
    content_type, body = await ui.metrics.exposition(accept)
    return Response(body, media_type=content_type)


def create_app(
    source: DashboardSource,
    config: UiConfig,
    *,
    schedules: ScheduleReader | None = None,
    actions: OperatorActions | None = None,
    workflows: WorkflowReader | None = None,
    metrics: MetricsExposition | None = None,
    debug: bool = False,
) -> Litestar:
    """The admin UI over ``source``; the caller owns the source's backend (opens and closes
    it). ``schedules``, ``actions`` (the operator's writes) and ``workflows`` default to a
    BackendSource's backend; ``metrics`` (the fleet metrics) adds ``/metrics``."""
    if schedules is None or actions is None or workflows is None:
        if not isinstance(source, BackendSource):
            raise TypeError(
                "create_app needs schedules=, actions= and workflows= with a source other "
                "than BackendSource"
            )
        schedules = schedules or source.backend
        actions = actions or BackendActions(source.primary)
        workflows = workflows or source.backend

    def replica_note() -> str | None:
        """The replica's last staleness line (None: the reads go to the primary)."""
        replica = source.replica if isinstance(source, BackendSource) else None
        return None if replica is None else replica.note

    def configure(engine: JinjaTemplateEngine) -> None:
        _template_globals(engine, config)
        engine.engine.globals["replica_note"] = replica_note

    handlers: list[Any] = [
        create_static_files_router(path="/static", directories=[HERE / "static"]),
        *login.HANDLERS,
        *overview.HANDLERS,
        *queues.HANDLERS,
        *workers.HANDLERS,
        *schedule_pages.HANDLERS,
        *limits.HANDLERS,
        *jobs.HANDLERS,
        *job_detail.HANDLERS,
        *batches.HANDLERS,
        *workflow_pages.HANDLERS,
    ]
    if metrics is not None:
        handlers.append(metrics_endpoint)
    sign_ins = None if config.token is None else SignIns(config.token, config.session_lifetime)
    ui = Ui(source, config, schedules, actions, workflows, metrics=metrics, sign_ins=sign_ins)
    app = Litestar(
        route_handlers=handlers,
        dependencies={"ui": Provide(_ui, sync_to_thread=False)},
        state=State({"ui": ui}),
        middleware=[SecurityMiddleware(config, sign_ins)],
        exception_handlers=outage.HANDLERS,
        request_class=AdminRequest,
        request_max_body_size=MAX_BODY_BYTES,
        template_config=TemplateConfig(
            directory=HERE / "templates", engine=JinjaTemplateEngine, engine_callback=configure
        ),
        openapi_config=openapi_config(config),
        # Litestar's default would put its own handler on the root logger: every standard
        # record (uvicorn's too) in its format, through its thread, not TaskQ's logging.
        logging_config=None,
        debug=debug,
    )
    document_refusals(app, config)
    app.asgi_handler = RequestGuard(app.asgi_handler)  # before routing: Host, raw path
    return app
