"""benchmarks/tournament_suite.py: the development suite's spread, the arms' rules, the reading's known
answers, refusals of bad input, merging and resuming, and the whole benchmark at a tiny budget on one
market of each bar (issue 78: "the suite runs in CI at a tiny budget")."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks import tournament_suite as suite

ROOT = Path(__file__).resolve().parent.parent
DEV_SUITE = ROOT / "benchmarks" / "market_suite"


def _recipes() -> list[dict]:
    """The synthetic markets' recipes (the suite's files; the real closes are a shipped recipe by name)."""
    return [
        tomllib.loads(Path(m.recipe).read_text()) for m in suite.read_suite(DEV_SUITE) if m.recipe.endswith(".toml")
    ]


def test_the_suite_holds_real_closes_judged_by_a_walk_forward_of_several_folds() -> None:
    from market_envs.data.recipes import find_recipe
    from trader.folds import FoldSpec

    real = {m.name: m for m in suite.read_suite(DEV_SUITE)}["sp500-20-daily"]
    assert real.recipe == "sp500-20-daily" and real.costs is None and real.cost == 0.0005
    recipe = find_recipe(real.recipe)
    assert recipe.source == "files" and recipe.interval == "1D"
    spec = FoldSpec(**real.walk_forward)
    days = (pd.Timestamp(recipe.end) - pd.Timestamp(recipe.start)).days / 365.25
    years = [int(getattr(spec, w).removesuffix("y")) for w in ("train", "validation", "test")]
    assert int((days - sum(years[:2])) // years[2]) >= 3  # three test windows or more fit


def test_the_development_suite_varies_what_hyperparameters_depend_on() -> None:
    """At least 6 markets; every edge kind, minute and daily bars, 10 to 100 tickers, both cost kinds,
    horizons from an hour to a month, and an edge that changes within the training window."""
    markets = suite.read_suite(DEV_SUITE)
    recipes = _recipes()
    assert len([m for m in markets if not m.walk_forward]) >= 6
    planted = [r for r in recipes if "edge" in r.get("synthetic", {})]
    edges = [r["synthetic"]["edge"] for r in planted]
    kinds = {k for e in edges for k in ([e["kind"]] if isinstance(e["kind"], str) else e["kind"])}
    assert {"momentum", "mean_reversion", "lead_lag"} <= kinds
    assert any(not isinstance(e["kind"], str) for e in edges)  # a mixed market
    assert {r["interval"] for r in recipes} == {"1min", "1D"}
    tickers = [r["synthetic"]["n_tickers"] for r in recipes if "synthetic" in r]
    assert min(tickers) == 10 and max(tickers) == 100
    assert {m.costs for m in markets} >= {None, "institutional"}
    assert any(m.costs is None and m.cost == 0.0005 for m in markets)
    horizons = {(r["interval"], e["horizon"]) for r, e in zip(planted, edges, strict=True)}
    assert ("1min", 60) in horizons and ("1D", 20) in horizons
    shifts = [e["shift"] for e in edges if "shift" in e]
    assert any("kind" in s for s in shifts) and any("strength_sharpe" in s for s in shifts)
    for recipe, edge in zip(planted, edges, strict=True):  # each shift starts inside the training window
        if "shift" in edge:
            assert recipe["start"] < edge["shift"]["start"] < recipe["train_end"]


def test_every_arm_sees_the_rules_of_its_cost_kind_with_the_planted_horizon_hidden() -> None:
    by_name = {m.name: m for m in suite.read_suite(DEV_SUITE)}
    flat = suite.suite_rules(by_name["suite-revert-daily"])  # planted horizon 5
    assert flat["return_windows"] == [30] and flat["market_neutral"]
    assert flat["buy_cost"] == flat["sell_cost"] == 0.0005
    assert flat["weights_map"] == "normalized"  # the `market` preset: rebalanced to the action
    costly = suite.suite_rules(by_name["suite-revert-minute-session"])  # planted horizon 390
    assert costly["return_windows"] == [30]
    assert costly["rate_action"] and costly["weights_map"] == "linear"  # the `market-costs` preset
    assert costly["costs"]  # the institutional model's terms
    assert costly["initial_cash"] == 1e7  # the capital suite.toml names


def _row(market: str, seed: int, defaults: float, random: float, tournament: float) -> dict:
    arms = {"defaults": defaults, "random": random, "tournament": tournament}
    return {
        "market": market,
        "seed": seed,
        "planted": True,
        "oracle_sharpe": 10.0,
        **{arm: {"sharpe": 10 * s, "score": s, "result": "best", "seconds": 60.0} for arm, s in arms.items()},
    }


def test_the_reading_of_a_tournament_ahead_everywhere_has_known_answers() -> None:
    rows = [_row(m, s, 0.2 + 0.1 * s, 0.5 + 0.1 * s, 0.9 + 0.01 * s) for m in ("a", "b") for s in range(4)]
    out = suite.read_out(rows, ["a", "b"])
    arms = out["arms"]
    assert arms["defaults"]["failure_rate"] == 0.75  # 0.2, 0.3 and 0.4 are below half the oracle
    assert arms["tournament"]["failure_rate"] == 0.0
    assert arms["tournament"]["probability_of_improvement"] == 1.0
    assert arms["defaults"]["probability_of_improvement"] == 0.5  # against itself: ties count one half
    assert arms["defaults"]["cvar10"] == pytest.approx(0.2)  # the lowest 10% of 8 runs: one run
    assert arms["defaults"]["iqm"] == pytest.approx(0.35)  # the middle half of 0.2, 0.3, 0.4, 0.5 twice
    assert arms["tournament"]["profile"]["0.75"] == 1.0 and arms["defaults"]["profile"]["0.75"] == 0.0
    difference = out["comparisons"]["tournament_minus_defaults_iqm"]
    assert difference["low"] > 0
    assert out["comparisons"]["tournament_not_worse_than_random"]["verdict"] is True


def test_a_tournament_far_behind_random_search_is_not_called_not_worse() -> None:
    rows = [_row(m, s, 0.2, 0.9 + 0.01 * s, 0.6 + 0.01 * s) for m in ("a", "b") for s in range(4)]
    assert suite.read_out(rows, ["a", "b"])["comparisons"]["tournament_not_worse_than_random"]["verdict"] is False


def test_an_arm_without_a_finished_pod_counts_as_its_markets_worst_run() -> None:
    rows = [_row("a", 0, 0.4, 0.1, 0.8), _row("a", 1, 0.5, 0.2, 0.9)]
    rows[1]["random"]["score"] = math.nan
    assert suite.scores(rows, ["a"], "random").ravel().tolist() == [0.1, 0.1]  # the market's worst run of any arm
    np.testing.assert_array_equal(suite.scores(rows, ["a"], "tournament"), [[0.8], [0.9]])


def _run(*args: str, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """The benchmark's main in this process: (exit code, stdout, stderr)."""
    try:
        code = suite.main(list(args))
    except SystemExit as stop:  # argparse's refusals
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("sidecar", "says"),
    [
        ('[markets.nowhere]\ncosts = "institutional"\n', "no recipe in"),
        ('[markets.tiny-daily]\ncosts = "cheap"\n', "unknown cost model 'cheap'"),
        ("[markets.tiny-daily]\nfee = 1\n", "unknown key(s) ['fee']"),
        ('[markets.tiny-daily]\nwalk_forward = { train = "5q", validation = "1y", test = "1y" }\n', "5q"),
    ],
)
def test_a_bad_suite_is_refused_in_one_line_before_any_run(sidecar: str, says: str, tmp_path: Path, capsys) -> None:
    folder = _tiny_suite(tmp_path)
    (folder / suite.SUITE_FILE).write_text(sidecar)
    code, _, err = _run("--suite", str(folder), "--out", str(tmp_path / "out.json"), capsys=capsys)
    assert code == 2 and says in err.strip().splitlines()[-1]  # one line names what is wrong
    assert not (tmp_path / "out.json").exists()


