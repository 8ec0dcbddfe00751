"""The backtest engine, its outputs and `trader backtest`, on small seeded panels."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from golden.case import golden_inputs, golden_report, session_panel

import trader.backtesting.periods as periods
from trader import metrics
from trader.backtesting import ActionSchedule, BacktestConfig, read_series, run_backtest
from trader.backtesting.report import report_dict
from podracer.cli import main
from market_envs import EnvConfig
from trader.errors import CheckpointError, UserError

from test_rundir import assert_every_file_is_documented

GOLDEN = Path(__file__).parent / "golden" / "backtest_report.json"
QUIET = BacktestConfig(tear_sheet=False)


def _cost_free_value(shares: float, cash: float, price: float) -> float:
    return cash + shares * price


def test_buy_and_hold_one_stock_is_its_return_less_costs() -> None:
    data = session_panel(n_tickers=1, n_days=3, bars_per_day=15, seed=4, benchmark=False)
    result = run_backtest(data, baselines=["equal_weight"], config=QUIET)
    close, open_ = data.close[:, 0].double().numpy(), data.open[:, 0].double().numpy()
    # Sized at bar 0's close, filled at bar 1's open, scaled down to the cash and floored.
    wanted = np.floor(1e6 / (close[0] * 1.001))
    shares = min(wanted, np.floor(1e6 / (open_[1] * 1.001)))
    cash = 1e6 - shares * open_[1] * 1.001
    series = result.series["equal_weight"]
    assert series["value"].iloc[-1] == pytest.approx(_cost_free_value(shares, cash, close[-1]), rel=1e-12)
    assert series["costs"].sum() == pytest.approx(shares * open_[1] * 0.001, rel=1e-12)
    # In words: the stock's return from the fill, less the 0.1% buy cost, up to one share of rounding.
    stock_less_costs = close[-1] / open_[1] / 1.001 - 1.0
    assert result.metrics.loc["equal_weight", "cum_returns_final"] == pytest.approx(
        stock_less_costs, abs=close[0] / 1e6
    )


def test_benchmark_runs_as_one_ticker_panel_filled_at_next_close() -> None:
    data = session_panel(n_tickers=2, n_days=3, bars_per_day=15, seed=5)
    result = run_backtest(data, baselines=["benchmark"], config=QUIET)
    bench = data.benchmark.double().numpy()
    shares = min(np.floor(1e6 / (bench[0] * 1.001)), np.floor(1e6 / (bench[1] * 1.001)))
    cash = 1e6 - shares * bench[1] * 1.001
    assert result.series["benchmark"]["value"].iloc[-1] == pytest.approx(cash + shares * bench[-1], rel=1e-12)
    assert list(result.positions["benchmark"].columns) == ["QQQ"]
    assert result.strategies["benchmark"].label == "QQQ buy-and-hold"


def test_equal_weight_buy_and_hold_trades_once() -> None:
    data = session_panel(n_tickers=4, n_days=3, bars_per_day=10, seed=6)
    result = run_backtest(data, baselines=["equal_weight"], config=QUIET)
    traded = result.series["equal_weight"]["traded_value"].to_numpy()
    assert traded[1] > 0.95e6 and np.all(traded[2:] == 0.0) and traded[0] == 0.0
    held = result.positions["equal_weight"].iloc[1:].to_numpy()
    assert (held == held[0]).all() and (held[0] > 0).all()
    # Sized at bar 0's close (the last price known when deciding), floored to whole shares,
    # then scaled down together by the env when the fill costs more than the cash, and
    # floored again: equal to within two shares.
    prices = data.close[0].double().numpy()
    allocation = held[0] * prices
    assert allocation.max() - allocation.min() < 2 * prices.max()


def test_daily_rebalance_trades_only_at_session_opens() -> None:
    data = session_panel(n_tickers=3, n_days=4, bars_per_day=10, seed=7)
    result = run_backtest(data, baselines=["equal_weight_daily"], config=QUIET)
    traded = result.series["equal_weight_daily"]["traded_value"]
    session_opens = [1] + [10 * d for d in range(1, 4)]
    assert list(np.flatnonzero(traded.to_numpy() > 0)) == session_opens
    assert (result.series["equal_weight_daily"]["cash"] >= 0).all()


class SpyPolicy:
    """Records every observation it is shown; trades a fixed pattern."""

    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        self.seen.append(obs.clone())
        return torch.tanh(obs[:, 1 + 3 : 1 + 3 + 3] * 0.0 + 0.5 * torch.sin(torch.arange(3.0) + len(self.seen)))


def _perturbed_after(data, bar: int, seed: int, upto: int | None = None):
    """The same panel with every price and benchmark value after `bar` (up to bar `upto`,
    excluded, when given) scaled at random."""
    rng = np.random.default_rng(seed)
    features = data.features.clone()
    scale = torch.from_numpy(rng.uniform(0.5, 1.5, size=features[bar + 1 : upto, :, :4].shape).astype(np.float32))
    features[bar + 1 : upto, :, :4] *= scale
    bench = data.benchmark.clone()
    bench[bar + 1 : upto] *= torch.from_numpy(
        rng.uniform(0.5, 1.5, size=bench[bar + 1 : upto].shape).astype(np.float32)
    )
    return replace(data, features=features, benchmark=bench)


@pytest.mark.parametrize("bar", [0, 11, 17, 35])  # 11 and 35 close a session: rebalance decisions
def test_decision_at_bar_t_never_uses_a_price_after_t(bar: int, monkeypatch) -> None:
    """Scale every price after `bar` at random: every observation, action (order) and
    record up to `bar` stays the same, for the policy and every baseline."""
    from market_envs.env import StockTradingVecEnv

    actions: list[torch.Tensor] = []
    real_step = StockTradingVecEnv.step

    def recording_step(env, batch):
        actions.append(batch.clone())
        return real_step(env, batch)

    monkeypatch.setattr(StockTradingVecEnv, "step", recording_step)
    data = session_panel(n_tickers=3, n_days=4, bars_per_day=12, seed=8)
    spies = {"original": SpyPolicy(), "perturbed": SpyPolicy()}
    runs, decided = {}, {}
    for key, panel in (("original", data), ("perturbed", _perturbed_after(data, bar, seed=bar + 1))):
        actions.clear()
        runs[key] = run_backtest(panel, {"spy": spies[key]}, config=QUIET)
        decided[key] = list(actions)
    groups = 3  # policy env, baseline env, benchmark env: stepped in turn at every bar
    for k in range((bar + 1) * groups):
        assert torch.equal(decided["original"][k], decided["perturbed"][k]), (
            f"order decided at bar {k // groups} changed"
        )
    assert (
        not runs["original"].series["equal_weight"]["value"].equals(runs["perturbed"].series["equal_weight"]["value"])
    )
    for t in range(bar + 1):
        assert torch.equal(spies["original"].seen[t], spies["perturbed"].seen[t]), f"observation at bar {t} changed"
    for name in runs["original"].series:
        a, b = runs["original"], runs["perturbed"]
        pd.testing.assert_frame_equal(a.series[name].iloc[: bar + 1], b.series[name].iloc[: bar + 1])
        pd.testing.assert_frame_equal(a.positions[name].iloc[: bar + 1], b.positions[name].iloc[: bar + 1])


WARM = BacktestConfig(
    tear_sheet=False, cost_multiples=(), policy_env=EnvConfig(return_windows=(5,), short_selling=True)
)
"""A backtest whose policies observe ret_tstat_5 and may sell short (so any sign is an order)."""


class SignOfTstat(SpyPolicy):
    """Records what it is shown; orders +1 (buy) or -1 (sell) per stock by the sign of its
    ret_tstat_5 (the last observed feature), nothing where it is 0."""

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        self.seen.append(obs.clone())
        n = 3
        return torch.sign(obs[:, 1 + n :].reshape(obs.shape[0], n, -1)[:, :, -1])


def _whole_panel_features(data, period: str) -> tuple[torch.Tensor, int]:
    """The whole panel's observed features under `period`'s statistics [T, N x F], and the bar where
    `period` starts."""
    from market_envs.env import StockTradingVecEnv

    part = data.period(period)
    whole = data.with_normalization(part.feature_mean, part.feature_std)
    table = StockTradingVecEnv(whole, 1, "cpu", WARM.env_config(WARM.policy_env)).tables.obs
    return table[:, 1 + data.num_tickers :], int(data.timestamps.get_loc(part.start))


def test_the_test_period_observes_its_first_bar_and_trades_on_it() -> None:
    """Known answer: the backtest of the test period shows the policy at its first bar the whole
    panel's features at that bar (ret_tstat_5 read across the boundary), so a policy that trades on
    the sign of the t-statistic trades at once: its first order is decided at the period's first
    bar and filled at the second (before the warm-up, it sat idle for 5 bars)."""
    data = session_panel(n_tickers=3, n_days=8, bars_per_day=10, seed=12)
    policy = SignOfTstat()
    result = run_backtest(data, {"signs": policy}, baselines=[], period="test", config=WARM)
    features, k = _whole_panel_features(data, "test")
    assert k == 60
    for t in range(3):
        assert torch.equal(policy.seen[t][0, 1 + 3 :], features[k + t]), f"bar {t}"
    assert (policy.seen[0][0, 1 + 3 :].reshape(3, -1)[:, -1] != 0).all()
    traded = result.series["signs"]["traded_value"].to_numpy()
    assert int(np.flatnonzero(traded > 0)[0]) == 1


def test_the_test_period_reads_bars_before_it_but_none_after_t() -> None:
    """Across the boundary: scaling the prices of a bar just before the test period changes its
    first observation; scaling every price after bar t of the period changes nothing up to t."""
    data = session_panel(n_tickers=3, n_days=8, bars_per_day=10, seed=13)
    k, t = 60, 4
    runs = {}
    for key, panel in (
        ("original", data),
        ("before", _perturbed_after(data, k - 3, seed=1, upto=k - 1)),  # bar k - 2 alone
        ("after", _perturbed_after(data, k + t, seed=2)),
    ):
        runs[key] = SignOfTstat()
        run_backtest(panel, {"signs": runs[key]}, baselines=[], period="test", config=WARM)
    seen = {key: torch.cat(policy.seen[: t + 1]) for key, policy in runs.items()}
    assert torch.equal(seen["original"], seen["after"])
    assert not torch.equal(seen["original"][0, 1 + 3 :], seen["before"][0, 1 + 3 :])


def test_metrics_table_is_trader_metrics_summary_sorted_by_sharpe() -> None:
    data = session_panel(n_tickers=3, n_days=5, bars_per_day=10, seed=9)
    result = run_backtest(data, {"spy": SpyPolicy()}, config=QUIET)
    names = list(result.series)
    returns = pd.DataFrame({n: result.series[n]["return"] for n in names})
    expected = metrics.summary(
        returns,
        timestamps=data.timestamps,
        traded_value=pd.DataFrame({n: result.series[n]["traded_value"] for n in names}),
        portfolio_value=pd.DataFrame({n: result.series[n]["value"] for n in names}),
    )
    pd.testing.assert_frame_equal(result.metrics, expected.loc[list(result.metrics.index)])
    sharpe = result.metrics["sharpe_ratio"].to_numpy()
    assert np.all(np.diff(sharpe) <= 0)
    assert set(result.metrics.index) == {"spy", "benchmark", "equal_weight", "equal_weight_daily"}
    assert (result.metrics["days"] == 5).all()
    for name, frame in result.series.items():
        value = frame["value"].to_numpy()
        np.testing.assert_allclose(frame["return"].to_numpy()[1:], value[1:] / value[:-1] - 1.0, rtol=1e-12)


def test_outputs_written_to_run_dir(tmp_path: Path) -> None:
    data = session_panel(n_tickers=3, n_days=4, bars_per_day=10, seed=10)
    result = run_backtest(data, {"spy": SpyPolicy()}, config=BacktestConfig(record_positions="day"), run_dir=tmp_path)
    for name in result.series:
        frame, positions = read_series(tmp_path / "backtests" / f"{name}.parquet")
        assert list(frame.columns) == ["value", "return", "cash", "gross_value", "turnover", "traded_value", "costs"]
        pd.testing.assert_frame_equal(frame, result.series[name], check_freq=False)
        assert len(positions) == 4  # one row per session close
        np.testing.assert_array_equal(positions.to_numpy(), result.positions[name].to_numpy())
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["order"] == list(result.metrics.index) and report["best"] == result.best
    assert report["period"]["days"] == 4 and report["config"]["buy_cost"] == 0.001
    markdown = (tmp_path / "report.md").read_text()
    metrics_table = markdown.split("## Is the edge real?")[0]
    rows = [line for line in metrics_table.splitlines() if line.startswith("| ") and "Strategy" not in line]
    assert [r.split(" | ")[0][2:] for r in rows] == [result.strategies[n].label for n in result.metrics.index]
    # four days are too few for any statistic: every strategy says why, in the JSON and the table
    assert set(report["evidence"]) == set(result.metrics.index) and report["selection"] is None
    assert all(e["psr"] is None and "only 4 daily returns" in e["reasons"]["psr"] for e in report["evidence"].values())
    assert "no evidence: only 4 daily returns (at least 30 are needed)" in markdown
    assert "toy" in markdown and "0.10% per buy" in markdown and "Period: all" in markdown
    # One tear sheet per agent (here the policy "spy"), none for the yardsticks, even
    # when one of them has the best Sharpe.
    assert sorted(p.name for p in tmp_path.glob("tearsheet_*.png")) == ["tearsheet_spy.png"]
    png = tmp_path / "tearsheet_spy.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert report["files"]["tear_sheet:spy"] == "tearsheet_spy.png"
    assert_every_file_is_documented(tmp_path)  # the tear sheet too (the dashboard's fixtures draw none)


def test_checkpoint_policy_and_dimension_check(tmp_path: Path) -> None:
    from trader.agents import make_agent
    from trader.agents.checkpoint import save_checkpoint

    data = session_panel(n_tickers=3, n_days=4, bars_per_day=10, seed=11)
    obs_dim = 1 + 3 * (1 + len(data.feature_names))
    save_checkpoint(make_agent("ppo", obs_dim, 3, seed=0), tmp_path / "run" / "checkpoints" / "best")
    result = run_backtest(data, {"best": tmp_path / "run" / "checkpoints" / "best"}, config=QUIET)
    assert result.strategies["best"].kind == "policy" and result.strategies["best"].label == "PPO best"
    save_checkpoint(make_agent("ppo", 1 + 2 * 14, 2, seed=0), tmp_path / "other" / "checkpoints" / "small")
    with pytest.raises(CheckpointError, match="trades 2 tickers .* the data has 3 tickers"):
        run_backtest(data, {"small": tmp_path / "other" / "checkpoints" / "small"}, config=QUIET)
    with pytest.raises(CheckpointError, match="not found"):
        run_backtest(data, {"gone": tmp_path / "nowhere"}, config=QUIET)


def test_bad_requests_raise_user_errors() -> None:
    data = session_panel(n_tickers=2, n_days=4, bars_per_day=10, seed=12, benchmark=False)
    with pytest.raises(UserError, match="no benchmark"):
        run_backtest(data, baselines=["benchmark"], config=QUIET)
    with pytest.raises(UserError, match="unknown baseline"):
        run_backtest(data, baselines=["carry"], config=QUIET)
    with pytest.raises(UserError, match="taken by a baseline"):
        run_backtest(data, {"equal_weight": SpyPolicy()}, config=QUIET)
    with pytest.raises(UserError, match="outside the data"):
        run_backtest(data, period="2023-01-01:2024-03-05", config=QUIET)
    with pytest.raises(UserError, match="returned actions of shape"):
        run_backtest(data, {"bad": lambda obs: torch.zeros(obs.shape[0], 5)}, config=QUIET)
    assert set(run_backtest(data, config=QUIET).series) == {"equal_weight", "equal_weight_daily"}


def test_period_selection_by_name_and_dates() -> None:
    data = session_panel(n_tickers=2, n_days=8, bars_per_day=5, seed=13)
    test = run_backtest(data, period="test", baselines=["equal_weight"], config=QUIET)
    assert test.period.days == 2 and test.period.name == "test"
    span = run_backtest(data, period="2024-03-05:2024-03-06", baselines=["equal_weight"], config=QUIET)
    assert span.period.days == 2 and span.period.bars == 10
    assert str(span.period.start.date()) == "2024-03-05" and str(span.period.end.date()) == "2024-03-06"


def test_golden_report() -> None:
    """Fixed seed, fixed synthetic data, fixed policies: the report equals the pinned one.

    Regenerate with `tools/regen_golden_report.py` after a deliberate change.
    """
    data, policies = golden_inputs()
    result = run_backtest(data, policies, period="test", config=QUIET)
    actual = json.loads(json.dumps(golden_report(report_dict(result))))
    expected = json.loads(GOLDEN.read_text())
    metrics_actual, metrics_expected = actual.pop("metrics"), expected.pop("metrics")
    assert actual == expected
    assert metrics_actual.keys() == metrics_expected.keys()
    for name, row in metrics_expected.items():
        for key, value in row.items():
            got = metrics_actual[name][key]
            assert (got is None and value is None) or got == pytest.approx(value, rel=1e-7, abs=1e-12), (name, key)


# --------------------------------------------------------------------- CLI, in-process


@pytest.fixture
def cli_data(monkeypatch):
    """`trader backtest` loads the toy panel for the recipe name 'toy'."""
    data = session_panel(n_tickers=3, n_days=8, bars_per_day=10, seed=14)

    def load(recipe: str):
        if recipe != "toy":
            raise UserError(f"unknown data set recipe {recipe!r}")
        return data

    monkeypatch.setattr(periods, "load_dataset", load)
    return data


def test_cli_writes_report_and_prints_table(tmp_path: Path, cli_data, capsys) -> None:
    run_dir = tmp_path / "run"
    code = main(["backtest", str(run_dir), "--dataset", "toy", "--no-tear-sheet"])
    out = capsys.readouterr().out
    assert code == 0
    assert "Equal-weight buy-and-hold" in out and "Sharpe ratio" in out and "Period: test" in out
    assert (run_dir / "report.md").is_file() and (run_dir / "report.json").is_file()
    assert sorted(p.name for p in (run_dir / "backtests").glob("*.parquet")) == [
        "benchmark.parquet",
        "equal_weight.parquet",
        "equal_weight_daily.parquet",
        "reversal.parquet",  # the one yardstick whose window (30 bars) fits the toy's bars
    ]
    assert sorted(p.name for p in (run_dir / "backtests" / "trades").iterdir()) == [  # each one's fills
        "benchmark.parquet",
        "equal_weight.parquet",
        "equal_weight_daily.parquet",
        "reversal.parquet",
    ]


def test_cli_json_output_with_checkpoint_and_config_dataset(tmp_path: Path, cli_data, capsys) -> None:
    from trader.agents import make_agent
    from trader.agents.checkpoint import save_checkpoint

    run_dir = tmp_path / "run"
    save_checkpoint(make_agent("ppo", 1 + 3 * 14, 3, seed=1), run_dir / "checkpoints" / "best")
    (run_dir / "config.toml").write_text('[env]\ndataset = "toy"\n')
    code = main(
        [
            "backtest",
            str(run_dir),
            "--strategies",
            "best,equal_weight",
            "--output",
            "json",
            "--period",
            "2024-03-06:2024-03-08",
            "--no-tear-sheet",
        ]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["order"]) == {"best", "equal_weight"}
    assert report["period"]["name"] == "2024-03-06:2024-03-08" and report["period"]["days"] == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategies", "missing"], "strategy 'missing' not found"),
        (["--period", "2020-01-01:2020-02-01"], "outside the data"),
        (["--period", "yesterday"], "period must be test, validation"),
        (["--output", "yaml"], "--output must be table or json"),
        (["--dataset", "nope"], "unknown data set recipe 'nope'"),
    ],
)
def test_cli_bad_input_exits_2_with_message(tmp_path: Path, cli_data, capsys, args, message) -> None:
    base = ["backtest", str(tmp_path / "run"), "--no-tear-sheet"]
    if "--dataset" not in args:
        base += ["--dataset", "toy"]
    assert main(base + args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err


def test_cli_checkpoint_with_other_tickers_exits_2(tmp_path: Path, cli_data, capsys) -> None:
    from trader.agents import make_agent
    from trader.agents.checkpoint import save_checkpoint

    run_dir = tmp_path / "run"
    save_checkpoint(
        make_agent("ppo", 1 + 5 * 14, 5, seed=0),
        run_dir / "checkpoints" / "wide",
        data_window={"tickers": ["A", "B", "C", "D", "E"]},
    )
    assert main(["backtest", str(run_dir), "--dataset", "toy", "--no-tear-sheet"]) == 2
    err = capsys.readouterr().err
    assert "do not match" in err and "checkpoint 'wide'" in err
    assert not (run_dir / "report.json").exists()


def test_cli_without_dataset_explains(tmp_path: Path, cli_data, capsys) -> None:
    assert main(["backtest", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "no such run directory" in err and "give --dataset RECIPE" in err and len(err.splitlines()) == 1
    (tmp_path / "run").mkdir()
    assert main(["backtest", str(tmp_path / "run")]) == 2
    assert "pass --dataset" in capsys.readouterr().err


def test_policy_population_equals_policies_called_one_by_one() -> None:
    from trader.backtesting import PolicyPopulation

    data = session_panel(n_tickers=3, n_days=3, bars_per_day=10, seed=15)
    obs_dim = 1 + 3 * (1 + len(data.feature_names))
    nets = {}
    for k in range(3):
        torch.manual_seed(k)
        nets[f"net{k}"] = torch.nn.Sequential(
            torch.nn.Linear(obs_dim, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3), torch.nn.Tanh()
        )
    one_by_one = run_backtest(data, nets, baselines=[], config=QUIET)
    together = run_backtest(data, {"pop": PolicyPopulation.from_modules(nets)}, baselines=[], config=QUIET)
    assert list(together.series) == list(nets)
    for name in nets:
        pd.testing.assert_frame_equal(one_by_one.series[name], together.series[name], rtol=1e-6)
    with pytest.raises(UserError, match="unique"):
        run_backtest(
            data, {"net0": nets["net0"], "pop": PolicyPopulation.from_modules(nets)}, baselines=[], config=QUIET
        )


def test_action_schedule_row_t_is_the_decision_at_bar_t() -> None:
    """A schedule that buys stock 1 at bar 5 only: the order fills at bar 6, nothing else trades."""
    from trader.backtesting import ActionSchedule

    data = session_panel(n_tickers=3, n_days=2, bars_per_day=10, seed=2, benchmark=False)
    actions = torch.zeros(data.num_bars, 3)
    actions[5, 1] = 1.0  # shares mode: buy max_shares of stock 1
    result = run_backtest(data, {"plan": ActionSchedule(actions)}, baselines=[], config=QUIET)
    traded = result.series["plan"]["traded_value"].to_numpy()
    assert np.flatnonzero(traded).tolist() == [6]
    held = result.positions["plan"].to_numpy()
    assert (held[:6] == 0).all() and held[6:, 1].min() > 0 and (held[:, [0, 2]] == 0).all()


def test_gross_value_is_the_positions_at_the_close_longs_and_shorts_alike() -> None:
    """``gross_value`` = sum |shares| x close at every bar: value - cash for a long-only book,
    and about the whole value for a dollar-neutral book of weights +-0.25, whose net (value - cash) is about 0."""
    from market_envs.config import EnvConfig

    data = session_panel(n_tickers=4, n_days=2, bars_per_day=10, seed=8, benchmark=False)
    actions = torch.tensor([[0.25, 0.25, -0.25, -0.25]]).expand(data.num_bars, 4)
    rules = EnvConfig(action_mode="weights", short_selling=True, features=("close",))
    config = replace(QUIET, buy_cost=0.0, sell_cost=0.0, policy_env=rules)
    result = run_backtest(data, {"neutral": ActionSchedule(actions)}, baselines=["equal_weight"], config=config)
    close = data.close.double().numpy()
    for name in ("neutral", "equal_weight"):
        frame, held = result.series[name], result.positions[name].to_numpy()
        np.testing.assert_allclose(frame["gross_value"].to_numpy(), (np.abs(held) * close).sum(1), rtol=1e-12)
    long_only = result.series["equal_weight"]
    np.testing.assert_allclose(long_only["gross_value"], long_only["value"] - long_only["cash"], rtol=1e-9)
    neutral = result.series["neutral"].iloc[1:]
    assert (neutral["gross_value"] / neutral["value"]).to_numpy() == pytest.approx(1.0, abs=0.01)
    assert np.abs((neutral["value"] - neutral["cash"]) / neutral["value"]).max() < 0.01


def test_action_schedule_of_the_wrong_length_is_refused() -> None:
    from trader.backtesting import ActionSchedule

    data = session_panel(n_tickers=3, n_days=2, bars_per_day=10, seed=2, benchmark=False)
    with pytest.raises(UserError, match=r"action schedule has shape \(5, 3\).*\(20, 3\)"):
        run_backtest(data, {"plan": ActionSchedule(torch.zeros(5, 3))}, baselines=[], config=QUIET)


def test_the_oracle_baseline_trades_the_planted_rule_and_needs_an_edge() -> None:
    """The "oracle" row is the rule's weights as an action schedule in weights mode with
    short selling, computed on the whole panel and cut to the period."""
    from market_envs.data import EdgeSpec, oracle_weights, synthetic
    from market_envs.config import EnvConfig

    spec = EdgeSpec(kind="mean_reversion", strength_sharpe=50.0, fraction=1.0)
    data = synthetic(
        6, "2023-01-03", "2023-01-20", seed=3, edge=spec, interval="5min"
    )  # bar by bar: 936 bars, not 4,680
    part = "2023-01-10:2023-01-19"
    free = replace(QUIET, buy_cost=0.0, sell_cost=0.0)  # the rule's edge is stated before costs
    result = run_backtest(data, period=part, config=free)
    yardsticks = {"momentum", "momentum_long", "reversal"}  # inverse volatility's 1950 bars do not fit
    assert (
        set(result.series) == {"benchmark", "equal_weight", "equal_weight_daily", "oracle", "oracle_costs"} | yardsticks
    )
    panel = result.series["oracle"].index
    offset = int(data.timestamps.get_loc(panel[0]))
    rules = EnvConfig(action_mode="weights", short_selling=True, features=("close",))
    schedule = ActionSchedule(oracle_weights(data, spec)[offset : offset + len(panel)])
    direct = run_backtest(data, {"rule": schedule}, baselines=[], period=part, config=replace(free, policy_env=rules))
    np.testing.assert_allclose(result.series["oracle"]["value"], direct.series["rule"]["value"], rtol=1e-12)
    assert result.metrics.loc["oracle", "sharpe_ratio"] > 0
    plain = session_panel(n_tickers=2, n_days=4, bars_per_day=10, seed=12, benchmark=False)
    with pytest.raises(UserError, match="no planted edge"):
        run_backtest(plain, baselines=["oracle"], config=QUIET)


@pytest.mark.slow
def test_the_oracle_under_costs_trades_the_rule_through_the_rate_or_band_best_on_the_training_period() -> None:
    """ "oracle_costs": the rule's weights as the aim, through the candidate rate or band whose net Sharpe
    on the training period is the highest; every candidate is the rule traded alone through it."""
    from market_envs.data import EdgeSpec, synthetic
    from trader.backtesting.groups import ORACLE_BANDS, ORACLE_RATES, oracle_rules, oracle_schedule, oracle_under_costs

    spec = EdgeSpec(kind="mean_reversion", strength_sharpe=40.0, fraction=1.0, horizon=60)
    data = synthetic(6, "2023-01-03", "2023-02-10", seed=4, edge=spec)
    data.meta.update(train_end="2023-01-25", val_end="2023-02-03")
    config = replace(QUIET, buy_cost=0.0005, sell_cost=0.0005)
    slow = oracle_under_costs(data, config, torch.device("cpu"))
    train = data.period("train")
    schedule = ActionSchedule(oracle_schedule(data, train).actions)
    sharpes = {}
    for rate, band in [(r, 0.0) for r in ORACLE_RATES] + [(1.0, b / 6) for b in ORACLE_BANDS]:
        rules = oracle_rules(rate, band)
        alone = run_backtest(train, {"rule": schedule}, baselines=[], config=replace(config, policy_env=rules))
        sharpes[(rate, band)] = alone.metrics.loc["rule", "sharpe_ratio"]
    best = max(sharpes, key=sharpes.get)
    assert (slow.rules.trade_rate, slow.rules.no_trade_band) == pytest.approx(best)
    assert slow.sharpe == pytest.approx(sharpes[best], rel=1e-6)  # the fit multiplies by a rate of 1.0: rounding
    assert slow.sharpe >= sharpes[(1.0, 0.0)]  # the cost-blind rule is one candidate
    result = run_backtest(data, period="test", config=config)
    assert result.strategies["oracle_costs"].label.startswith("Oracle under costs (")
    assert "training period" in result.strategies["oracle_costs"].source


@pytest.mark.parametrize("rows", [[0, 1, 2, 3, 4], [3, 0, 4]])
def test_a_groups_series_are_each_strategys_columns_bit_for_bit(rows):
    """The assembly's block of series (records read once, transposed) holds what each strategy's own
    columns give: the records, `metrics.turnover`, the simple returns from its start and numpy's sums,
    bit for bit, for members in any row order and through a book worth nothing or NaN."""
    from trader.backtesting import assembly, simulation

    rng = np.random.default_rng(7)
    host = {key: rng.normal(size=(50, 5)) for key in simulation.RECORDED}
    host["value"] = rng.uniform(0.5, 2.0, size=(50, 5)) * 1e6
    host["value"][10, 0], host["value"][20, 4], host["value"][30, 3] = 0.0, np.nan, -5.0
    starts = [1e6, 2e6, 0.0][: len(rows)] + [1e6] * (len(rows) - 3)
    block, totals = assembly._group_series(host, starts, rows)
    for k, (r, start) in enumerate(zip(rows, starts, strict=True)):
        value, traded = host["value"][:, r], host["traded"][:, r]
        previous = np.concatenate([[start], value[:-1]])
        expected = {
            "value": value,
            "return": np.where(previous > 0, value / previous - 1.0, 0.0),
            "cash": host["cash"][:, r],
            "gross_value": host["gross_value"][:, r],
            "turnover": metrics.turnover(traded, previous),
            "traded_value": traded,
            "costs": host["costs"][:, r],
        }
        got = dict(zip(assembly.SERIES_COLUMNS, block[k].numpy(), strict=True))
        for name, column in expected.items():
            np.testing.assert_array_equal(got[name], column, err_msg=name, strict=True)
        for key in simulation.TOTALLED:
            assert totals[key][k] == host[key][:, r].sum(), key
