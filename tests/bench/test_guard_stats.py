"""The regression guard's statistics and decision rule (bench/_guard_stats.py).

The guard itself runs servers for minutes (bench/regression_guard.py, not in the suite); what
decides pass or fail is these few functions, checked here on figures whose answer is known.
"""

from __future__ import annotations

import math
import random
import sys

import pytest

from tests.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

import _guard_stats as gs


def noisy(values: list[float], ratio: float, jitter: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [v * ratio * math.exp(rng.gauss(0, jitter)) for v in values]


def drifting_rounds(n: int, seed: int = 1) -> list[float]:
    """A shared machine: every round's level drifts by tens of percent."""
    rng = random.Random(seed)
    return [3.0 * math.exp(rng.gauss(0, 0.4)) for _ in range(n)]


def test_identical_rounds_give_a_ratio_of_one_and_pass() -> None:
    base = [1.0, 2.0, 4.0, 8.0]
    interval = gs.bootstrap_ratio(base, base)
    assert interval.estimate == pytest.approx(1.0)
    assert interval.low == pytest.approx(1.0) and interval.high == pytest.approx(1.0)
    assert gs.timed_verdict(interval) is gs.Verdict.PASS


def test_paired_rounds_cancel_the_drift_both_saw() -> None:
    # Each round drifts by tens of percent, the candidate is 20 % slower in every round with
    # 2 % noise of its own: the ratio is found and fails.
    base = drifting_rounds(8)
    cand = noisy(base, 1.20, 0.02, seed=2)
    interval = gs.bootstrap_ratio(base, cand)
    assert 1.17 < interval.low < interval.estimate < interval.high < 1.23
    assert gs.timed_verdict(interval) is gs.Verdict.FAIL


def test_a_noisy_small_change_passes_because_the_interval_reaches_below_the_limit() -> None:
    base = drifting_rounds(8)
    cand = noisy(base, 1.12, 0.15, seed=3)  # 12 % worse, but one round's noise is 15 %
    interval = gs.bootstrap_ratio(base, cand)
    assert interval.low <= gs.LIMIT < interval.high
    assert gs.timed_verdict(interval) is gs.Verdict.PASS


def test_one_slow_round_does_not_fail_the_guard() -> None:
    base = [3.0] * 8
    cand = [3.0] * 7 + [15.0]  # another helper's build landed on one round
    interval = gs.bootstrap_ratio(base, cand)
    assert interval.low == pytest.approx(1.0)
    assert gs.timed_verdict(interval) is gs.Verdict.PASS


def test_the_interval_is_a_95_percent_one() -> None:
    # Many experiments of a known true ratio: the interval covers it about 95 % of the time.
    covered = 0
    trials = 200
    for t in range(trials):
        base = drifting_rounds(12, seed=100 + t)
        cand = noisy(base, 1.05, 0.1, seed=1000 + t)
        i = gs.bootstrap_ratio(base, cand, resamples=2000, seed=t)
        covered += i.low <= 1.05 <= i.high
    assert 0.86 <= covered / trials <= 0.99  # percentile bootstrap of 12 rounds runs narrow


def test_the_same_figures_give_the_same_interval() -> None:
    base = drifting_rounds(8)
    cand = noisy(base, 1.1, 0.1, seed=4)
    assert gs.bootstrap_ratio(base, cand) == gs.bootstrap_ratio(base, cand)


@pytest.mark.parametrize(
    ("base", "cand", "verdict"),
    [
        ([7.34e6], [7.34e6], gs.Verdict.PASS),
        ([7.34e6], [8.07e6], gs.Verdict.PASS),  # 9.9 % worse: within the limit
        ([7.34e6], [8.08e6], gs.Verdict.FAIL),  # 10.1 % worse
        ([7.0e6, 7.1e6, 9.9e6], [7.7e6, 7.75e6, 7.8e6], gs.Verdict.PASS),  # medians 7.1, 7.75
        ([7.34e6], [10.42e6], gs.Verdict.FAIL),  # 5a0c384 against 7a7e237, as measured
    ],
)
def test_counted_rule_is_the_ratio_of_the_medians(
    base: list[float], cand: list[float], verdict: gs.Verdict
) -> None:
    assert gs.counted_verdict(gs.counted_ratio(base, cand)) is verdict


def test_bad_figures_are_refused_not_judged() -> None:
    with pytest.raises(ValueError, match="rounds"):
        gs.bootstrap_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="no rounds"):
        gs.bootstrap_ratio([], [])
    with pytest.raises(ValueError, match="positive"):
        gs.bootstrap_ratio([1.0, -0.2], [1.0, 1.0])
    with pytest.raises(ValueError, match="repetitions"):
        gs.counted_ratio([], [1.0])


def test_spread() -> None:
    assert gs.spread([10.0, 10.1, 9.9]) == pytest.approx(0.02)
