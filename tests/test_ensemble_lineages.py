"""benchmarks/ensemble_lineages.py's membership rule on a kept tournament's own files (known answers): the best
qualified pod of each lineage, best first, at most k; today's members as selection.json records them."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from trader import rundir

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import ensemble_lineages


def _tournament(folder: Path) -> None:
    folder.mkdir()
    rows = [  # two families (p0's and p1's) and a fresh pod p5; p4 continued p5 but did not qualify
        ("p0", None),
        ("p1", None),
        ("p2", "p0"),
        ("p3", "p2"),
        ("p5", None),
        ("p4", "p5"),
        ("p6", "p1"),
    ]
    pd.DataFrame(rows, columns=["pod_id", "parent_id"]).to_parquet(folder / rundir.PODS)
    ranked = [("p3", True), ("p2", True), ("p6", True), ("p4", False), ("p1", True), ("p5", True), ("p0", False)]
    candidates = [{"pod_id": pod, "score": 0.0, "psr": 0.0, "qualified": ok} for pod, ok in ranked]
    selection = {"format_version": rundir.SELECTION_VERSION, "candidates": candidates, "members": ["p3", "p2", "p6"]}
    rundir.write_json(folder / rundir.SELECTION, selection)


def test_one_member_per_lineage_the_best_qualified_first(tmp_path: Path) -> None:
    _tournament(tmp_path / "pbt-0")
    today, by_lineage = ensemble_lineages.lineage_members(tmp_path / "pbt-0", k=3)
    assert today == ["p3", "p2", "p6"]  # as recorded: two of them of p0's family
    assert by_lineage == ["p3", "p6", "p5"]  # p2 is p3's family; p4 did not qualify, p5 did
    assert ensemble_lineages.lineage_members(tmp_path / "pbt-0", k=2)[1] == ["p3", "p6"]


def test_a_folder_without_pbt_runs_or_a_seed_without_a_row_exits_2_before_any_work(tmp_path: Path, capsys) -> None:
    rows = tmp_path / "rows.json"
    rows.write_text('[{"seed": 1, "single": {"sharpe": 1.0}}]')
    (tmp_path / "empty").mkdir()
    for roots in ([str(tmp_path / "empty")], [str(tmp_path / "missing")]):
        with pytest.raises(SystemExit) as stop:
            ensemble_lineages.main([*roots, "--rows", str(rows)])
        assert stop.value.code == 2 and "no PBT run folder" in capsys.readouterr().err
    (tmp_path / "kept").mkdir()
    _tournament(tmp_path / "kept" / "pbt-0")
    with pytest.raises(SystemExit) as stop:
        ensemble_lineages.main([str(tmp_path / "kept"), "--rows", str(rows)])
    assert stop.value.code == 2 and "seed 0 has no row in --rows" in capsys.readouterr().err
