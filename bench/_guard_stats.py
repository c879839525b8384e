"""The statistics and the decision rule of bench/regression_guard.py, apart so a fast unit test
(tests/bench/test_guard_stats.py) holds them.

Not a benchmark (its name starts with `_`). No I/O, no clock: a seeded random generator, so
the same figures give the same interval and the same verdict.

Timed figures come in interleaved rounds: in each round the baseline and the candidate ran
one after the other on the same machine, so a round's ratio (candidate / baseline) cancels the
drift that both saw. The estimate is the geometric mean of the rounds' ratios; its 95 %
interval is a percentile bootstrap over the rounds (resampled with replacement). A timed
figure fails only when the whole interval lies above the limit (its lower bound > 1.10): on
a shared machine a single slow round must not fail the guard, a real regression does.

Instruction counts (callgrind) are deterministic to about a percent, so their rule is the
plain ratio of the medians of the repetitions against the limit.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

LIMIT = 1.10  # worse by more than 10 % fails
LEVEL = 0.95
RESAMPLES = 10_000


class Verdict(Enum):
    PASS = "pass"
    FAIL = "FAIL"


@dataclass(frozen=True)
class Interval:
    estimate: float  # the geometric mean of the rounds' ratios
    low: float
    high: float
    rounds: int


def ratios(base: Sequence[float], candidate: Sequence[float]) -> list[float]:
    """Each round's candidate / baseline. Rounds are paired: both lists in round order."""
    if len(base) != len(candidate):
        raise ValueError(f"{len(base)} baseline rounds against {len(candidate)} candidate rounds")
    if not base:
        raise ValueError("no rounds")
    if any(b <= 0 or c <= 0 for b, c in zip(base, candidate, strict=True)):
        raise ValueError("a ratio needs positive figures (an overhead at or below zero)")
    return [c / b for b, c in zip(base, candidate, strict=True)]


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def bootstrap_ratio(
    base: Sequence[float],
    candidate: Sequence[float],
    *,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Interval:
    """The geometric mean of the paired ratios and its percentile bootstrap interval."""
    each = ratios(base, candidate)
    logs = [math.log(r) for r in each]
    n = len(logs)
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(logs, k=n)) for _ in range(resamples))
    tail = (1 - level) / 2
    low = means[min(resamples - 1, int(tail * resamples))]
    high = means[min(resamples - 1, int((1 - tail) * resamples))]
    return Interval(math.exp(statistics.fmean(logs)), math.exp(low), math.exp(high), n)


def timed_verdict(interval: Interval, limit: float = LIMIT) -> Verdict:
    """Fail only when the whole interval is above the limit."""
    return Verdict.FAIL if interval.low > limit else Verdict.PASS


def counted_ratio(base: Sequence[float], candidate: Sequence[float]) -> float:
    """Instruction counts: the ratio of the medians of the repetitions."""
    if not base or not candidate:
        raise ValueError("no repetitions")
    return statistics.median(candidate) / statistics.median(base)


def counted_verdict(ratio: float, limit: float = LIMIT) -> Verdict:
    return Verdict.FAIL if ratio > limit else Verdict.PASS


def spread(values: Sequence[float]) -> float:
    """(max - min) / median: the run-to-run spread of repeated measurements of one thing."""
    if not values:
        raise ValueError("no values")
    return (max(values) - min(values)) / statistics.median(values)
