"""The paired-ratio statistics of `benchmarks/env_throughput.py` (--compare-action, --compare-costs):
known answers, and the property the interleaving is for: a drift of the machine's speed that hits
both runs of a round alike leaves the figure unchanged."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from env_throughput import interleaved_times, paired_ratio  # noqa: E402


def test_paired_ratio_known_answer() -> None:
    baseline = np.full(5, 2.0)
    ratio = paired_ratio(baseline, baseline * np.array([1.0, 1.1, 1.2, 1.3, 1.4]), target=1.5)
    assert ratio.median == pytest.approx(1.2)
    assert (ratio.q1, ratio.q3) == (pytest.approx(1.1), pytest.approx(1.3))
    assert 1.0 <= ratio.low <= ratio.median <= ratio.high <= 1.4  # a median of resampled rounds
    assert ratio.verdict == "yes"
    assert paired_ratio(baseline, baseline * 1.2, target=1.1) == (1.2, 1.2, 1.2, 1.2, 1.2, "no")


def test_paired_ratio_target_inside_the_interval_is_undecided() -> None:
    rng = np.random.default_rng(3)
    baseline = rng.uniform(1.0, 2.0, 200)
    ratio = paired_ratio(baseline, baseline * rng.normal(1.1, 0.2, 200), target=1.1)
    assert ratio.low < 1.1 < ratio.high
    assert ratio.verdict == "undecided"


def test_a_drift_shared_by_the_pair_cancels() -> None:
    rng = np.random.default_rng(0)
    baseline = np.full(60, 1e-3)
    other = baseline * rng.normal(1.05, 0.01, 60)
    drift = np.linspace(1.0, 3.0, 60) * rng.uniform(0.5, 2.0, 60)  # the machine slows and stutters
    steady, drifting = paired_ratio(baseline, other, 1.1), paired_ratio(baseline * drift, other * drift, 1.1)
    assert drifting.median == pytest.approx(steady.median)
    assert (drifting.low, drifting.high) == (pytest.approx(steady.low), pytest.approx(steady.high))
    assert drifting.verdict == "yes"


def test_interleaved_times_runs_each_runner_once_a_round_in_varying_order() -> None:
    calls: list[tuple[int, int]] = []
    runs = [lambda steps, i=i: calls.append((i, steps)) for i in range(3)]
    walls, cpus = interleaved_times(runs, seconds=0.0, rounds=8, sync=lambda: None)
    assert walls.shape == cpus.shape == (8, 3)
    timed = calls[-24:]  # after the calibration and one untimed run each
    assert len({steps for _, steps in timed}) == 1  # the same number of steps for all
    rounds = [tuple(i for i, _ in timed[r * 3 : r * 3 + 3]) for r in range(8)]
    assert all(sorted(r) == [0, 1, 2] for r in rounds)
    assert len(set(rounds)) > 1  # the order is drawn afresh
