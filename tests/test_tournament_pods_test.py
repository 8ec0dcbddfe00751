"""benchmarks/tournament_pods_test.py: which pods it backtests (those whose best checkpoint the tournament kept)
and its refusals of bad input before any work (exit 2, one line naming what is wrong)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import tournament_pods_test
from trader import rundir


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


def _record(seed: int, single: float, pods: list[float], ensembles: dict[str, float]) -> dict:
    return {
        "seed": seed,
        "pods": [
            {"pod_id": f"p{i:04d}", "generation": i, "validation": 20.0 + i, "test": t} for i, t in enumerate(pods)
        ],
        "single_best": single,
        "single_final": 0.0,
        "best_pod": {"pod_id": f"p{len(pods) - 1:04d}", "validation": 19.0 + len(pods), "test": pods[-1]},
        "ensembles": {k: {"validation": 21.0, "test": t} for k, t in ensembles.items()},
    }


def test_hindsight_ceiling_is_the_best_test_of_any_pod_or_ensemble() -> None:
    assert tournament_pods_test.hindsight_ceiling(_record(0, 23.0, [22.0, 23.5, 22.8], {"3": 23.2})) == 23.5
    assert tournament_pods_test.hindsight_ceiling(_record(0, 23.0, [22.0, 22.5], {"8": 23.9})) == 23.9


def test_records_report_again_without_a_backtest(tmp_path: Path, capsys) -> None:
    """An earlier --out, read back: the same report, the ceiling against the single run counted seed by seed."""
    records = [
        _record(2, 23.0, [22.0, 23.4], {"3": 23.1}),  # ceiling 23.4, above the single run by 0.4
        _record(1, 23.6, [22.9, 23.3], {"3": 23.5}),  # ceiling 23.5, below it by 0.1
    ]
    path = tmp_path / "records.json"
    path.write_text(json.dumps(records))
    assert tournament_pods_test.main(["--records", str(path), "--ks", "1,3"]) == 0
    out = capsys.readouterr().out
    assert out.index("| 1 |") < out.index("| 2 |")  # in seed order
    assert "against the single run: above on 1 of 2" in out and "by -0.10, +0.40." in out
    assert "hindsight ceiling 23.45." in out


def test_records_with_todays_rule_report_it_against_the_single_run_and_the_recorded_result(
    tmp_path: Path, capsys
) -> None:
    """Records that replayed today's result rule: its choice per seed, and its result's test Sharpe paired
    with the single run's and with the result the run recorded; older records (no rule) leave the lines out."""
    first, second = _record(1, 23.0, [22.0, 22.6], {"3": 23.3}), _record(2, 23.6, [22.9, 23.3], {"3": 23.5})
    first["rule"] = {"result": "ensemble", "members": ["p0001", "p0000"], "z": 0.7, "critical": 2.24, "test": 23.3}
    first["recorded_result"] = {"result": "best", "test": 22.6}
    second["rule"] = {"result": "best", "members": [], "z": None, "critical": None, "test": 23.3}
    second["recorded_result"] = {"result": "best", "test": 23.3}
    path, old = tmp_path / "records.json", tmp_path / "old.json"
    path.write_text(json.dumps([first, second]))
    old.write_text(json.dumps([_record(3, 23.0, [22.0], {})]))
    assert tournament_pods_test.main(["--records", str(path), "--ks", "1,3"]) == 0
    out = capsys.readouterr().out
    assert "1: ensemble (z 0.70, needs 2.24; recorded best), 2: best (z n/a, needs n/a; recorded best)" in out
    assert "against the single run: above on 1 of 2" in out.split("Its result, test,")[1]
    assert "against the result each run recorded: above on 1 of 2" in out and "medians 23.30 and 22.95." in out
    assert tournament_pods_test.main(["--records", str(old), "--ks", "1"]) == 0
    assert "Today's result rule" not in capsys.readouterr().out
    assert "not worse by 1%: one-sided p = " in out.split("Its result, test,")[1]


