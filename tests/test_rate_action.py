"""A trade rate the policy chooses (`EnvConfig.rate_action`): the action is [aims | rates], 2N.

Known answers (rate action -1: the book never moves and pays nothing; +1: today's fills
exactly; between: ((1 + r) / 2)^2 of the way, per stock), the reference env step by step with
every cost term, the compiled step, the invariants, the refusals, and the agents that read
2N actions (the per-stock network's two outputs per stock, the flat MLP, SAC's twin critics).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from market_fixtures import random_panel
from test_env import EVERY_COST, assert_compiled_steps_equal_eager, every_cost_rules, run_against_reference

from market_envs import EnvConfig, StockTradingVecEnv, target_holdings
from market_envs.costs import CostModel
from market_envs.kernel import aim_weights, policy_rates
from trader.errors import ConfigError

PANEL = random_panel(n_tickers=4, n_bars=90, seed=7, gap_prob=0.0)
FREE = dict(action_mode="weights", short_selling=True, buy_cost=0.0, sell_cost=0.0, random_start=False)
RATED = dict(FREE, rate_action=True)


def _start(config: EnvConfig, weights: list[float], envs: int = 1) -> StockTradingVecEnv:
    """An env at bar 0 holding `weights` of 1e6 at bar 0's close in each of `envs` rows."""
    env = StockTradingVecEnv(PANEL, envs, "cpu", config)
    close = PANEL.close[0].double()
    holdings = (torch.tensor([weights], dtype=torch.float64) * 1e6 / close).expand(envs, -1).clone()
    cash = torch.full((envs,), 1e6) - (holdings * close).sum(-1)
    env.reset(options={"cash": cash, "holdings": holdings})
    return env


def test_the_action_has_two_blocks_of_n():
    env = StockTradingVecEnv(PANEL, 3, "cpu", EnvConfig(**RATED))
    assert (env.act_dim, env.actions_per_stock) == (8, 2)
    assert env.single_action_space.shape == (8,) and env.action_space.shape == (3, 8)
    assert StockTradingVecEnv(PANEL, 3, "cpu", EnvConfig(**FREE)).act_dim == 4
    with pytest.raises(Exception, match="actions must have shape \\(3, 8\\)"):
        env.reset()
        env.step(torch.zeros(3, 4))


def test_the_rate_map_reaches_both_ends_exactly():
    r = torch.tensor([-1.0, -0.5, 0.0, 0.5, 1.0], dtype=torch.float64)
    torch.testing.assert_close(policy_rates(r), torch.tensor([0.0, 0.0625, 0.25, 0.5625, 1.0], dtype=torch.float64))


def test_odd_rate_actions_read_as_the_plain_rules_clean_them():
    """NaN, +-inf, values outside [-1, 1], rate actions just above -1 and ones too small for 1 + r,
    in both blocks: each stock moves `policy_rates` of its cleaned rate action of today's order."""
    config = EnvConfig(**RATED, weights_map="linear", market_neutral=True)
    odd = [float("nan"), float("inf"), -float("inf"), -1.0, 1.0, 0.0, -0.0, 1e-30, -1e-30, 1.5, -2.0]
    g = torch.Generator().manual_seed(11)
    half = torch.cat([torch.rand(8, 20, generator=g) * 3 - 1.5, torch.rand(8, 20, generator=g) * 1e-6 - 1.0], -1)
    half = torch.cat([half, torch.tensor(odd).repeat(8, 1)], -1)
    actions = torch.cat([half, half.flip(-1)], -1)  # the odd values in both blocks
    n = half.shape[-1]
    holdings = torch.rand(8, n, generator=g, dtype=torch.float64) * 200 - 100
    price, cash = torch.rand(n, generator=g, dtype=torch.float64) * 50 + 10, torch.full((8,), 1e5)
    rates = actions[:, n:].double().clamp(-1.0, 1.0)
    kappa = policy_rates(torch.where(rates.isnan(), torch.zeros_like(rates), rates))
    plain = target_holdings(actions[:, :n], holdings, price, cash, replace(config, rate_action=False))
    rated = target_holdings(actions, holdings, price, cash, config)
    torch.testing.assert_close(rated - holdings, (plain - holdings) * kappa, rtol=1e-12, atol=1e-12)


