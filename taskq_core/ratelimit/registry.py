"""RateLimitRegistry: the named limits of a process, and each actor's limits resolved against
them at worker start.

An actor names a limit by string (registered beforehand: ``rate_limits.register(...)`` on the
module-level ``default_registry``, or on a registry given to the worker) or declares it
inline; inline limits join the registry when the worker starts. Resolution refuses, naming the
actor and the limit: an unknown name, a name of the wrong kind (a reservation among
rate_limits) and two different definitions of one name. A rate limit declared inline with a
``cost`` gives that cost to the declaring actor's use of it (``LimitUse``); the registry keeps the
definition alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from taskq_core.errors import ConfigError
from taskq_core.ratelimit.primitives import (
    ConcurrencyReservation,
    KeyedRateLimitRef,
    KeyedReservationRef,
    Limit,
    SlidingWindow,
    TokenBucket,
    check_declarations,
    unweighted,
)

if TYPE_CHECKING:  # actors imports this package's primitives: no import cycle at run time
    from taskq_core.actors import ActorRef


class KeyFunctionError(Exception):
    """A keyed limit could not name the job's key: its payload does not fit the limit's
    payload_type, or its key_fn raised. The job fails (retrying cannot help)."""

    error_class = "RateLimitKeyError"  # the failed job's error class


class CostFunctionError(KeyFunctionError):
    """A weighted limit could not price the job: its cost function raised or returned no
    whole number from 0 to the limit's capacity. The job fails like an unkeyed one."""

    error_class = "RateLimitCostError"


@dataclass(frozen=True)
class LimitUse:
    """One limit an actor uses: ``limit`` itself, or, with ``key_fn``, the template each
    payload key gets a copy of (named ``<name>:<key>``). Each job takes ``cost`` units of it,
    or what ``cost_fn(payload)`` returns."""

    limit: Limit
    key_fn: Callable[[Any], object] | None = None
    payload_type: type[BaseModel] | None = None
    cost: int = 1
    cost_fn: Callable[[Any], object] | None = None

    @property
    def name(self) -> str:
        """The limit's (or the template's) name."""
        return self.limit.name

    def instance(self, payload: Any) -> str:
        """The name of the limit this payload uses; KeyFunctionError says why there is none."""
        if self.key_fn is None:
            return self.limit.name
        assert self.payload_type is not None  # every keyed ref declares one
        model = _as_model(self.payload_type, payload, self.name)
        try:
            key = self.key_fn(model)
        except Exception as exc:
            raise KeyFunctionError(
                f"key function of limit {self.name!r} raised {type(exc).__name__}: {exc}"
            ) from exc
        if key is None or (isinstance(key, str) and not key):
            raise KeyFunctionError(f"key function of limit {self.name!r} returned no key")
        return f"{self.name}:{key}"

    def units(self, payload: Any) -> int:
        """The units this payload takes (the actor's validated payload, as its body gets it);
        CostFunctionError says why there is no price that could ever be admitted."""
        if self.cost_fn is None:
            return self.cost
        try:
            cost = self.cost_fn(payload)
        except Exception as exc:
            raise CostFunctionError(
                f"cost function of limit {self.name!r} raised {type(exc).__name__}: {exc}"
            ) from exc
        if isinstance(cost, float) and cost.is_integer():
            cost = int(cost)
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
            raise CostFunctionError(
                f"cost function of limit {self.name!r} returned {cost!r}, not a whole number "
                "of 0 or more"
            )
        if cost > self.limit.capacity:
            raise CostFunctionError(
                f"cost {cost} exceeds the capacity of limit {self.name!r} "
                f"({self.limit.describe()}): the job could never be admitted"
            )
        return cost


def _as_model(payload_type: type[BaseModel], payload: Any, name: str) -> BaseModel:
    """The payload as ``payload_type`` (the actor's validated model passes through)."""
    if isinstance(payload, payload_type):
        return payload
    if isinstance(payload, BaseModel):
        payload = payload.model_dump(mode="json")
    try:
        return payload_type.model_validate(payload)
    except ValidationError as exc:
        from taskq_core.actors import describe_validation

        raise KeyFunctionError(
            f"payload does not fit {payload_type.__name__}, the payload_type of limit "
            f"{name!r}: {describe_validation(exc)}"
        ) from None


