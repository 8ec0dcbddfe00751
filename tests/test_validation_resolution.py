"""benchmarks/validation_resolution.py: which kept runs it takes, its refusals (exit 2, one line), and its report
from saved scores and replays: the choice each score makes, the Spearman correlations and issue 42's counts, on
records whose answers are known."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import validation_resolution as vr


def _record(seed: int, tests: dict[str, float], single: float, rule_test: float) -> dict:
    return {
        "seed": seed,
        "pods": [{"pod_id": p, "generation": 0, "validation": 0.0, "test": t} for p, t in tests.items()],
        "single_best": single,
        "rule": {"test": rule_test},
    }


def _write(path: Path, value: object) -> Path:
    path.write_text(json.dumps(value))
    return path


def test_kept_runs_finds_the_arms_asked_for_and_refuses_a_run_found_twice(tmp_path: Path) -> None:
    """The finder validation_resolution.py calls (`tournament_value.kept_runs`): a seed need not hold every arm."""
    for name in ("a/pbt-3", "a/single-3", "a/random-3", "b/pbt-4", "b/notes"):
        (tmp_path / name).mkdir(parents=True)
    found = vr.kept_runs([tmp_path / "a", tmp_path / "b"], ("pbt",))
    assert found == {3: {"pbt": tmp_path / "a" / "pbt-3"}, 4: {"pbt": tmp_path / "b" / "pbt-4"}}
    assert vr.kept_runs([tmp_path / "a"], ("pbt", "random"))[3]["random"] == tmp_path / "a" / "random-3"
    (tmp_path / "c" / "pbt-3").mkdir(parents=True)
    with pytest.raises(ValueError, match="seed 3's pbt arm is in two folders"):
        vr.kept_runs([tmp_path / "a", tmp_path / "c"], ("pbt",))
    with pytest.raises(ValueError, match="no random-S folder"):
        vr.kept_runs([tmp_path / "b"], ("random",))


def test_each_score_chooses_its_own_best_pod_and_the_report_counts_it(tmp_path: Path) -> None:
    """Seed 1: daily ranks p1 first (test 20), the bars p2 (test 23); seed 2: both rank p2 first."""
    scores = {
        1: {"p1": {"daily": 10.0, "bar": 8.0}, "p2": {"daily": 9.0, "bar": 9.0}, "p3": {"daily": 1.0, "bar": 1.0}},
        2: {"p1": {"daily": 1.0, "bar": 1.0}, "p2": {"daily": 2.0, "bar": 3.0}, "p3": {"daily": 0.0, "bar": 0.0}},
    }
    records = {
        1: _record(1, {"p1": 20.0, "p2": 23.0, "p3": 10.0}, 21.0, 20.0),
        2: _record(2, {"p1": 5.0, "p2": 6.0, "p3": 4.0}, 7.0, 6.0),
    }
    tests = vr.pod_tests(records[1])
    assert vr.choice(scores[1], tests, "daily") == ("p1", 20.0)
    assert vr.choice(scores[1], tests, "bar") == ("p2", 23.0)
    assert vr.spearman(scores[1], tests, "bar") == pytest.approx(1.0)
    assert vr.spearman(scores[1], tests, "daily") == pytest.approx(0.5)
    text = "\n".join(vr.arm_report("pbt", scores, records))
    assert "| 1 | 3 | +0.50 | +1.00 | p1 20.00 | p2 23.00 | 21.00 |" in text
    assert "Bar's choice against daily's, test: above on 1 of 2" in text


def test_the_rule_report_takes_the_result_that_was_chosen_and_counts_drawdowns() -> None:
    def replay(result: str, best: float, ensemble: float | None, best_dd: float, ens_dd: float) -> dict:
        return {
            "best": {"pod_id": "p0", "validation": 1.0, "test": best, "max_drawdown": best_dd},
            "ensemble": None
            if ensemble is None
            else {"members": ["p0", "p1"], "validation": 1.0, "test": ensemble, "max_drawdown": ens_dd},
            "result": result,
            "z": 0.1,
            "critical": 2.7,
        }

    rules = {"pbt": {1: replay("ensemble", 20.0, 22.0, -0.02, -0.01), 2: replay("best", 19.0, 18.0, -0.01, -0.03)}}
    assert vr.rule_test(rules["pbt"][1]) == 22.0 and vr.rule_test(rules["pbt"][2]) == 19.0
    records = {"pbt": {1: _record(1, {}, 21.0, 21.5), 2: _record(2, {}, 18.5, 19.0)}}
    text = "\n".join(vr.rule_report(rules, records))
    assert (
        "pbt: result medians, test: 20.50 (single 19.75, the daily ranking's result 20.25); chose the ensemble on 1 of 2"
        in text
    )
    assert "no larger than the best pod's on 1 of the 2 seeds with an ensemble" in text
    assert "PBT's result against random search's" not in text  # one arm only


def test_bad_input_exits_2_with_one_line(tmp_path: Path, capsys) -> None:
    records = _write(tmp_path / "r.json", [_record(1, {"p1": 1.0}, 1.0, 1.0)])
    for argv, words in (
        ([str(tmp_path)], "--records ARM:PATH"),
        ([str(tmp_path), "--records", f"foo:{records}"], "ARM one of pbt, random"),
        ([str(tmp_path), "--records", f"pbt:{records}", "--records", f"pbt:{records}"], "given twice"),
        (["--records", f"pbt:{records}", "--arms", "pbt"], "give the folders"),
        (["--records", f"pbt:{records}", "--arms", "pbt", "--scores", str(records), str(tmp_path)], "only to replay"),
        (["--records", f"pbt:{records}", "--arms", "pbt", "--rule", "--scores", str(records)], "give their folders"),
        ([str(tmp_path), "--records", f"pbt:{records}", "--arms", "pbt", "--out", str(records)], "exists"),
        ([str(tmp_path / "none"), "--records", f"pbt:{records}", "--arms", "pbt"], "not a folder"),
        (["--records", f"pbt:{records}", "--arms", "pbt,td3"], "--arms takes"),
    ):
        with pytest.raises(SystemExit) as stopped:
            vr.main(argv)
        assert stopped.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert words in err, (argv, err)