def test_rate_action_minus_one_never_trades_and_pays_nothing():
    config = EnvConfig(**{**RATED, "buy_cost": 0.001}, costs=EVERY_COST)
    env = _start(config, [0.3, -0.2, 0.1, 0.0])
    held = env.holdings.clone()
    for aims in torch.rand(20, 1, 4, generator=torch.Generator().manual_seed(0)) * 2 - 1:
        _, _, _, _, info = env.step(torch.cat([aims, -torch.ones(1, 4)], dim=-1))
        assert torch.equal(info["holdings"], held)
        assert info["turnover"].item() == 0.0
        assert (info["costs"] - info["cost_borrow"]).item() == 0.0


@pytest.mark.parametrize("costs", [CostModel(), EVERY_COST], ids=["flat", "every-cost"])
@pytest.mark.parametrize(
    "mapping", [dict(), dict(weights_map="linear", linear_scale=5.0)], ids=["normalized", "linear"]
)
def test_rate_action_plus_one_is_exactly_the_fixed_rules_fills(costs, mapping):
    """Rate +1 in every stock: every entry of every step equals the same env without the rate
    action (rate 1), bit for bit, through the cash limit, the cap and every cost term."""
    base = EnvConfig(**{**FREE, "buy_cost": 0.001, "sell_cost": 0.002}, costs=costs, initial_cash=30_000.0, **mapping)
    plain = StockTradingVecEnv(PANEL, 3, "cpu", base)
    rated = StockTradingVecEnv(PANEL, 3, "cpu", replace(base, rate_action=True))
    plain.reset(seed=4)
    rated.reset(seed=4)
    for aims in torch.rand(15, 3, 4, generator=torch.Generator().manual_seed(3)) * 2 - 1:
        one = plain.step(aims)
        two = rated.step(torch.cat([aims, torch.ones(3, 4)], dim=-1))
        assert torch.equal(one[1], two[1])
        for key in ("holdings", "cash", "value", "costs", "turnover", "unfilled_value"):
            assert torch.equal(one[4][key], two[4][key]), key


def test_each_stock_moves_its_own_share_of_the_way():
    """No costs, cash enough: stock i's weight at the fill moves ((1 + r_i) / 2)^2 of its gap to its aim."""
    config = EnvConfig(**RATED, weights_map="linear")
    env = _start(config, [0.1, -0.1, 0.05, -0.05])
    price = PANEL.open[1].double()
    held = env.holdings[0] * price
    value = env.cash[0] + held.sum()
    aims = torch.tensor([[0.8, -0.6, -0.2, 0.4]])
    rates = torch.tensor([[-1.0, -0.4, 0.3, 1.0]])
    _, _, _, _, info = env.step(torch.cat([aims, rates], dim=-1))
    aim = aim_weights(aims, replace(config, rate_action=False))[0] * value
    kappa = ((1 + rates[0].double()) / 2) ** 2
    torch.testing.assert_close(info["holdings"][0] * price, held + kappa * (aim - held), rtol=1e-12, atol=1e-6)
    assert kappa[0] == 0 and kappa[3] == 1


def test_a_band_applies_before_the_policys_rate():
    """A per-stock band b: the gap beyond +-b, times the stock's rate."""
    config = EnvConfig(**RATED, weights_map="linear", no_trade_band=0.02)
    env = _start(config, [0.0, 0.0, 0.0, 0.0])
    price = PANEL.open[1].double()
    aims = torch.tensor([[0.5, -0.5, 0.01, 0.0]])  # linear aims 2 x 0.5 / 4 = 0.25, -0.25, 0.005, 0
    rates = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    _, _, _, _, info = env.step(torch.cat([aims, rates], dim=-1))
    weights = info["holdings"][0] * price / 1e6
    torch.testing.assert_close(
        weights, torch.tensor([0.0575, -0.0575, 0.0, 0.0], dtype=torch.float64), atol=1e-9, rtol=0
    )