@dataclass(frozen=True)
class ActorLimits:
    """An actor's limits, resolved: reservations are acquired first, then rate limits."""

    actor: str
    rate_limits: tuple[LimitUse, ...] = ()
    reservations: tuple[LimitUse, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.rate_limits or self.reservations)


class RateLimitRegistry:
    """Limits by name. Register a limit once, name it from any number of actors."""

    def __init__(self, limits: Iterable[Limit] = ()) -> None:
        self._limits: dict[str, Limit] = {}
        self.register(*limits)

    def register(self, *limits: Limit) -> None:
        """Add limits; the same definition again is a no-op, a different one for a name
        already registered raises ConfigError."""
        for limit in limits:
            self._add(limit, origin="registry")

    def _add(self, limit: Limit, *, origin: str) -> None:
        if not isinstance(limit, TokenBucket | SlidingWindow | ConcurrencyReservation):
            raise ConfigError(
                f"{origin}: {limit!r} is not a TokenBucket, SlidingWindow or ConcurrencyReservation"
            )
        limit = unweighted(limit)
        known = self._limits.get(limit.name)
        if known is not None and known != limit:
            raise ConfigError(
                f"{origin}: limit {limit.name!r} is defined twice: {known.describe()} and "
                f"{limit.describe()}"
            )
        self._limits[limit.name] = limit

    def get(self, name: str) -> Limit | None:
        """The limit registered as ``name``."""
        return self._limits.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._limits

    def __iter__(self) -> Iterator[Limit]:
        return iter(list(self._limits.values()))

    def __len__(self) -> int:
        return len(self._limits)

    def resolve(self, actors: Iterable[ActorRef]) -> dict[str, ActorLimits]:
        """Each actor's limits, resolved; ConfigError names the actor and the limit.

        Inline limits (and keyed templates) are registered first, all actors together, so
        one actor may name a limit another declares inline.
        """
        actors = list(actors)
        for ref in actors:
            check_declarations(ref.name, ref.rate_limits, ref.reservations)
            for entry in (*ref.rate_limits, *ref.reservations):
                inline = entry
                if isinstance(entry, KeyedRateLimitRef):
                    inline = entry.limit
                elif isinstance(entry, KeyedReservationRef):
                    inline = entry.reservation
                if not isinstance(inline, str):
                    self._add(inline, origin=f"actor {ref.name!r}")
        return {ref.name: self._resolve_actor(ref) for ref in actors}

    def _resolve_actor(self, ref: ActorRef) -> ActorLimits:
        rate_limits = tuple(self._use(ref, entry, reservation=False) for entry in ref.rate_limits)
        reservations = tuple(self._use(ref, entry, reservation=True) for entry in ref.reservations)
        for uses in (rate_limits, reservations):
            names = [use.name for use in uses]
            twice = sorted({name for name in names if names.count(name) > 1})
            if twice:
                raise ConfigError(f"actor {ref.name!r}: limit {twice[0]!r} is declared twice")
        return ActorLimits(ref.name, rate_limits, reservations)

    def _use(self, ref: ActorRef, entry: object, *, reservation: bool) -> LimitUse:
        key_fn: Callable[[Any], object] | None = None
        payload_type: type[BaseModel] | None = None
        declared = entry
        if isinstance(entry, KeyedRateLimitRef | KeyedReservationRef):
            key_fn, payload_type = entry.key_fn, entry.payload_type
            declared = entry.limit if isinstance(entry, KeyedRateLimitRef) else None
        name = entry if isinstance(entry, str) else getattr(entry, "name", "?")
        limit = self._limits.get(name)
        field = "reservations" if reservation else "rate_limits"
        if limit is None:
            known = ", ".join(sorted(self._limits)) or "none"
            raise ConfigError(
                f"actor {ref.name!r}: {field} names {name!r}, which is not a registered limit "
                f"(registered: {known})"
            )
        if reservation != isinstance(limit, ConcurrencyReservation):
            raise ConfigError(
                f"actor {ref.name!r}: {field} names {name!r}, a {limit.describe()}; declare it "
                f"in {'rate_limits' if reservation else 'reservations'}="
            )
        cost = declared.cost if isinstance(declared, TokenBucket | SlidingWindow) else 1
        if callable(cost):
            return LimitUse(limit, key_fn, payload_type, cost_fn=cost)
        return LimitUse(limit, key_fn, payload_type, cost=cost)


# The process's registry when none is given to the worker (nor provided through DI): register
# the limits that actors name by string here, e.g. in the module that defines the actors.
default_registry = RateLimitRegistry()
