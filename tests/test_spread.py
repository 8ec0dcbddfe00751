"""trader.backtesting.spread: a tournament's result against its own pods, with known answers on
a run folder written by hand (pods.parquet, leaderboard.json, selection.json and which pods kept
their weights), the plain words for no pod and one pod, and report.md's section without a NaN.
The real tournament's record, its one-pass backtest of the pods and the dashboard's strip are
tested on tests/test_dashboard.py's tiny tournament."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from trader import rundir
from trader.backtesting import spread
from trader.backtesting.report import spread_rows, spread_section

# (pod, algo, status, validation score, weights kept)
PODS = [
    ("p0000", "ppo", "finished", 1.0, True),
    ("p0001", "sac", "finished", 3.0, False),  # evicted: its weights deleted
    ("p0002", "td3", "failed", math.nan, False),  # not a finished pod: never placed
    ("p0003", "ppo", "finished", 4.0, True),  # the best pod
    ("p0004", "sac", "finished", math.nan, True),  # a validation pass without a trade: counted, not placed
    ("p0005", "td3", "finished", 2.0, True),
]


def write_run(root: Path, rows=PODS, result: str = "best", ensemble_score: float | None = None) -> Path:
    """A tournament's files as the spread reads them: pods.parquet, the pods' best checkpoints
    (weights only where kept), leaderboard.json (best first) and selection.json."""
    root.mkdir(parents=True)
    frame = pd.DataFrame(
        [(pod, i, algo, score, status) for i, (pod, algo, status, score, _) in enumerate(rows)],
        columns=["pod_id", "index", "algo", "score", "status"],
    )
    rundir.write_parquet(root / rundir.PODS, frame)
    for pod, *_, kept in rows:
        folder = root / rundir.PODS_DIR / pod / rundir.CHECKPOINTS
        folder.mkdir(parents=True)
        (folder / "best.json").write_text("{}")
        if kept:
            (folder / "best.safetensors").write_bytes(b"")
    finished = [r for r in rows if r[2] == "finished"]
    board = sorted(finished, key=lambda r: -r[3] if math.isfinite(r[3]) else math.inf)
    entries = [{"pod_id": pod, "score": None if math.isnan(score) else score} for pod, _, _, score, _ in board]
    rundir.write_json(root / rundir.LEADERBOARD, {"format_version": rundir.LEADERBOARD_VERSION, "entries": entries})
    if entries:
        selection = {
            "format_version": rundir.SELECTION_VERSION,
            "result": result,
            "best_score": entries[0]["score"],
            "ensemble_score": ensemble_score,
        }
        rundir.write_json(root / rundir.SELECTION, selection)
    return root


def test_the_finished_pods_their_scores_and_which_kept_their_weights(tmp_path: Path) -> None:
    pods = spread.finished_pods(write_run(tmp_path / "tour"))
    assert pods["pod_id"].tolist() == ["p0000", "p0001", "p0003", "p0004", "p0005"]
    assert [c is not None for c in pods["checkpoint"]] == [True, False, True, True, True]
    assert pods["validation"].tolist()[:3] == [1.0, 3.0, 4.0] and math.isnan(pods["validation"].iloc[3])
    assert spread.recorded_result(tmp_path / "tour") == ("best", "p0003", 4.0)


def test_the_best_pods_standing_on_validation_and_on_test_with_known_answers(tmp_path: Path) -> None:
    root = write_run(tmp_path / "tour")
    test = {"p0000": 0.5, "p0003": 1.5, "p0004": math.nan, "p0005": 2.5}  # p0004 never traded on test
    record = spread.spread(root, test, "test")
    json.dumps(record, allow_nan=False)  # strict JSON: no NaN anywhere
    assert (record["result"], record["best_pod"], record["finished"]) == ("best", "p0003", 5)
    validation = record["validation"]
    assert (validation["placed"], validation["unplaced"]) == (4, 1)  # p0004's NaN counted, not placed
    assert validation["standing"] == {
        "value": 4.0,
        "n": 4,
        "rank": 1,  # the best pod tops validation: it was chosen there
        "percentile": 100.0,
        "median": 2.5,
        "iqm": 2.5,  # 4 pods: 1 cut from each end, the mean of 2 and 3
        "cvar10": 1.0,
        "best": 4.0,
        "worst": 1.0,
    }
    on_test = record["backtest"]
    assert (on_test["period"], on_test["placed"], on_test["unplaced"], on_test["not_kept"]) == ("test", 3, 1, 1)
    assert on_test["standing"]["rank"] == 2 and on_test["standing"]["percentile"] == pytest.approx(200 / 3)
    assert (on_test["standing"]["median"], on_test["standing"]["cvar10"], on_test["standing"]["best"]) == (
        1.5,
        0.5,
        2.5,
    )
    by_pod = {p["pod_id"]: p for p in record["pods"]}
    assert by_pod["p0001"] == {"pod_id": "p0001", "algo": "sac", "validation": 3.0, "backtest": None, "kept": False}
    assert by_pod["p0004"]["validation"] is None and by_pod["p0004"]["backtest"] is None
    said = record["sentences"]
    assert said[0].startswith("On validation") and "ranks 1 (0 of the 4 pods placed above it)" in said[0]
    assert "1 without a finite figure" in said[0]
    assert "On the test period" in said[1] and "ranks 2 (1 of the 3 pods placed above it), at or above 67%" in said[1]
    assert said[2].startswith("1 of the 5 finished pods were not backtested") and "keep_checkpoints" in said[2]


def test_an_ensemble_result_is_placed_among_the_pods_it_is_not_one_of(tmp_path: Path) -> None:
    root = write_run(tmp_path / "tour", result="ensemble", ensemble_score=2.5)
    record = spread.spread(root, {"p0000": 0.5, "p0003": 1.5, "p0005": 2.5, "ensemble": 3.0}, "test")
    assert record["validation"]["standing"]["rank"] == 3  # 3.0 and the best pod's 4.0 are above 2.5
    assert record["validation"]["standing"]["percentile"] == 50.0  # 1.0 and 2.0 at or below, of 4
    assert record["backtest"]["standing"]["rank"] == 1 and record["backtest"]["value"] == 3.0
    assert "the ensemble (3.00) ranks 1 (0 of the 3 pods placed above it)" in record["sentences"][1]
    below = spread.spread(root, {"p0000": 0.5, "p0003": 1.5, "p0005": 2.5, "ensemble": 0.1}, "test")
    assert below["backtest"]["standing"]["rank"] == 4 and below["backtest"]["standing"]["percentile"] == 0.0
    assert "ranks 4 (3 of the 3 pods placed above it), at or above 0% of them" in below["sentences"][1]


def test_a_validation_only_record_has_no_backtest_part(tmp_path: Path) -> None:
    record = spread.spread(write_run(tmp_path / "tour"))
    assert record["backtest"] is None and len(record["sentences"]) == 1
    assert all(p["backtest"] is None for p in record["pods"])
    rows = spread_rows(record)
    assert [r[0] for r in rows] == ["validation"] and rows[0][1:5] == ["4 of 5", "4.00", "1", "100%"]


def test_one_pod_and_no_pod_are_said_plainly_and_report_md_holds_no_nan(tmp_path: Path) -> None:
    one = write_run(tmp_path / "one", rows=[("p0000", "ppo", "finished", 1.2, True)])
    record = spread.spread(one, {"p0000": 0.3}, "test")
    assert record["validation"]["standing"] is None and record["backtest"]["standing"] is None
    assert record["validation"]["value"] == 1.2 and record["backtest"]["value"] == 0.3  # the figures stay
    assert all(
        "one finished pod, the result itself: no spread of pods to stand against" in s for s in record["sentences"]
    )
    section = "\n".join(spread_section(record))
    assert "| Period |" not in section and "nan" not in section.lower()  # no table of NaN: words
    none = write_run(tmp_path / "none", rows=[("p0000", "ppo", "failed", math.nan, False)])
    record = spread.spread(none)
    assert record["finished"] == 0 and record["pods"] == [] and record["validation"]["standing"] is None
    assert record["sentences"] == ["No pod finished: there is no result and no spread of pods."]
    assert "nan" not in "\n".join(spread_section(record)).lower()


def test_two_pods_with_one_kept_have_a_validation_spread_and_say_why_test_has_none(tmp_path: Path) -> None:
    rows = [("p0000", "ppo", "finished", 1.0, True), ("p0001", "sac", "finished", 0.5, False)]
    record = spread.spread(write_run(tmp_path / "tour", rows=rows), {"p0000": 0.7}, "test")
    assert record["validation"]["standing"]["n"] == 2 and record["backtest"]["standing"] is None
    assert "1 of the 2 finished pods placed: no spread to stand against" in record["sentences"][1]
    assert [r[0] for r in spread_rows(record)] == ["validation"]


def test_no_section_for_a_run_that_is_not_a_tournament() -> None:
    assert spread_section(None) == []