def test_target_holdings_and_requested_orders_read_both_blocks():
    config = EnvConfig(**RATED, weights_map="linear", market_neutral=True)
    env = _start(config, [0.1, -0.1, 0.05, -0.05])
    a = torch.tensor([[0.3, -0.9, 0.4, 0.1, -0.5, 0.2, 1.0, -1.0]])
    price = PANEL.close[0]
    sells, buys = env.requested_orders(a, price)
    target = target_holdings(a, env.holdings, price, env.cash, config)
    torch.testing.assert_close(env.holdings - sells + buys, target, rtol=1e-12, atol=1e-9)
    assert target[0, 3] == env.holdings[0, 3]  # rate action -1: stock 3 stays
    with pytest.raises(Exception, match="take 8 actions"):
        target_holdings(a[:, :4], env.holdings, price, env.cash, config)
    held, cash = env.holdings.clone(), env.cash.clone()
    expected = target_holdings(a, held, PANEL.open[1], cash, config)
    torch.testing.assert_close(env.step(a)[4]["holdings"], expected, rtol=1e-12, atol=1e-9)


# ------------------------------------------------------------------ the reference env, the compiled step


@pytest.mark.parametrize("short_selling", [False, True])
@pytest.mark.parametrize(
    "aim",
    [
        dict(weights_map="linear"),
        dict(),
        dict(weights_map="linear", no_trade_band=0.01),
        dict(no_trade_band=0.05, band_scope="book"),
        dict(weights_map="linear", linear_scale=7.0, reward="aim"),
    ],
    ids=["linear", "normalized", "linear-band", "book-band", "aim-reward"],
)
def test_equals_reference_with_every_cost_term_and_the_rate_action(aim, short_selling):
    config = every_cost_rules(
        action_mode="weights", short_selling=short_selling, market_neutral=short_selling, rate_action=True, **aim
    )
    run_against_reference(random_panel(n_tickers=4, n_bars=90, seed=7, gap_prob=0.05), 4, config, steps=40, seed=13)


def test_compiled_step_equals_eager_with_the_rate_action_and_every_cost_term():
    config = EnvConfig(
        action_mode="weights",
        short_selling=True,
        market_neutral=True,
        weights_map="linear",
        no_trade_band=0.02,
        rate_action=True,
        costs=EVERY_COST,
        initial_cash=30_000.0,
        episode_length=6,
    )
    actions = torch.rand(12, 3, 8, generator=torch.Generator().manual_seed(5)) * 2 - 1
    assert_compiled_steps_equal_eager(PANEL, config, actions)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_book_moves_between_its_weights_and_its_aim(seed):
    config = EnvConfig(
        action_mode="weights",
        short_selling=bool(seed % 2),
        weights_map="linear",
        rate_action=True,
        buy_cost=0.001,
        sell_cost=0.001,
        costs=EVERY_COST,
        initial_cash=50_000.0,
        episode_length=10,
    )
    env = StockTradingVecEnv(PANEL, 5, "cpu", config)
    env.reset(seed=seed)
    close, open_ = PANEL.close.double(), PANEL.open.double()
    for a in torch.rand(15, 5, 8, generator=torch.Generator().manual_seed(seed)) * 2 - 1:
        held, cash, t = env.holdings.clone(), env.cash.clone(), env.t.clone()
        full = torch.cat([a[:, :4], torch.ones(5, 4)], dim=-1)
        aim = target_holdings(full, held, open_[t + 1], cash, config)
        _, _, _, _, info = env.step(a)
        after = info["holdings"]
        low, high = torch.minimum(held, aim), torch.maximum(held, aim)
        assert (after >= low - 1e-9 * low.abs() - 1e-12).all() and (after <= high + 1e-9 * high.abs() + 1e-12).all()
        torch.testing.assert_close(
            info["value"], info["cash"] + (after * close[info["t"]]).sum(-1), rtol=1e-12, atol=1e-9
        )


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        (dict(rate_action=True), "rate_action .* needs action_mode='weights'"),
        (dict(action_mode="weights", rate_action=True, trade_rate=0.5), "trade_rate must stay 1"),
        (dict(action_mode="weights", rate_action="yes"), "rate_action must be true or false"),
    ],
)
def test_bad_rate_action_rules_are_refused_with_one_clear_line(values, fragment):
    with pytest.raises(ConfigError, match=fragment) as caught:
        EnvConfig(**values)
    assert "\n" not in str(caught.value)


def test_the_field_round_trips_through_the_config_codec():
    from trader.rundir import config_from_dict, config_to_dict

    config = EnvConfig(**RATED, weights_map="linear")
    assert config_from_dict(EnvConfig, config_to_dict(config)) == config


# ------------------------------------------------------------------ agents with 2N actions


