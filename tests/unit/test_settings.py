from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from taskq_core.errors import ConfigError
from taskq_core.settings import TaskqSettings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("TASKQ_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def test_defaults_follow_the_worker_guide() -> None:
    settings = TaskqSettings.load()
    assert settings.pg_dsn == "postgresql://taskq:taskq@localhost:5432/taskq"
    assert settings.schema_name == "taskq"
    assert settings.queues == ["default"]
    assert settings.heartbeat_interval == 10.0
    assert settings.lock_lease == 60.0
    assert settings.max_retry_backoff == timedelta(hours=24)
    assert settings.sweep_interval == 30.0
    assert settings.scheduled_wake_interval == 1.0
    assert settings.worker_pool_size == 12


def test_environment_and_dotenv_are_read_and_flags_win(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / ".env").write_text("TASKQ_SCHEMA_NAME=from_dotenv\nTASKQ_MAX_CONCURRENCY=3\n")
    monkeypatch.setenv("TASKQ_MAX_CONCURRENCY", "5")
    monkeypatch.setenv("TASKQ_QUEUES", "a, b,c")
    settings = TaskqSettings.load()
    assert settings.schema_name == "from_dotenv"
    assert settings.max_concurrency == 5
    assert settings.queues == ["a", "b", "c"]
    assert TaskqSettings.load(schema_name="flag").schema_name == "flag"


def test_split_dsns_fall_back_to_the_main_dsn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKQ_PG_DSN", "postgresql://u@h/db")
    settings = TaskqSettings.load()
    assert settings.direct_dsn == settings.pooled_dsn == "postgresql://u@h/db"
    monkeypatch.setenv("TASKQ_PG_DSN_POOLED", "postgresql://u@bouncer/db")
    settings = TaskqSettings.load()
    assert settings.direct_dsn == "postgresql://u@h/db"
    assert settings.pooled_dsn == "postgresql://u@bouncer/db"


def test_a_dsn_flag_for_another_database_wins_over_the_split_dsns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TASKQ_PG_DSN", "postgresql://u@h/db")
    monkeypatch.setenv("TASKQ_PG_DSN_DIRECT", "postgresql://u@h:5433/db")
    monkeypatch.setenv("TASKQ_PG_DSN_POOLED", "postgresql://u@bouncer/db")
    other = TaskqSettings.load(pg_dsn="postgresql://u@elsewhere/other")
    assert (other.direct_dsn, other.pooled_dsn) == ("postgresql://u@elsewhere/other",) * 2
    # The environment's own database keeps its split.
    same = TaskqSettings.load(pg_dsn="postgresql://u@h/db")
    assert same.direct_dsn == "postgresql://u@h:5433/db"
    assert same.pooled_dsn == "postgresql://u@bouncer/db"
    # A split DSN given alongside it is kept; the environment's other one is not.
    both = TaskqSettings.load(
        pg_dsn="postgresql://u@elsewhere/other", pg_dsn_pooled="postgresql://u@b2/other"
    )
    assert both.pooled_dsn == "postgresql://u@b2/other"
    assert both.direct_dsn == "postgresql://u@elsewhere/other"


def test_the_replica_dsn_is_optional_checked_and_belongs_to_its_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TASKQ_PG_DSN", "postgresql://u@h/db")
    assert TaskqSettings.load().pg_dsn_replica is None
    monkeypatch.setenv("TASKQ_PG_DSN_REPLICA", "")
    assert TaskqSettings.load().pg_dsn_replica is None  # empty: unset
    monkeypatch.setenv("TASKQ_PG_DSN_REPLICA", "mysql://u@standby/db")
    with pytest.raises(ConfigError, match="TASKQ_PG_DSN_REPLICA"):
        TaskqSettings.load()
    monkeypatch.setenv("TASKQ_PG_DSN_REPLICA", "postgresql://u@standby/db")
    assert TaskqSettings.load().pg_dsn_replica == "postgresql://u@standby/db"
    # A --dsn naming another database reads that database, not this one's replica.
    assert TaskqSettings.load(pg_dsn="postgresql://u@elsewhere/other").pg_dsn_replica is None


def test_durations_accept_human_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKQ_HEARTBEAT_INTERVAL", "2s")
    monkeypatch.setenv("TASKQ_LOCK_LEASE", "PT1M")
    monkeypatch.setenv("TASKQ_MAX_RETRY_BACKOFF", "2h")
    settings = TaskqSettings.load()
    assert settings.heartbeat_interval == 2.0
    assert settings.lock_lease == 60.0
    assert settings.max_retry_backoff == timedelta(hours=2)


@pytest.mark.parametrize(
    ("env", "names"),
    [
        (
            {"TASKQ_LOCK_LEASE": "30", "TASKQ_HEARTBEAT_INTERVAL": "10"},
            ["TASKQ_LOCK_LEASE", "TASKQ_HEARTBEAT_INTERVAL"],
        ),
        (
            {"TASKQ_CANCELLATION_GRACE_PERIOD": "50", "TASKQ_CLEANUP_GRACE_PERIOD": "30"},
            ["TASKQ_CANCELLATION_GRACE_PERIOD", "TASKQ_TERMINATION_GRACE_PERIOD"],
        ),
        (
            {
                "TASKQ_CANCELLATION_GRACE_PERIOD": "40",
                "TASKQ_CLEANUP_GRACE_PERIOD": "20",
                "TASKQ_TERMINATION_GRACE_PERIOD": "200",
            },
            ["TASKQ_CANCELLATION_GRACE_PERIOD", "TASKQ_LOCK_LEASE"],
        ),
    ],
)
def test_every_invariant_violation_names_the_variables(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], names: list[str]
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError) as caught:
        TaskqSettings.load()
    message = str(caught.value)
    assert "\n" not in message
    for name in names:
        assert name in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("TASKQ_MAX_CONCURRENCY", "many"),
        ("TASKQ_MAX_CONCURRENCY", "0"),
        ("TASKQ_LOCK_LEASE", "soon"),
        ("TASKQ_PG_DSN", "mysql://x"),
        ("TASKQ_SCHEMA_NAME", "x;drop"),
        ("TASKQ_LOG_FORMAT", "xml"),
        ("TASKQ_PRUNE_SCHEDULE_UTC", "25:00"),
        ("TASKQ_NOTIFY_ENABLED", "perhaps"),
    ],
)
def test_malformed_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, key: str, value: str
) -> None:
    monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError) as caught:
        TaskqSettings.load()
    assert key in str(caught.value)
    assert "\n" not in str(caught.value)


