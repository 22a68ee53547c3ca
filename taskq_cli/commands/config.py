"""``taskq config``: every effective setting, where its value came from, secrets masked.

The sources are the ones ``TaskqSettings.load`` merges, highest first: a flag (``--dsn``,
``--schema``, on ``taskq`` or on this command), the environment, the ``.env`` file of the
current directory, the default. A password in a DSN or URL, and any setting named like a
token, password or secret, shows as ``***``.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import typer
from pydantic_settings import DotEnvSettingsSource, EnvSettingsSource

from taskq_cli import output
from taskq_cli.options import DsnOption, JsonOption, SchemaOption, global_options, load_settings
from taskq_core.credentials import shown_value
from taskq_core.durations import format_duration
from taskq_core.setting_types import Duration, OptionalSeconds, Seconds
from taskq_core.settings import ENV_PREFIX, TaskqSettings

Source = Literal["flag", "environment", ".env", "default"]

# The settings module's duration types: their values read "30s", "5m" for humans.
_DURATION_TYPES = (Seconds, OptionalSeconds, Duration)


@dataclass(frozen=True)
class EffectiveSetting:
    """One setting: its field and variable, its value as the process uses it (masked), its
    source, and whether a secret was masked in it."""

    field: str
    variable: str
    value: Any
    source: Source
    secret: bool


def mask(name: str, value: Any) -> tuple[Any, bool]:
    """``value`` with any secret in it replaced by ``***`` (the rule of
    ``taskq_core.credentials``), and whether something was."""
    if not isinstance(value, str):
        return value, False
    masked = shown_value(name, value)
    return masked, masked != value


def _flags(ctx: typer.Context, dsn: str | None, schema: str | None) -> dict[str, Any]:
    """The settings given as flags, as ``load_settings`` merges them."""
    root = global_options(ctx)
    given = {"pg_dsn": dsn or root.dsn, "schema_name": schema or root.schema}
    return {name: value for name, value in given.items() if value is not None}


def _env_file() -> Path | None:
    """The ``.env`` file settings are read from, when there is one."""
    name = TaskqSettings.model_config.get("env_file")
    path = Path(str(name)) if isinstance(name, str | Path) else None
    return path.resolve() if path is not None and path.is_file() else None


def effective_settings(settings: TaskqSettings, flags: dict[str, Any]) -> list[EffectiveSetting]:
    """Every field of ``settings`` in declaration order, with the source that won."""
    fields = TaskqSettings.model_fields
    from_env = set(EnvSettingsSource(TaskqSettings)()) & set(fields)
    from_dotenv = set(DotEnvSettingsSource(TaskqSettings)()) & set(fields)
    rows = []
    for name in fields:
        source: Source
        if name in flags:
            source = "flag"
        elif name in from_env:
            source = "environment"
        elif name in from_dotenv:
            source = ".env"
        else:
            source = "default"
        value, secret = mask(name, getattr(settings, name))
        rows.append(EffectiveSetting(name, ENV_PREFIX + name.upper(), value, source, secret))
    return rows


def _shown(value: Any, hint: Any) -> str | None:
    """A value as it would be written in ``TASKQ_*`` (durations as ``30s``, lists joined)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if any(hint == alias for alias in _DURATION_TYPES):
        delta = value if isinstance(value, timedelta) else timedelta(seconds=value)
        return format_duration(delta)
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def config(
    ctx: typer.Context,
    json: JsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Print every effective setting and its source, secrets masked.

    Sources, highest first: flag, environment, the .env file, default. Reads no database.
    """
    settings = load_settings(ctx, dsn, schema)
    rows = effective_settings(settings, _flags(ctx, dsn, schema))
    env_file = _env_file()
    if json:
        output.print_json(
            {
                "env_file": None if env_file is None else str(env_file),
                "settings": {
                    row.variable: {"value": row.value, "source": row.source} for row in rows
                },
            }
        )
        return
    hints = typing.get_type_hints(TaskqSettings, include_extras=True)
    table = [[row.variable, _shown(row.value, hints[row.field]), row.source] for row in rows]
    output.print_table(
        (output.Column("setting"), output.Column("value"), output.Column("source")), table
    )
    output.note(f".env: {env_file}" if env_file is not None else ".env: none in this directory")