# One case per actor and critic head that reads the layout: PPO's own (both networks), and the
# off-policy module's (trader/agents/offpolicy.py, shared by SAC and TD3) per-stock head with two
# outputs per action (SAC) and flat head with one (TD3). The other two pairs build those same heads
# (slow: run with -m slow).
OFF_POLICY_TWINS = pytest.mark.slow(reason="the same off-policy heads as sac-per_stock and td3-mlp")


@pytest.mark.parametrize(
    ("algo", "network"),
    [
        ("ppo", "per_stock"),
        ("ppo", "mlp"),
        ("sac", "per_stock"),
        ("td3", "mlp"),
        pytest.param("sac", "mlp", marks=OFF_POLICY_TWINS),
        pytest.param("td3", "per_stock", marks=OFF_POLICY_TWINS),
    ],
)
def test_agents_train_and_act_on_the_rate_action(tmp_path, algo, network):
    """`trader.train` gives the agent the env's layout (two actions per stock); it trains, acts
    with 2N actions, and its checkpoint loads back to the same actions."""
    from trader.agents.checkpoint import load_agent
    from trader.training import train

    config = EnvConfig(**{**RATED, "random_start": True}, weights_map="linear", episode_length=20)
    env = StockTradingVecEnv(PANEL, 4, "cpu", config)
    small = {"network": network, "hidden_sizes": (8, 8)}
    small |= {"num_steps": 8} if algo == "ppo" else {"learning_starts": 16, "batch_size": 16, "buffer_size": 256}
    result = train(algo, env, small, tmp_path / "run", steps=128, seed=0, eval_every=0)
    agent = result.agent
    assert agent.act_dim == 8 and agent.config.actions_per_stock == 2
    obs, _ = env.reset(seed=1)
    actions = agent.act(obs, deterministic=True)
    assert actions.shape == (4, 8)
    again = load_agent(tmp_path / "run" / "checkpoints" / "final")
    torch.testing.assert_close(again.act(obs, deterministic=True), actions)


