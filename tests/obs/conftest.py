"""Fixtures of the observability tests: an OpenTelemetry SDK of the test's own (``sdk``,
``meters_only``) and the in-process worker factory of the worker tests (``make_worker``)."""

from tests.obs.otel_sdk import meters_only, sdk  # noqa: F401 (fixtures)
from tests.worker.conftest import make_worker  # noqa: F401 (fixture)
