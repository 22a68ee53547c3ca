from __future__ import annotations

import pytest

from taskq_core.errors import InvalidTransitionError
from taskq_core.statemachine import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    VALID_TRANSITIONS,
    JobStatus,
    assert_valid_transition,
    parse_status,
)


def test_terminal_and_active_statuses_partition_every_status() -> None:
    assert TERMINAL_STATUSES | ACTIVE_STATUSES == set(JobStatus)
    assert not TERMINAL_STATUSES & ACTIVE_STATUSES
    assert ACTIVE_STATUSES == {
        JobStatus.WAITING,
        JobStatus.PENDING,
        JobStatus.SCHEDULED,
        JobStatus.RUNNING,
    }


def test_terminal_statuses_have_no_way_out() -> None:
    for status in TERMINAL_STATUSES:
        for target in JobStatus:
            with pytest.raises(InvalidTransitionError):
                assert_valid_transition(status, target, "j1")


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (JobStatus.PENDING, JobStatus.RUNNING),
        (JobStatus.SCHEDULED, JobStatus.PENDING),
        (JobStatus.RUNNING, JobStatus.SCHEDULED),
        (JobStatus.RUNNING, JobStatus.ABANDONED),
        (JobStatus.PENDING, JobStatus.FAILED),
    ],
)
def test_design_transitions_are_allowed(source: JobStatus, target: JobStatus) -> None:
    assert_valid_transition(source, target, "j1")


def test_pending_cannot_jump_to_succeeded() -> None:
    with pytest.raises(InvalidTransitionError, match="pending -> succeeded"):
        assert_valid_transition(JobStatus.PENDING, JobStatus.SUCCEEDED, "j1")


def test_every_status_has_a_transition_entry() -> None:
    assert set(VALID_TRANSITIONS) == set(JobStatus)


def test_parse_status_rejects_unknown_names() -> None:
    assert parse_status("failed") is JobStatus.FAILED
    with pytest.raises(ValueError, match="unknown status 'done'"):
        parse_status("done")