def test_versus_pairs_todays_rule_with_another_arms_records_by_seed(tmp_path: Path, capsys) -> None:
    """Random search's runs replayed the same way: the two rules' results paired seed by seed, and refusals."""

    def replayed(seed: int, test: float) -> dict:
        found = _record(seed, 23.0, [22.0], {})
        found["rule"] = {"result": "best", "members": [], "z": None, "critical": None, "test": test}
        found["recorded_result"] = {"result": "best", "test": test}
        return found

    ours, theirs, short, old = (tmp_path / f"{name}.json" for name in ("ours", "theirs", "short", "old"))
    ours.write_text(json.dumps([replayed(1, 23.0), replayed(2, 23.5), replayed(3, 22.0)]))
    theirs.write_text(json.dumps([replayed(3, 21.0), replayed(1, 22.0), replayed(2, 23.9)]))  # paired after sorting
    short.write_text(json.dumps([replayed(1, 22.0)]))
    old.write_text(json.dumps([_record(1, 23.0, [22.0], {})]))
    assert tournament_pods_test.main(["--records", str(ours), "--versus", str(theirs), "--ks", "1"]) == 0
    line = capsys.readouterr().out.split("(--versus), test: ")[1]
    assert line.startswith("above on 2 of 3") and "medians 23.00 and 22.00." in line
    for argv, says in (
        (["--records", str(ours), "--versus", str(short)], "other seeds ([1]) than the records'"),
        (["--records", str(ours), "--versus", str(old)], "have no replayed rule"),
        ([str(tmp_path), "--versus", str(theirs)], "give --records too"),
    ):
        with pytest.raises(SystemExit) as stop:
            tournament_pods_test.main(argv)
        assert stop.value.code == 2 and says in capsys.readouterr().err


def test_records_refusals(tmp_path: Path, capsys) -> None:
    good, foreign, broken = tmp_path / "good.json", tmp_path / "foreign.json", tmp_path / "broken.json"
    good.write_text(json.dumps([_record(1, 23.0, [22.0], {})]))
    foreign.write_text('[{"seed": 1, "best_pod": {"sharpe": 1.0}}]')  # tournament_value.py's rows
    broken.write_text("[{")
    (tmp_path / "runs").mkdir()
    for argv, says in (
        (["--records", str(foreign)], "not the records of tournament_pods_test.py --out"),
        (["--records", str(broken)], "cannot read it as JSON"),
        (["--records", str(tmp_path / "absent.json")], "cannot read it as JSON"),
        (["--records", str(good), "--records", str(good)], "a seed appears twice"),
        (["--records", str(good), str(tmp_path / "runs")], "not both"),
        (["--records", str(good), "--out", str(tmp_path / "new.json")], "--out and --rows belong to a run"),
        ([], "not both"),
    ):
        with pytest.raises(SystemExit) as stop:
            tournament_pods_test.main(argv)
        assert stop.value.code == 2 and says in capsys.readouterr().err


def test_the_earlier_rule_takes_the_higher_validation_score_of_the_best_pod_and_todays_ensemble() -> None:
    """Known answers: the ensemble where it scored higher on validation, the best pod on a tie or with no
    ensemble, and None where the record holds no validation of the rule's ensemble."""
    record = _record(1, 23.0, [22.0, 22.5, 22.6], {"2": 23.4})  # pods validated 20, 21, 22; the best is p0002
    record["rule"] = {"result": "ensemble", "members": ["p0002", "p0001"], "z": 0.3, "critical": 2.5, "test": 23.4}
    record["best_pod"]["validation"] = 22.0
    record["ensembles"]["2"]["validation"] = 22.1
    assert tournament_pods_test.earlier_rule_test(record) == 23.4
    record["ensembles"]["2"]["validation"] = 22.0
    assert tournament_pods_test.earlier_rule_test(record) == 22.6  # a tie: the best pod
    record["rule"]["members"] = ["p0002", "p0000"]  # not the top two: their ensemble was not validated here
    assert tournament_pods_test.earlier_rule_test(record) is None
    record["rule"]["members"] = []
    assert tournament_pods_test.earlier_rule_test(record) == 22.6
