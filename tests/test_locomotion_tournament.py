"""benchmarks/locomotion_tournament.py: the reading's known answers from fixed rows, refusals in one
line, and the whole benchmark end to end on Pendulum-v1 at a budget of seconds, resumed (issue 79)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks import locomotion_tournament as bench
from trader import aggregate


def _rows(one: list[float], random: list[float], tournament: list[float], untrained: float = 0.0) -> list[dict]:
    return [
        {"env": "Ant-v5", "seed": k, "untrained": untrained, "one": {"score": a}, "random": {"score": b}}
        | {"tournament": {"score": c}}
        for k, (a, b, c) in enumerate(zip(one, random, tournament, strict=True))
    ]


def test_the_reading_of_fixed_rows_has_the_known_answers() -> None:
    """Four seeds: the IQM is the mean of the middle two, the CVaR 10% the lowest, the failure rate
    the share below the untrained policy, P(improvement) the share of pairs won."""
    rows = _rows([100, 400, 200, 300], [500, 500, 500, 500], [510, 520, 530, 540], untrained=250)
    out = bench.read_out(rows, resamples=200)
    one, random, tournament = (out["arms"][arm] for arm in bench.ARMS)
    assert one["iqm"] == pytest.approx(250.0) and one["cvar10"] == 100.0 and one["failure_rate"] == 0.5
    assert one["probability_of_improvement"] == 0.5 and random["probability_of_improvement"] == 1.0
    assert one["iqm_interval"][0] <= 250.0 <= one["iqm_interval"][1]
    assert random["iqm"] == 500.0 and random["iqm_interval"] == [500.0, 500.0] and random["failure_rate"] == 0.0
    assert tournament["iqm"] == pytest.approx(525.0) and tournament["cvar10"] == 510.0
    difference = out["comparisons"]["tournament_minus_one_iqm"]
    assert difference["value"] == pytest.approx(275.0) and difference["low"] <= 275.0 <= difference["high"]
    versus = out["comparisons"]["tournament_not_worse_than_random"]
    assert versus["margin"] == pytest.approx(bench.MARGIN_SHARE * 250.0) and versus["verdict"] is True
    assert versus["difference_iqm_90"]["low"] >= 10.0  # every tournament run is above every random one
    expected = aggregate.difference_interval(
        aggregate.iqm, [[510], [520], [530], [540]], [[100], [400], [200], [300]], resamples=200
    )
    assert difference == expected.as_dict()  # trader.aggregate's, not a copy of it


def test_a_tournament_worse_than_random_by_more_than_the_margin_is_not_non_inferior() -> None:
    out = bench.read_out(_rows([1000] * 4, [1000] * 4, [800, 820, 840, 860]), resamples=200)
    versus = out["comparisons"]["tournament_not_worse_than_random"]
    assert versus["margin"] == pytest.approx(50.0) and versus["verdict"] is False


def _run(*args: str, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """The benchmark's main in this process: (exit code, stdout, stderr)."""
    code = bench.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--env", "NoSuchEnv-v0"], "not a gymnasium id: NoSuchEnv-v0"),
        (["--algos", "ppo"], "--algos must hold sac"),
        (["--seeds", "1", "1"], "repeat a seed"),
    ],
)
def test_bad_flags_are_refused_in_one_line_before_any_run(flags: list[str], says: str, tmp_path: Path, capsys) -> None:
    code, printed, err = _run(*flags, "--out", str(tmp_path / "out.json"), capsys=capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and says in err and printed == ""
    assert not (tmp_path / "out.json").exists()


def test_the_benchmark_runs_end_to_end_at_seconds_and_resumes_without_training_again(tmp_path: Path, capsys) -> None:
    """Pendulum-v1, one seed, each arm 3 s: the JSON's shape, a finite score per arm, a second start
    that finds the seed done, and a third with other flags refused in one line."""
    out = tmp_path / "loco.json"
    flags = ["--env", "Pendulum-v1", "--seeds", "0", "--minutes", "0.05", "--pod-steps", "1000"]
    flags += ["--eval-episodes", "2", "--out", str(out)]
    code, printed, err = _run(*flags, capsys=capsys)
    assert code == 0, err[-2000:]
    found = json.loads(out.read_text())
    assert set(found) == {"settings", "rows", "envs", "cost"} and list(found["envs"]) == ["Pendulum-v1"]
    (row,) = found["rows"]
    assert (row["env"], row["seed"]) == ("Pendulum-v1", 0) and math.isfinite(row["untrained"])
    for arm in bench.ARMS:
        assert math.isfinite(row[arm]["score"]) and row[arm]["result"] == "best" and row[arm]["seconds"] > 0
        held = found["envs"]["Pendulum-v1"]["arms"][arm]
        assert set(held) == {"iqm", "iqm_interval", "cvar10", "failure_rate", "probability_of_improvement"}
        assert held["iqm"] == row[arm]["score"]
    assert row["random"]["pods"] >= 1 and row["tournament"]["pods"] >= 1
    assert "| Pendulum-v1 | 0 |" in printed and "IQM(tournament) - IQM(one)" in printed
    assert found["cost"]["device_seconds"] > 0
    code, printed, _ = _run(*flags, capsys=capsys)
    assert code == 0 and "0 env-seeds to do" in printed and "trained in" not in printed
    assert json.loads(out.read_text())["rows"] == found["rows"]
    code, printed, err = _run(*flags[:-2], "--pod-steps", "2000", "--out", str(out), capsys=capsys)
    assert code == 2 and "other settings" in err and len(err.strip().splitlines()) == 1
