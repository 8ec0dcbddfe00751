"""The paired-ratio statistics of `benchmarks/env_throughput.py` (--compare-action, --compare-costs):
known answers, and the property the interleaving is for: a drift of the machine's speed that hits
both runs of a round alike leaves the figure unchanged."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.env_throughput import (
    EPISODE,
    EVERY_COST,
    interleaved_times,
    kernel_builds,
    kernel_switching,
    paired_ratio,
    parse_args,
    step_runner,
    with_kernel,
)
from benchmarks.finrl_style_env import benchmark_panel
from market_envs import EnvConfig, native_fill


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


class _Counting:
    """A build of the C kernel that counts its fill calls (`--kernel-sources` hands the env such builds)."""

    def __init__(self, library) -> None:
        self.library, self.calls = library, 0
        self.read_actions, self.read_rate_actions = library.read_actions, library.read_rate_actions

    def fill_with_costs(self, *arguments) -> None:
        self.calls += 1
        self.library.fill_with_costs(*arguments)


def test_each_kernel_source_steps_its_own_env_and_only_while_it_runs(native_kernel) -> None:
    """`--kernel-sources`: the env of a version calls that version's build while it steps, and the
    env's own kernel is back outside; the states match the env's own kernel step for step."""
    own = native_fill.native_library()
    other = _Counting(own)
    rules = replace(EnvConfig(episode_length=EPISODE, short_selling=True), costs=EVERY_COST)
    data = benchmark_panel(5, 300)
    with with_kernel(other):
        run = kernel_switching(other, step_runner(data, 4, torch.device("cpu"), rules, compiled=False))
    warmed = other.calls
    assert warmed > 0 and native_fill.native_library() is own
    run(3)
    assert other.calls == warmed + 3 and native_fill.native_library() is own
    step_runner(data, 4, torch.device("cpu"), rules, compiled=False)(2)
    assert other.calls == warmed + 3


def test_kernel_sources_refuses_what_it_cannot_pair(tmp_path: Path, monkeypatch, capsys) -> None:
    """One line that names the fault and exit status 2, before any timing: the option without
    --compare-costs, too few versions, a missing file, two files of one name (their rows would share a
    label), a source that does not build, and one that builds but is not the kernel."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the builds stay in the test's folder
    empty, broken = tmp_path / "a.c", tmp_path / "b.c"
    empty.write_text("int unrelated(void) { return 0; }\n")
    broken.write_text("this is not C\n")

    def refused(call, says: str) -> None:
        with pytest.raises(SystemExit) as stop:
            call()
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip()
        *usage, line = err.splitlines()  # argparse's usage may come first
        assert says in line and all(part.startswith(("usage:", " ")) for part in usage), err

    refused(lambda: parse_args(["--kernel-sources", f"{empty},{broken}"]), "it needs --compare-costs")
    for sources, says in [
        (str(empty), "give two versions or more"),
        (f"{empty},{tmp_path / 'c.c'}", "no file"),
        (f"{empty},{empty}", "two files named alike"),
        (f"{broken},{empty}", "b.c did not build"),
        (f"{empty},{broken}", "a.c is not a version of fill_costs.c"),
    ]:
        refused(lambda sources=sources: kernel_builds(sources), says)
