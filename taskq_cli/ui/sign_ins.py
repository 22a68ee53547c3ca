"""The admin UI's token: how strong it must be, and every check of it a client asks for.

``token_weakness`` is what ``taskq ui serve`` refuses at start: a token shorter than
MIN_TOKEN_LENGTH characters, or one a guesser would try early (few distinct characters, or
mostly runs and repeats such as ``aaaa`` or ``0123``). ``SignIns`` checks a token a client
gives (the login form, a Bearer header): in constant time, through the per-client backoff
of login_throttle.py, logging each failure (``ui_sign_in_failed``: the address, how the
token came and how many failures in a row; never the token) within a LogBudget; and it
holds the sessions a right token opens (sessions.py).
"""

from __future__ import annotations

import hmac
import itertools
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from taskq_cli.ui.log_budget import LogBudget
from taskq_cli.ui.login_throttle import LoginThrottle
from taskq_cli.ui.sessions import SessionStore
from taskq_core.obs.logs import get_logger

# 32 random hex digits are 128 bits; `openssl rand -hex 32` gives 64.
MIN_TOKEN_LENGTH = 32
# Fewer distinct characters than this in a token of the minimum length is a pattern.
MIN_DISTINCT_CHARACTERS = 8
# Neighbours equal or one apart ("aa", "ab", "10"): a random token has a few, a pattern most.
MAX_RUN_SHARE = 0.6
SIGN_IN_FAILED = "ui_sign_in_failed"

Via = Literal["form", "bearer"]


def token_weakness(token: str) -> str | None:
    """Why ``token`` is too weak to guard the admin UI (None: it will do). The reason never
    repeats the token."""
    if len(token) < MIN_TOKEN_LENGTH:
        return (
            f"TASKQ_ADMIN_TOKEN is {len(token)} characters; use at least {MIN_TOKEN_LENGTH} "
            "random ones (for example: openssl rand -hex 32)"
        )
    neighbours = list(itertools.pairwise(token))
    runs = sum(1 for left, right in neighbours if abs(ord(left) - ord(right)) <= 1)
    if len(set(token)) < MIN_DISTINCT_CHARACTERS or runs > MAX_RUN_SHARE * len(neighbours):
        return (
            "TASKQ_ADMIN_TOKEN is easy to guess (a few characters repeated, or runs such as "
            "aaaa or 1234); use a random value (for example: openssl rand -hex 32)"
        )
    return None


def token_matches(expected: str, given: str) -> bool:
    """Whether ``given`` is the token, in time independent of where they differ."""
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True)
class TokenCheck:
    """What a token check decided: ``ok``, or refused; ``retry_after`` > 0: the client is
    locked out for that long and its token was not compared."""

    ok: bool
    retry_after: float = 0.0


class SignIns:
    """Token checks and sessions of one server with a token."""

    def __init__(
        self,
        token: str,
        session_lifetime: timedelta,
        *,
        throttle: LoginThrottle | None = None,
        budget: LogBudget | None = None,
    ) -> None:
        self.token = token
        self.sessions = SessionStore(session_lifetime)
        self.throttle = throttle or LoginThrottle()
        self.budget = budget or LogBudget()
        self.log = get_logger("ui")

    def check(self, client: str, given: str, via: Via) -> TokenCheck:
        """Check a token ``client`` gave by ``via``, counting and logging a wrong one."""
        wait = self.throttle.wait(client)
        if wait > 0:
            return TokenCheck(False, wait)
        if token_matches(self.token, given):
            self.throttle.succeeded(client)
            return TokenCheck(True)
        failures, locked_for = self.throttle.failed(client)
        held = self.budget.take(SIGN_IN_FAILED)
        if held is not None:
            self.log.warning(
                SIGN_IN_FAILED,
                client=client,
                via=via,
                failures_in_a_row=failures,
                locked_out_seconds=locked_for,
                not_logged_before=held,
            )
        return TokenCheck(False)
