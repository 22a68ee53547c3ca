"""Paired rounds: each round runs every variant back to back, the order rotated round by round,
and a share of one variant against another is the median of the rounds' own shares. A shared
machine's speed drifts by a fifth within a minute: both sides of each share see the same
machine, and one lucky run on either side does not set the figure."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TypeVar

Variant = TypeVar("Variant")


def rotated(variants: Sequence[Variant], number: int) -> list[Variant]:
    """Round ``number``'s order: the variants rotated by one each round."""
    turn = number % len(variants)
    return [*variants[turn:], *variants[:turn]]


def median_seconds(rounds: Sequence[Mapping[Variant, float]], variant: Variant) -> float:
    """The variant's median seconds over the rounds."""
    return statistics.median(seconds[variant] for seconds in rounds)


def shares(
    rounds: Sequence[Mapping[Variant, float]], variant: Variant, base: Variant
) -> list[float]:
    """Each round's rate of ``variant`` as a fraction of ``base``'s (seconds are per run)."""
    return [seconds[base] / seconds[variant] for seconds in rounds]


def median_share(
    rounds: Sequence[Mapping[Variant, float]], variant: Variant, base: Variant
) -> float:
    """The median of the rounds' own shares of ``variant`` against ``base``."""
    return statistics.median(shares(rounds, variant, base))
