"""benchmarks/tournament_value.py --from-runs: the arms that earlier --keep-runs folders hold, scored again
without training (today's result rule replayed on each tournament): which folders it takes, its refusals of
bad input (exit 2, one line naming what is wrong), and, slow, that a row scored from kept runs is the row the
training run printed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import tournament_value

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _arms(folder: Path, *names: str) -> None:
    for name in names:
        (folder / name).mkdir(parents=True)


def test_kept_arms_are_found_by_name_in_any_folder_and_sorted_by_seed(tmp_path: Path) -> None:
    _arms(tmp_path / "trained", "pbt-7", "single-7", "pbt-3", "single-3", "notes", "pbt-x")
    _arms(tmp_path / "later", "random-3", "random-7")
    (tmp_path / "trained" / "random-9.log").write_text("")  # a file named like an arm is not one
    kept = tournament_value.kept_arms([tmp_path / "trained", tmp_path / "later"])
    assert list(kept) == [3, 7]
    assert kept[3] == {
        "pbt": tmp_path / "trained" / "pbt-3",
        "single": tmp_path / "trained" / "single-3",
        "random": tmp_path / "later" / "random-3",
    }


@pytest.mark.parametrize(
    ("layout", "says"),
    [
        ({"a": ["pbt-1", "single-1", "random-1"], "b": ["pbt-1"]}, "seed 1's pbt arm is in two folders"),
        ({"a": ["pbt-1", "single-1", "random-2"]}, "seeds without every arm (1: no random; 2: no pbt, single)"),
        ({"a": ["notes"]}, "no single-S, random-S or pbt-S folder in"),
    ],
)
def test_kept_arms_refuses_what_cannot_be_paired(layout: dict, says: str, tmp_path: Path) -> None:
    for folder, names in layout.items():
        _arms(tmp_path / folder, *names)
    with pytest.raises(ValueError, match=re.escape(says)):
        tournament_value.kept_arms([tmp_path / folder for folder in layout])


def _script(args: list[str], cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / "tournament_value.py"), *args],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(BENCHMARKS.parent), "OMP_NUM_THREADS": "1"},
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--from-runs", "kept", "--keep-runs", "new"], "--from-runs trains nothing"),
        (["--from-runs", "kept", "--arms", "pbt"], "--from-runs trains nothing"),
        (["--from-runs", "nowhere"], "--from-runs: nowhere: not a folder"),
        (["--from-runs", "kept"], "--from-runs: seeds without every arm (4: no random)"),
    ],
)
def test_from_runs_refuses_bad_input_before_any_work(args: list[str], says: str, tmp_path: Path) -> None:
    _arms(tmp_path / "kept", "pbt-4", "single-4")
    done = _script(args, tmp_path)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert not (tmp_path / "new").exists()


TINY = ["--algos", "ppo", "--single", "ppo", "--pod-steps", "2048", "--num-envs", "8", "--workers", "1"]


@pytest.mark.slow
def test_a_row_scored_from_kept_runs_is_the_row_training_printed(tmp_path: Path) -> None:
    """Train one seed's arms for a few seconds each and keep them; --from-runs scores the same folders again.
    Today's rule replayed is the rule they were trained under, so every arm's test Sharpe, drawdown and DSR,
    and each tournament's result, are the training run's to the digit. Then flags whose rules the runs did not
    record are refused, and so is a run whose recorded members are not today's rule's, before any backtest."""
    trained = _script([*TINY, "--seeds", "1", "--first-seed", "5", "--minutes", "0.25", "--keep-runs", "kept",
                       "--out", "trained.json"], tmp_path, timeout=600)  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-2000:]
    again = _script([*TINY, "--from-runs", "kept", "--out", "again.json"], tmp_path, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    [first] = json.loads((tmp_path / "trained.json").read_text())
    [second] = json.loads((tmp_path / "again.json").read_text())
    assert second["recorded_results"] == first["results"] == second["results"]
    for arm in (*tournament_value.ARMS, "equal_weight"):
        assert second[arm] == first[arm], arm
    refused = _script([*TINY, "--from-runs", "kept", "--cost", "0.001"], tmp_path)
    assert refused.returncode == 2 and "was trained under other rules than these flags give" in refused.stderr
    selection = tmp_path / "kept" / "pbt-5" / "selection.json"
    recorded = json.loads(selection.read_text())
    selection.write_text(json.dumps({**recorded, "members": ["p9998", "p9999"]}))  # as a run of another rule
    refused = _script([*TINY, "--from-runs", "kept", "--out", "other.json"], tmp_path)
    assert refused.returncode == 2 and "are not today's rule's" in refused.stderr
    assert not (tmp_path / "other.json").exists()  # refused before any backtest
