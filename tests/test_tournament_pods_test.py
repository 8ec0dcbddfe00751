"""benchmarks/tournament_pods_test.py: which pods it backtests (those whose best checkpoint the tournament kept)
and its refusals of bad input before any work (exit 2, one line naming what is wrong)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from trader import rundir

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import tournament_pods_test


def _pods(folder: Path) -> None:
    rows = [  # (pod, status, generation, score, weights kept)
        ("p0000", "finished", 0, 17.0, True),
        ("p0001", "finished", 1, 19.5, False),  # evicted: its weights deleted
        ("p0002", "failed", 1, float("nan"), False),
        ("p0003", "finished", 2, 21.0, True),
        ("p0004", "cancelled", 2, float("nan"), True),  # a stray file is not a finished pod
    ]
    folder.mkdir(parents=True)
    frame = pd.DataFrame([r[:4] for r in rows], columns=["pod_id", "status", "generation", "score"])
    frame.to_parquet(folder / rundir.PODS)
    for pod, *_, kept in rows:
        checkpoints = folder / rundir.PODS_DIR / pod / rundir.CHECKPOINTS
        checkpoints.mkdir(parents=True)
        (checkpoints / "best.json").write_text("{}")
        if kept:
            (checkpoints / "best.safetensors").write_bytes(b"")


def test_kept_pods_are_the_finished_pods_whose_best_weights_are_on_disk(tmp_path: Path) -> None:
    _pods(tmp_path / "pbt-3")
    kept = tournament_pods_test.kept_pods(tmp_path / "pbt-3")
    assert kept["pod_id"].tolist() == ["p0000", "p0003"]
    assert kept["generation"].tolist() == [0, 2] and kept["score"].tolist() == [17.0, 21.0]


def test_bad_input_exits_2_before_any_work(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    _pods(tmp_path / "alone" / "pbt-3")  # no single-3 beside it: nothing to compare with
    _pods(tmp_path / "paired" / "pbt-3")
    (tmp_path / "paired" / "single-3").mkdir()
    done, rows = tmp_path / "done.json", tmp_path / "rows.json"
    done.write_text("[]")
    rows.write_text('[{"seed": 1, "best_pod": {"sharpe": 1.0}}]')
    for argv, says in (
        ([str(tmp_path / "empty")], "no pbt-S beside single-S"),
        ([str(tmp_path / "alone")], "no pbt-S beside single-S"),
        ([str(tmp_path / "empty"), "--ks", "0,3"], "--ks needs sizes >= 1"),
        ([str(tmp_path / "empty"), "--ks", "three"], "--ks needs sizes >= 1"),
        ([str(tmp_path / "paired"), "--out", str(done)], "exists: give a new path"),  # finished work is kept
        ([str(tmp_path / "paired"), "--rows", str(rows)], "seed(s) [3] have no row in --rows"),
    ):
        with pytest.raises(SystemExit) as stop:
            tournament_pods_test.main(argv)
        assert stop.value.code == 2 and says in capsys.readouterr().err
    assert done.read_text() == "[]"
