"""benchmarks/tournament_lineage.py on run folders laid out as tournament_value.py --keep-runs writes them:
the single run's best and last validation, the tournament's best pod with its lineage, and the pods
cancelled at the time budget, read from the runs' own files (known answers)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

from trader import rundir

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import tournament_lineage


def _pods(folder: Path, rows: list[tuple]) -> None:
    folder.mkdir(parents=True)
    columns = ["pod_id", "generation", "parent_id", "steps", "score", "status"]
    pd.DataFrame(rows, columns=columns).to_parquet(folder / rundir.PODS)


def test_the_lineage_and_the_records_are_the_runs_own(tmp_path: Path, capsys) -> None:
    single = tmp_path / "single-3"
    single.mkdir()
    pd.DataFrame({"step": [100.0, 200.0, 250.0, 300.0], "val_score": [1.0, 4.0, None, 2.5]}).to_parquet(
        single / rundir.METRICS
    )
    _pods(
        tmp_path / "pbt-3",
        [
            ("p0", 0, None, 100, 3.0, "finished"),
            ("p1", 0, None, 100, 2.0, "finished"),
            ("p2", 1, "p0", 100, 3.5, "finished"),
            ("p3", 2, "p2", 100, 9.0, "finished"),  # the best: three pods of one lineage
            ("p4", 3, "p3", 0, None, "cancelled"),
        ],
    )
    _pods(tmp_path / "random-3", [("p0", 0, None, 100, 1.5, "finished"), ("p1", 0, None, 100, 2.5, "finished")])
    assert tournament_lineage.single_record(single) == (4.0, 200, 2.5, 300)
    assert tournament_lineage.tournament_record(tmp_path / "pbt-3") == {
        "best": 9.0,
        "generation": 2,
        "lineage": 300,
        "best_fresh": 3.0,
        "finished": 4,
        "cancelled": 1,
    }
    assert tournament_lineage.main([str(tmp_path)]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert (
        row == "| 3 | 4.00 (200) | 2.50 (300) | 9.00 (2, 300) | 3.00 | 2.50 | 4 / 1 | 0 (0); 0 (0) |"
    )  # no selection.json


def test_the_qualified_pods_lineages_are_counted_from_their_fresh_ancestors(tmp_path: Path, capsys) -> None:
    """Three qualified pods, two of one family (p2 continued p0, p3 continued p2) and p1 fresh: 2 lineages; a pod
    below the bar (p4, of a third family) is not counted; the two members are one lineage."""
    folder = tmp_path / "pbt-1"
    _pods(
        folder,
        [
            ("p0", 0, None, 100, 3.0, "finished"),
            ("p1", 0, None, 100, 2.0, "finished"),
            ("p2", 1, "p0", 100, 3.5, "finished"),
            ("p3", 2, "p2", 100, 9.0, "finished"),
            ("p5", 0, None, 100, 0.1, "finished"),
            ("p4", 1, "p5", 100, 0.2, "finished"),
        ],
    )
    flags = {"p3": True, "p2": True, "p0": False, "p1": True, "p4": False, "p5": False}
    candidates = [{"pod_id": pod, "score": 0.0, "psr": 0.0, "qualified": ok} for pod, ok in flags.items()]
    selection = {"format_version": rundir.SELECTION_VERSION, "candidates": candidates, "members": ["p3", "p2"]}
    rundir.write_json(folder / rundir.SELECTION, selection)  # the members: the best two qualified, one family
    assert (
        tournament_lineage.lineage_root(tournament_lineage.pod_parents(pd.read_parquet(folder / rundir.PODS)), "p3")
        == "p0"
    )
    assert tournament_lineage.qualified_lineages(folder) == (3, 2, 2, 1)
    assert tournament_lineage.main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("| 6 / 0 | 3 (2); 2 (1) |")


def test_a_tournament_that_finished_no_pod_is_a_row_not_a_crash(tmp_path: Path) -> None:
    _pods(tmp_path / "pbt-0", [("p0", 0, None, 0, None, "cancelled"), ("p1", 0, None, 0, None, "cancelled")])
    record = tournament_lineage.tournament_record(tmp_path / "pbt-0")
    assert record["finished"] == 0 and record["cancelled"] == 2 and record["lineage"] == 0
    assert record["generation"] is None and math.isnan(record["best"])  # nothing to rank


def test_a_tournament_setting_is_read_against_the_single_runs_of_another_folder(tmp_path: Path, capsys) -> None:
    """tournament_value.py --arms pbt writes pbt-S only: its row takes the single run from --single-from, and the
    arm that was not trained is n/a."""
    singles = tmp_path / "all"
    (singles / "single-5").mkdir(parents=True)
    pd.DataFrame({"step": [100.0, 200.0], "val_score": [3.0, 2.0]}).to_parquet(singles / "single-5" / rundir.METRICS)
    _pods(
        tmp_path / "pbt-only" / "pbt-5", [("p0", 0, None, 100, 1.0, "finished"), ("p1", 1, "p0", 60, 4.0, "finished")]
    )
    assert tournament_lineage.main([str(tmp_path / "pbt-only"), "--single-from", str(singles)]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert row == "| 5 | 3.00 (100) | 2.00 (200) | 4.00 (1, 160) | 1.00 | n/a | 2 / 0 | 0 (0); 0 (0) |"
