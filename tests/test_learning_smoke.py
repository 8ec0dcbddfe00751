"""Smoke versions of the learning check (benchmarks/learning_check.py, issues 4 and 6).

A tiny synthetic market with a strong planted edge whose signal an agent can read
from its observation (momentum over 2 bars: the sign of the last bar's return, which
the ``close`` feature carries), traded in target weights with short selling and no
costs, as in the full check. PPO trains for a few seconds on the first weeks and is
scored by the backtest engine on the weeks after, beside a random policy, the
oracle and equal-weight buy-and-hold. The slow test runs the benchmark script itself
on small recipes.
"""

from __future__ import annotations

import pytest
import torch

from benchmarks import learning_check
from market_envs.data.edge import EdgeSpec
from market_envs.data.synthetic import synthetic
from market_envs.config import EnvConfig
from market_envs.env import StockTradingVecEnv
from trader.agents import get_spec, make_agent, make_config
from trader.backtesting import BacktestConfig, run_backtest

SPEC = EdgeSpec(kind="momentum", strength_sharpe=150.0, count=4, horizon=2, seed=0)
RULES = EnvConfig(
    action_mode="weights", short_selling=True, buy_cost=0.0, sell_cost=0.0, episode_length=64, features=("close",)
)


@pytest.fixture(scope="module")
def market():
    """Five weeks of 6 tickers, 4 with a strong 2-bar momentum edge; train / validation split."""
    data = synthetic(6, start="2023-01-03", end="2023-02-08", seed=1, edge=SPEC, name="smoke-edge")
    data.meta.update(train_end="2023-01-23", val_end="2023-02-01")
    return data


def _train_ppo(train, seed: int):
    torch.manual_seed(seed)
    env = StockTradingVecEnv(train, 32, "cpu", RULES)
    config = make_config(
        "ppo",
        {
            "num_steps": 32,
            "update_epochs": 4,
            "num_minibatches": 4,
            "gamma": 0.5,
            "gae_lambda": 0.5,
            "init_log_std": -1.0,
            "learning_rate": 1e-3,
            "hidden_sizes": (32, 32),
        },
    )
    agent = make_agent("ppo", env.obs_dim, env.act_dim, config, seed=seed)
    runner = get_spec("ppo").runner_cls(agent, env)
    for _ in range(40):  # 40 x 32 x 32 = 41k transitions
        runner.iteration()
    return agent


@pytest.mark.slow
def test_ppo_beats_random_and_equal_weight_on_a_strong_edge(market):
    check = learning_check
    full = market
    train, validation = full.period("train"), full.period("validation")
    agent = _train_ppo(train, seed=0)
    policies = {
        "ppo": agent,
        "random": check.random_policy(full.num_tickers, 1000),
        "oracle": check.validation_oracle(full, validation, SPEC),
    }
    config = BacktestConfig(buy_cost=0.0, sell_cost=0.0, policy_env=RULES, record_positions="day", tear_sheet=False)
    result = run_backtest(validation, policies, baselines=["equal_weight"], config=config)
    ret = result.metrics["cum_returns_final"]
    assert ret["oracle"] > ret["random"]  # the edge is there to find
    assert ret["ppo"] > ret["random"]
    assert ret["ppo"] > ret["equal_weight"]
    assert result.metrics.loc["ppo", "sharpe_ratio"] > 0.25 * result.metrics.loc["oracle", "sharpe_ratio"]


def test_oracle_schedule_holds_the_bars_of_the_period(market):
    """The oracle's schedule: row k is its weights at bar k of the validation period."""
    check = learning_check
    validation = market.period("validation")
    schedule = check.validation_oracle(market, validation, SPEC)
    from market_envs.data.edge import oracle_weights

    offset = int(market.timestamps.get_loc(validation.timestamps[0]))
    assert torch.equal(schedule.actions, oracle_weights(market, SPEC)[offset : offset + validation.num_bars])
    assert schedule.actions.abs().sum(dim=1).max() <= 1.0 + 1e-6  # expressible as weights (gross <= 1)


@pytest.mark.slow
def test_learning_check_script_on_small_recipes(tmp_path, monkeypatch):
    """The benchmark end to end on small recipes: it runs, prints the table and its checks."""
    for name, edge in (("synthetic-edge-minute", True), ("synthetic-minute", False)):
        text = (
            f'name = "{name}"\nsource = "synthetic"\nstart = "2023-01-03"\nend = "2023-03-01"\n'
            'train_end = "2023-02-01"\nval_end = "2023-02-15"\n[synthetic]\nn_tickers = 10\nseed = 0\n'
        )
        if edge:
            text += '[synthetic.edge]\nkind = "momentum"\nstrength_sharpe = 60.0\nhorizon = 2\ncount = 4\n'
        (tmp_path / f"{name}.toml").write_text(text)
    monkeypatch.setenv("PODRACER_RECIPES_PATH", str(tmp_path))
    out = tmp_path / "check.json"
    code = learning_check.main(["--quick", "--seeds", "1", "--out", str(out)])
    assert code in (0, 1)
    import json

    payload = json.loads(out.read_text())
    edge, null = payload["scores"]
    assert edge["oracle_sharpe"] is not None and edge["oracle_sharpe"] > 0
    assert null["oracle_sharpe"] is None
    assert {"ppo-0", "sac-0", "td3-0", "random-0", "equal_weight", "linear_probe", "oracle"} <= set(edge["rows"])