def test_a_folder_without_recipes_is_refused(tmp_path: Path, capsys) -> None:
    code, _, err = _run("--suite", str(tmp_path), capsys=capsys)
    assert code == 2 and "no recipe (*.toml)" in err


TINY_DAILY = """name = "tiny-daily"
source = "synthetic"
interval = "1D"
start = "2016-01-04"
end = "2022-01-01"
train_end = "2020-01-01"
val_end = "2021-01-01"

[synthetic]
n_tickers = 10
seed = 1

[synthetic.edge]
kind = "mean_reversion"
strength_sharpe = 8.0
fraction = 1.0
horizon = 5
seed = 1
"""

TINY_MINUTE = """name = "tiny-minute"
source = "synthetic"
interval = "1min"
start = "2023-01-03"
end = "2023-02-01"
train_end = "2023-01-20"
val_end = "2023-01-26"

[synthetic]
n_tickers = 10
seed = 2

[synthetic.edge]
kind = "momentum"
strength_sharpe = 30.0
fraction = 1.0
horizon = 60
seed = 2
"""


def _tiny_suite(tmp_path: Path) -> Path:
    folder = tmp_path / "suite"
    folder.mkdir(exist_ok=True)
    (folder / "tiny-daily.toml").write_text(TINY_DAILY)
    (folder / "tiny-minute.toml").write_text(TINY_MINUTE)
    (folder / suite.SUITE_FILE).write_text('[markets.tiny-minute]\ncosts = "institutional"\ncapital = 1e7\n')
    return folder