def test_the_per_stock_head_gives_each_stock_an_aim_and_a_rate():
    """Permuting the stocks permutes both blocks of the actions the same way."""
    from trader.agents import make_agent

    env = StockTradingVecEnv(PANEL, 2, "cpu", EnvConfig(**RATED, weights_map="linear"))
    agent = make_agent("ppo", env.obs_dim, env.act_dim, {"network": "per_stock", "actions_per_stock": 2}, seed=0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in agent.actor.parameters():  # weights big enough that the outputs differ by stock
            p.add_(torch.randn(p.shape, generator=g) * 0.5)
    obs, _ = env.reset(seed=0)
    obs = obs + torch.randn_like(obs) * 0.1
    order = torch.tensor([2, 0, 3, 1])
    n, features = 4, (env.obs_dim - 1 - 4) // 4
    permuted = torch.cat(
        [obs[:, :1], obs[:, 1:5][:, order], obs[:, 5:].reshape(2, n, features)[:, order].reshape(2, -1)], dim=-1
    )
    a, b = agent.act(obs, deterministic=True), agent.act(permuted, deterministic=True)
    torch.testing.assert_close(b[:, :4], a[:, :4][:, order])
    torch.testing.assert_close(b[:, 4:], a[:, 4:][:, order])
    assert not torch.allclose(a[:, :4], a[:, 4:])  # the rate is an output of its own
    with pytest.raises(ConfigError, match="actions_per_stock must be 1 or 2"):
        make_agent("ppo", env.obs_dim, env.act_dim, {"actions_per_stock": 3})


def test_the_gymnasium_adapter_checks_with_the_rate_action():
    from gymnasium.utils.env_checker import check_env

    from market_envs import GymStockTradingEnv

    env = GymStockTradingEnv(PANEL, EnvConfig(**RATED, weights_map="linear", episode_length=20, costs=EVERY_COST))
    check_env(env, skip_render_check=True)
    assert env.action_space.shape == (8,)
    env.reset(seed=3)
    env.step(np.concatenate([np.array([1, -1, 1, -1]), -np.ones(4)]).astype(np.float32))
    assert torch.equal(env.vec_env.holdings, torch.zeros_like(env.vec_env.holdings))  # rate 0: nothing bought
    env.step(np.concatenate([np.array([1, -1, 1, -1]), np.ones(4)]).astype(np.float32))
    assert (env.vec_env.holdings.abs() > 0).all()


def test_an_ensemble_averages_the_members_aims_and_rates():
    from trader.agents import make_agent
    from trader.agents.ensemble import EnsemblePolicy

    rules = EnvConfig(**RATED, weights_map="linear", market_neutral=True)
    env = StockTradingVecEnv(PANEL, 3, "cpu", rules)
    obs, _ = env.reset(seed=0)
    config = {"network": "per_stock", "actions_per_stock": 2, "init_log_std": -1.0}
    one, other = (make_agent("ppo", env.obs_dim, env.act_dim, config, seed=s) for s in (0, 1))
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for agent in (one, other):
            for p in agent.actor.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.5)
    a, b = one.act(obs, deterministic=True), other.act(obs, deterministic=True)
    combined = EnsemblePolicy([one, other], [0.25, 0.75], rules=rules).act(obs)
    assert combined.shape == (3, 8)
    expected_rates = 0.25 * policy_rates(a[:, 4:].double().clamp(-1, 1)) + 0.75 * policy_rates(
        b[:, 4:].double().clamp(-1, 1)
    )
    torch.testing.assert_close(policy_rates(combined[:, 4:].double()), expected_rates, rtol=1e-5, atol=1e-6)
    aims = 0.25 * aim_weights(a, rules) + 0.75 * aim_weights(b, rules)
    torch.testing.assert_close(aim_weights(combined, rules), aims, rtol=1e-5, atol=1e-6)
    alone = EnsemblePolicy([one], rules=rules).act(obs)  # one member: its own rates back
    torch.testing.assert_close(alone[:, 4:], a[:, 4:].clamp(-1, 1), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ the CLI: --trade-rate policy


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--trade-rate", "policy"], "--trade-rate: the aim, trade rate and band move a book of target weights"),
        (["--trade-rate", "fast", "--preset", "market"], "--trade-rate must be in [0, 1] (the share"),
    ],
)
def test_bad_policy_rate_flags_exit_2_with_one_line(flags, fragment, tmp_path, capsys):
    from podracer.cli import main

    args = ["train", "--algo", "ppo", str(tmp_path / "run"), "--dataset", "synthetic-edge-daily", "--steps", "64"]
    assert main([*args, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run" / "config.toml").exists()


def test_trade_rate_policy_trains_with_two_actions_per_stock(tmp_path):
    """``trader train --preset market-costs --trade-rate policy``: the rules record rate_action (and the
    fixed rate 1), the agent takes 2N actions; ``--trade-rate 0.3`` over it is a fixed rate again."""
    import tomllib

    from test_train_cli import TINY_EDGE_RECIPE

    from trader.agents.checkpoint import load_agent
    from podracer.cli import main
    from trader.rundir import recorded_rules

    recipe = tmp_path / "edge.toml"
    recipe.write_text(TINY_EDGE_RECIPE)
    for rate, expected in (("policy", True), ("0.3", False)):
        run_dir = tmp_path / f"run-{rate}"
        args = ["train", "--algo", "ppo", "--dataset", str(recipe), "--preset", "market-costs", "--trade-rate", rate]
        assert main([*args, "--steps", "256", "--num-envs", "4", "--eval-every", "0", str(run_dir)]) == 0
        rules = recorded_rules(tomllib.loads((run_dir / "config.toml").read_text())["env"]["env_config"], "config")
        assert rules.rate_action is expected and rules.trade_rate == (1.0 if expected else 0.3)
        agent = load_agent(run_dir / "checkpoints" / "final")
        assert agent.act_dim == 6 * rules.actions_per_stock  # the recipe's 6 tickers
        assert agent.config.actions_per_stock == rules.actions_per_stock


def test_the_per_stock_layout_is_not_guessed_from_the_sizes():
    """With one feature per stock (the market presets' observation), 2N actions over 1 + 2N columns
    would read as 2N stocks without features: refused unless the layout says 2 actions per stock."""
    from trader.agents.networks import stock_layout

    assert stock_layout(1 + 2 * 5, 10, actions_per_stock=2) == (5, 1)
    assert stock_layout(1 + 2 * 5, 5) == (5, 1)
    with pytest.raises(ConfigError, match="network='per_stock' needs a market env's observation"):
        stock_layout(1 + 2 * 5, 10)