def test_embedded_dsns_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKQ_PG_DSN", "embedded")
    assert TaskqSettings.load().pg_dsn == "embedded"
    assert TaskqSettings.load(pg_dsn="embedded:/tmp/x").pg_dsn == "embedded:/tmp/x"


@pytest.mark.parametrize(
    "key",
    [
        "TASKQ_PRUNE_RETENTION_PERIOD",
        "TASKQ_PRUNE_RETENTION_SUCCEEDED",
        "TASKQ_PRUNE_RETENTION_FAILED",
        "TASKQ_PRUNE_RETENTION_CANCELLED",
        "TASKQ_PRUNE_RETENTION_ABANDONED",
        "TASKQ_ARCHIVE_RETENTION_PERIOD",
    ],
)
@pytest.mark.parametrize("value", ["0", "0s", "PT0S", "-1d", "-5"])
def test_a_retention_that_is_not_positive_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, key: str, value: str
) -> None:
    monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError) as caught:
        TaskqSettings.load()
    assert str(caught.value) == (
        f"invalid setting {key} (got {value!r}): must be a positive duration such as 30d"
    )


@pytest.mark.parametrize("key", ["TASKQ_PRUNE_CRON_EXPR", "TASKQ_ARCHIVE_EXPIRY_CRON_EXPR"])
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("61 * * * *", "not a valid cron expression: bad minute"),
        ("* * * *", "expected a 5-field cron expression"),
        ("every day", "expected a 5-field cron expression"),
    ],
)
def test_an_unparsable_cron_expression_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, key: str, value: str, reason: str
) -> None:
    monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError) as caught:
        TaskqSettings.load()
    message = str(caught.value)
    assert message.startswith(f"invalid setting {key} (got {value!r}): ")
    assert reason in message and "\n" not in message


@pytest.mark.parametrize("key", ["TASKQ_PRUNE_SCHEDULE_UTC", "TASKQ_ARCHIVE_EXPIRY_SCHEDULE_UTC"])
@pytest.mark.parametrize("value", ["24:00", "3", "03:7", "noon"])
def test_an_unparsable_daily_time_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, key: str, value: str
) -> None:
    monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError) as caught:
        TaskqSettings.load()
    assert (
        str(caught.value)
        == f"invalid setting {key} (got {value!r}): expected HH:MM (24-hour clock, UTC)"
    )


def test_retention_and_schedule_settings_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKQ_PRUNE_RETENTION_FAILED", "7d")
    monkeypatch.setenv("TASKQ_ARCHIVE_RETENTION_PERIOD", "PT12H")
    monkeypatch.setenv("TASKQ_PRUNE_CRON_EXPR", " */5  * * * * ")
    monkeypatch.setenv("TASKQ_ARCHIVE_EXPIRY_CRON_EXPR", "")  # empty: unset
    monkeypatch.setenv("TASKQ_ARCHIVE_EXPIRY_SCHEDULE_UTC", "5:30")
    settings = TaskqSettings.load()
    assert settings.prune_retention_failed == timedelta(days=7)
    assert settings.archive_retention_period == timedelta(hours=12)
    assert settings.prune_cron_expr == "*/5 * * * *"
    assert settings.archive_expiry_cron_expr is None
    assert settings.archive_expiry_schedule_utc == "5:30"