def test_the_suite_runs_end_to_end_at_a_tiny_budget_and_resumes_without_training_again(tmp_path: Path, capsys) -> None:
    """One seed of one daily and one minute market (institutional costs), every arm a few seconds:
    the JSON the issue names, a finite score per arm, and a second start that finds every row done."""
    folder, out = _tiny_suite(tmp_path), tmp_path / "suite.json"
    flags = ["--suite", str(folder), "--seeds", "1", "--minutes", "0.05", "--pod-steps", "2048", "--num-envs", "16"]
    code, _, err = _run(*flags, "--out", str(out), capsys=capsys)
    assert code == 0, err[-2000:]
    found = json.loads(out.read_text())
    assert [m["name"] for m in found["markets"]] == ["tiny-daily", "tiny-minute"]
    for arm in suite.ARMS:
        held = found["arms"][arm]
        assert set(held) >= {"iqm", "iqm_interval", "cvar10", "failure_rate", "probability_of_improvement"}
        assert held["iqm_interval"][0] <= held["iqm"] <= held["iqm_interval"][1]
        for row in found["rows"]:
            assert math.isfinite(row[arm]["score"]) and row[arm]["score"] == pytest.approx(
                row[arm]["sharpe"] / row["oracle_sharpe"]
            )
    assert found["cost"]["device_seconds"] > 0 and "GPU" in found["cost"]["gpu"]
    code, printed, _ = _run(*flags, "--out", str(out), capsys=capsys)
    assert code == 0 and "trained in" not in printed
    assert json.loads(out.read_text())["rows"] == found["rows"]
    code, _, err = _run(*flags[:-4], "--pod-steps", "4096", "--num-envs", "16", "--out", str(out), capsys=capsys)
    assert code == 2 and "other settings" in err
    halves = []
    for name in ("tiny-daily", "tiny-minute"):  # the two rows as if run side by side, merged back
        half = {**found, "rows": [r for r in found["rows"] if r["market"] == name]}
        halves.append(tmp_path / f"{name}.json")
        halves[-1].write_text(json.dumps(half))
    code, _, err = _run(
        "--suite", str(folder), "--merge", *map(str, halves), "--out", str(tmp_path / "m.json"), capsys=capsys
    )
    assert code == 0, err
    assert json.loads((tmp_path / "m.json").read_text())["arms"] == found["arms"]


@pytest.mark.slow
def test_a_market_judged_by_walk_forward_scores_each_arms_stitched_test_windows(tmp_path: Path, capsys) -> None:
    """A market with nothing planted, walked over two folds: every arm's score is the Sharpe ratio of
    its stitched record, the yardsticks beside it, and no pooled reading (nothing planted to pool)."""
    folder = tmp_path / "suite"
    folder.mkdir()
    flat = TINY_DAILY.replace('name = "tiny-daily"', 'name = "tiny-flat"').replace(
        "strength_sharpe = 8.0", "strength_sharpe = 0.0"
    )
    (folder / "tiny-flat.toml").write_text(flat)
    (folder / suite.SUITE_FILE).write_text(
        '[markets.tiny-flat]\nwalk_forward = { train = "3y", validation = "1y", test = "1y" }\n'
    )
    out = tmp_path / "suite.json"
    flags = ["--suite", str(folder), "--seeds", "1", "--minutes", "0.1", "--pod-steps", "2048", "--num-envs", "16"]
    code, _, err = _run(*flags, "--out", str(out), capsys=capsys)
    assert code == 0, err[-2000:]
    found = json.loads(out.read_text())
    (row,) = found["rows"]
    assert row["planted"] is False and row["oracle_sharpe"] is None and "equal_weight" in row["yardsticks"]
    for arm in suite.ARMS:
        assert row[arm]["result"] == "walk-forward" and row[arm]["score"] == row[arm]["sharpe"]
        assert math.isfinite(row[arm]["score"])
    assert "arms" not in found  # nothing planted: no pooled reading


def test_options_that_would_do_nothing_or_overwrite_a_reading_are_refused(tmp_path: Path, capsys) -> None:
    folder = _tiny_suite(tmp_path)
    done = tmp_path / "done.json"
    done.write_text("{}")
    code, _, err = _run("--suite", str(folder), "--oracles", "--out", str(tmp_path / "o.json"), capsys=capsys)
    assert code == 2 and "--oracles trains and writes nothing" in err
    code, _, err = _run("--suite", str(folder), "--merge", str(done), "--out", str(done), capsys=capsys)
    assert code == 2 and "exists" in err and done.read_text() == "{}"
