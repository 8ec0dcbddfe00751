"""`--costs MODEL` (and `--cost-set KEY=VALUE`) on `trader train`, `tournament`, `backtest` and
`baselines`: the model reaches the rules, and bad input is one line and exit code 2."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from golden.case import session_panel
from market_fixtures import random_walk_frame, write_tiny_recipe

import trader.backtesting.periods as periods
import trader.environments as environments
import trader.training_envs as training_envs
from market_envs.costs import cost_model
from market_envs.data import from_frame
from podracer.cli import main
from trader.backtesting.yardsticks import YARDSTICKS
from trader.errors import UserError


def _close_only_panel():
    """Closes only (no open, high, low, volume), split into train / validation / test."""
    frame = random_walk_frame(2, 120, seed=3)[["timestamp", "ticker", "close"]]
    data = from_frame(frame, name="closes")
    stamps = data.timestamps
    return replace(data, meta={**data.meta, "train_end": stamps[60], "val_end": stamps[90]})


@pytest.fixture
def toy_data(monkeypatch):
    """The recipe names 'toy' (OHLCV) and 'closes' (close-only) load in-process panels."""
    panels = {"toy": session_panel(n_tickers=3, n_days=8, bars_per_day=10, seed=14), "closes": _close_only_panel()}

    def load(recipe: str):
        if recipe not in panels:
            raise UserError(f"unknown data set recipe {recipe!r}")
        return panels[recipe]

    monkeypatch.setattr(periods, "load_dataset", load)
    monkeypatch.setattr(training_envs, "load_market", lambda recipe, periods=None: load(recipe).with_periods(periods))
    monkeypatch.setattr(environments, "load_market", lambda recipe, periods=None: load(recipe).with_periods(periods))
    return panels


BAD = [
    (["--costs", "cheap"], "unknown cost model 'cheap'; known: zero, flat, retail, institutional"),
    (["--costs", "retail", "--cost-set", "buy_cost=-0.001"], "--cost-set: buy_cost must be in [0, 1)"),
    (
        ["--costs", "retail", "--cost-set", "commission_per_share=-0.01"],
        "commission_per_share must be a finite number >= 0",
    ),
    (["--costs", "institutional", "--cost-set", "participation=1.5"], "participation must be in (0, 1]"),
    (["--costs", "institutional", "--cost-set", "participation=0"], "participation must be in (0, 1]"),
    (["--costs", "retail", "--cost-set", "participation"], "--cost-set expects KEY=VALUE"),
    (["--costs", "retail", "--cost-set", "borow_rate=0.01"], "--cost-set: unknown key(s): borow_rate"),
    (["--cost-set", "participation=0.5"], "--cost-set needs --costs MODEL"),
]
CLOSE_ONLY = (
    ["--costs", "retail", "--cost-set", "impact_eta=0", "--cost-set", "participation=0.1"],
    "EnvConfig.costs.participation needs volume",
)


def _exits_2(argv: list[str], message: str, capsys) -> None:
    assert main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # (train prints its config first)
    assert last.startswith("error: ") and message in last, last


# ------------------------------------------------------------------ trader backtest


def test_backtest_costs_every_strategy_under_the_model_and_prints_the_breakdown(
    tmp_path: Path, toy_data, capsys
) -> None:
    run_dir = tmp_path / "run"
    code = main(
        [
            "backtest",
            str(run_dir),
            "--dataset",
            "toy",
            "--no-tear-sheet",
            "--costs",
            "retail",
            "--cost-set",
            "participation=0.5",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "Breakeven" in out and "Commission" in out and "cost model retail (participation=0.5)" in out
    report = json.loads((run_dir / "report.json").read_text())
    assert report["cost_model"]["name"] == "retail (participation=0.5)"
    assert (
        report["cost_model"]["costs"]["participation"] == 0.5 and report["cost_model"]["costs"]["commission_min"] == 1.0
    )
    assert set(report["costs"]) == set(report["order"]) == set(report["breakeven"])
    for name, row in report["breakeven"].items():
        assert row["multiples"] == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0] and row["status"] in ("crossed", "above", "below"), (
            name
        )
        assert report["costs"][name]["costs"] > 0
    assert "## Costs" in (run_dir / "report.md").read_text()


def test_backtest_says_what_it_runs_before_it_runs(tmp_path: Path, toy_data, capsys) -> None:
    """Issue 75, finding 11: `trader backtest` was silent for 19 s. Its first line names the run,
    the period and the breakeven runs, before any work."""
    import trader.backtesting.engine as engine

    def stop(*args, **kwargs):
        raise UserError("stopped here")

    run_dir = tmp_path / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "run_backtest", stop)
        assert main(["backtest", str(run_dir), "--dataset", "toy"]) == 2
    err = capsys.readouterr().err.splitlines()
    start = f"backtesting 0 strategies of {run_dir} beside the built-in baselines on the test period"
    assert err == [f"{start}, and at 0 to 8 x the costs (breakeven) ...", "error: stopped here"]
    assert main(["backtest", str(tmp_path / "none")]) == 2  # a refusal: its one line, no start line
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_backtest_without_costs_keeps_the_runs_model_names_it_and_no_breakeven_on_request(
    tmp_path: Path, toy_data, capsys
) -> None:
    run_dir = tmp_path / "run"
    rules = {"buy_cost": 0.0002, "sell_cost": 0.0002, "costs": {"spread_bps": 1.0}}
    run_dir.mkdir()
    (run_dir / "config.toml").write_text(
        f'[env]\ndataset = "toy"\n[env.env_config]\nbuy_cost = 0.0002\n'
        f"sell_cost = 0.0002\n[env.env_config.costs]\nspread_bps = 1.0\n"
    )
    assert main(["backtest", str(run_dir), "--no-tear-sheet", "--no-breakeven", "--output", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cost_model"]["name"] == "flat (buy_cost=0.0002, sell_cost=0.0002, spread_bps=1.0)"
    assert report["breakeven"] == {}
    assert report["cost_model"]["buy_cost"] == rules["buy_cost"] and report["cost_model"]["costs"]["spread_bps"] == 1.0


@pytest.mark.parametrize(("args", "message"), [*BAD, (["--costs", "retail", "--commission", "0.001"], "not both")])
def test_backtest_bad_costs_exit_2(args, message, tmp_path: Path, toy_data, capsys) -> None:
    _exits_2(["backtest", str(tmp_path / "run"), "--dataset", "toy", "--no-tear-sheet", *args], message, capsys)


def test_backtest_refuses_a_cap_on_close_only_data(tmp_path: Path, toy_data, capsys) -> None:
    args, message = CLOSE_ONLY
    _exits_2(
        ["backtest", str(tmp_path / "run"), "--dataset", "closes", "--period", "all", "--no-tear-sheet", *args],
        message,
        capsys,
    )


# ------------------------------------------------------------------ trader train


def test_train_under_a_named_model_records_it(tmp_path: Path) -> None:
    recipe = write_tiny_recipe(tmp_path)
    run_dir = tmp_path / "run"
    code = main(
        [
            "train",
            "--algo",
            "ppo",
            "--dataset",
            str(recipe),
            "--costs",
            "institutional",
            "--steps",
            "64",
            "--num-envs",
            "2",
            "--eval-every",
            "0",
            str(run_dir),
            "--config",
            str(_tiny_ppo(tmp_path)),
        ]
    )
    assert code == 0
    rules = tomllib.loads((run_dir / "config.toml").read_text())["env"]["env_config"]
    institutional = cost_model("institutional")
    assert rules["buy_cost"] == institutional.buy_cost and rules["costs"]["participation"] == 0.1
    assert rules["costs"]["spread_model"] == "high_low" and rules["costs"]["impact_eta"] == 1.0


def _tiny_ppo(folder: Path) -> Path:
    path = folder / "ppo.toml"
    path.write_text("num_steps = 16\nupdate_epochs = 1\nnum_minibatches = 2\nhidden_sizes = [8]\n")
    return path


@pytest.mark.parametrize(("args", "message"), [*BAD, CLOSE_ONLY])
def test_train_bad_costs_exit_2(args, message, tmp_path: Path, toy_data, capsys) -> None:
    dataset = "closes" if args is CLOSE_ONLY[0] else "toy"
    _exits_2(
        ["train", "--algo", "ppo", "--dataset", dataset, "--steps", "16", str(tmp_path / "run"), *args], message, capsys
    )


def test_train_costs_need_a_market(tmp_path: Path, capsys) -> None:
    _exits_2(
        ["train", "--algo", "ppo", "--env", "Pendulum-v1", "--costs", "retail", str(tmp_path)],
        "--costs applies to market data sets",
        capsys,
    )


# ------------------------------------------------------------------ trader tournament, trader baselines


@pytest.mark.parametrize(("args", "message"), BAD)
def test_tournament_bad_costs_exit_2(args, message, tmp_path: Path, capsys) -> None:
    recipe = write_tiny_recipe(tmp_path)
    _exits_2(["tournament", str(tmp_path / "run"), "--dataset", str(recipe), *args], message, capsys)


def test_tournament_refuses_a_cap_on_close_only_data_before_any_pod(tmp_path: Path, monkeypatch, capsys) -> None:
    import market_envs.data as data_module

    monkeypatch.setattr(data_module, "load", lambda recipe, **kw: _close_only_panel())
    args, message = CLOSE_ONLY
    _exits_2(["tournament", str(tmp_path / "run"), "--dataset", "closes", *args], message, capsys)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("args", "message"), [*BAD[:2], CLOSE_ONLY])
def test_baselines_bad_costs_exit_2_before_training(args, message, tmp_path: Path, monkeypatch, capsys) -> None:
    pytest.importorskip("stable_baselines3")
    import trader.libraries.run as baselines_run

    monkeypatch.setattr(baselines_run, "_load", lambda recipe, contents: _close_only_panel())
    _exits_2(["baselines", str(tmp_path / "run"), "--dataset", "closes", "--steps", "16", *args], message, capsys)
    assert not (tmp_path / "run" / "baselines").exists()


# ------------------------------------------------------------------ a tournament under a named model, end to end

TINY_POOL = """algos = ["ppo", "td3"]
population = 2
[algo_configs.ppo]
num_steps = 16
update_epochs = 1
num_minibatches = 2
hidden_sizes = [8]
[algo_configs.td3]
hidden_sizes = [8]
learning_starts = 32
batch_size = 16
"""


@pytest.fixture
def in_process_cluster(monkeypatch):
    """`trader tournament` on a dask cluster of one worker thread in this process (no worker
    process to start: the orchestrator, the pods and the final backtest are the real ones)."""
    distributed = pytest.importorskip("distributed")
    from tournament import cluster

    def connect_for(config):
        return distributed.Client(
            distributed.LocalCluster(
                n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None, silence_logs=40
            )
        )

    monkeypatch.setattr(cluster, "connect_for", connect_for)


@pytest.mark.slow
def test_a_tournament_and_its_backtest_trade_under_one_named_model(tmp_path: Path, in_process_cluster, capsys) -> None:
    """`trader tournament --costs institutional --cost-set participation=0.05`, then `trader backtest RUN_DIR`:
    every pod trained under the model, both reports name it, charge its terms, and trade every
    strategy under it."""
    from trader.rundir import read_toml

    recipe = write_tiny_recipe(tmp_path)
    (tmp_path / "pool.toml").write_text(TINY_POOL)
    run_dir = tmp_path / "run"
    model = cost_model("institutional").with_overrides({"participation": 0.05})
    code = main(
        [
            "tournament",
            str(run_dir),
            "--dataset",
            str(recipe),
            "--costs",
            "institutional",
            "--cost-set",
            "participation=0.05",
            "--pods",
            "2",
            "--pod-steps",
            "64",
            "--num-envs",
            "2",
            "--config",
            str(tmp_path / "pool.toml"),
        ]
    )
    assert code == 0, capsys.readouterr().err
    expected = {"buy_cost": model.buy_cost, "sell_cost": model.sell_cost, "costs": model.as_dict()["costs"]}
    pods = sorted((run_dir / "pods").iterdir())
    assert len(pods) == 2
    for pod in pods:  # each pod's own record of the rules it trained under
        rules = read_toml(pod / "config.toml")["env"]["env_config"]
        assert {key: rules[key] for key in expected} == expected, pod.name
    tournament_report = json.loads((run_dir / "report.json").read_text())
    capsys.readouterr()
    assert main(["backtest", str(run_dir), "--no-tear-sheet", "--overwrite"]) == 0
    assert "cost model institutional (participation=0.05):" in capsys.readouterr().out
    backtest_report = json.loads((run_dir / "report.json").read_text())
    for report in (tournament_report, backtest_report):
        assert report["cost_model"]["name"] == model.name == "institutional (participation=0.05)"
        assert report["cost_model"]["costs"] == expected["costs"] == report["config"]["policy_env"]["costs"]
        baselines = {"benchmark", "equal_weight", "equal_weight_daily"}
        # the ensemble is a strategy only where members qualified (selection.json lists them); and the yardsticks that fit
        selected = {"best"} | (
            {"ensemble"} if json.loads((run_dir / "selection.json").read_text()).get("member_checkpoints") else set()
        )
        assert set(report["costs"]) - set(YARDSTICKS) == selected | baselines
        assert set(report["breakeven"]) == set(report["costs"])  # both ran the cost multiples
        _charged_under(report, model, run_dir)


@pytest.mark.parametrize("form", ["market", "older"])
def test_a_backtest_of_a_tournament_names_the_model_its_rules_record(
    form: str, tmp_path: Path, toy_data, capsys
) -> None:
    """The fast check of the test above: a tournament's tournament.toml holding a named model's
    rules (as `trader tournament --costs` writes them: the market as one [env] table; or, in a file
    of the older form, a loose env_config) is backtested and reported under that name."""
    from market_envs.env import EnvConfig
    from trader.rundir import config_to_dict, write_toml
    from trader.spec import MarketSpec

    model = cost_model("institutional").with_overrides({"participation": 0.05})
    run_dir = tmp_path / "run"
    rules = model.apply(EnvConfig())
    market = (
        {"env": MarketSpec("toy", rules).to_dict()}
        if form == "market"
        else {"env": "toy", "env_config": config_to_dict(rules)}
    )
    write_toml(run_dir / "tournament.toml", market)
    assert main(["backtest", str(run_dir), "--no-tear-sheet", "--no-breakeven"]) == 0
    assert "cost model institutional (participation=0.05):" in capsys.readouterr().out
    report = json.loads((run_dir / "report.json").read_text())
    assert report["cost_model"]["name"] == model.name and report["cost_model"]["sources"] == model.sources
    assert report["cost_model"]["costs"] == model.as_dict()["costs"] == report["config"]["policy_env"]["costs"]


def _charged_under(report: dict, model, run_dir: Path) -> None:
    """Every strategy paid the model's terms: its commission (at least the minimum per order it
    filled, at most the cap), a half-spread and impact on the stocks (the benchmark, a close-only
    series, pays no spread estimated from high and low nor impact), and no borrow without shorts. The yardsticks are left out."""
    import pandas as pd

    terms = model.costs
    for name, row in report["costs"].items():
        if name in YARDSTICKS:  # long-short books that borrow, and rebalances below the minimum: not checked here
            continue
        assert row["traded_value"] > 0 and row["cost_commission"] > 0, name
        assert row["cost_commission"] <= terms.commission_max_rate * row["traded_value"] + 1e-9, name
        assert row["cost_borrow"] == 0.0, name
        stocks = name != "benchmark"
        assert (row["cost_spread"] > 0 and row["cost_impact"] > 0) == stocks, (name, row)
        series = pd.read_parquet(run_dir / "backtests" / f"{name}.parquet")
        trading = series["traded_value"] > 0
        paid = series.loc[trading, "costs"]
        assert (paid >= terms.commission_min - 1e-9).all(), name  # each bar that traded paid at least one minimum
