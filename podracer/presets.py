"""Settings with which the agents learn a market data set: the env rules and algorithm
configs measured by benchmarks/learning_check.py (figures in benchmarks/RESULTS.md).

The env's and the algorithms' own defaults follow FinRL and the papers (shares mode,
rewards scaled by 1e-4, a flat MLP, discount 0.99); on the planted-edge data sets those
learn little within a laptop's budget. These presets are what the learning check, the
baseline comparison and `make demo` train with:

- `market_rules`: target weights with short selling, optionally market-neutral, rewards
  in basis points, the agents observing return t-statistics;
- `edge_rules`: `market_rules` for a data set with a planted edge (its horizon observed,
  market-neutral like the oracle);
- `market_algo_config`: PPO, SAC and TD3 on the per-stock network;
- `apply_preset`: a named preset's rules and configs under the keys a user gave.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from market_envs.config import EnvConfig
from trader.rundir import config_to_dict

REWARD_SCALE = 1e-2
"""Reward = change of value x 1e-2: with the env's 1e6 starting cash, the bar's return in
basis points. FinRL's 1e-4 (the env's default) makes a minute bar's reward about 0.01,
and a critic whose initial outputs are of order 1 then drowns the advantages: on the
default edge per-stock PPO's policy lost the rule's sign, and at 1e-2 the same run
holds it (benchmarks/RESULTS.md, "Why per-stock PPO lost on the default edge")."""


def capital_rules(capital: float, reward_scale: float = REWARD_SCALE, initial_cash: float = 1e6) -> dict[str, float]:
    """The env keys (``initial_cash``, ``reward_scale``) that move rules whose rewards were scaled by
    `reward_scale` for a starting cash of `initial_cash` to a starting capital of `capital`, each
    bar's reward still the same share of the capital (a reward is the change of value times the
    scale; the defaults, the presets' `REWARD_SCALE` at the env's USD 1 million, are basis points).
    Costs with a per-order minimum or a square-root impact read different markets at different
    capitals (``synthetic-edge-minute-costs`` is measured at 1e7: benchmarks/learning_costs.py)."""
    if not capital > 0:
        raise ValueError(f"capital must be positive, got {capital}")
    return {"initial_cash": float(capital), "reward_scale": reward_scale * initial_cash / capital}


def rules_at_capital(rules: dict[str, Any] | None, capital: float) -> dict[str, Any]:
    """Env rules (a dict of `EnvConfig` keys; None: the env's defaults) moved to a starting capital
    of `capital` by `capital_rules`, from their own ``initial_cash`` and ``reward_scale`` (or the env's
    defaults where they set none)."""
    rules = dict(rules or {})
    scale, cash = rules.get("reward_scale", EnvConfig.reward_scale), rules.get("initial_cash", EnvConfig.initial_cash)
    return {**rules, **capital_rules(capital, scale, cash)}


COSTS_TRADE_RATE = 0.02
"""The fixed trade rate the ``market-costs`` preset traded at before the policy chose its own
(`COSTS_PACE`; ``--trade-rate 0.02`` restores it): the share of the way to the aim traded each bar.
The oracle under `institutional` costs picks 0.02 on the training period of
``synthetic-edge-minute-costs`` (a minute market whose edge has a session's horizon;
`benchmarks/oracle_under_costs.py`); a market with another horizon wants another rate: about
8 / horizon in bars there."""

COSTS_PACE = {"rate_action": True}
"""The ``market-costs`` preset's pace toward the aim: the policy chooses each stock's trade rate
(`EnvConfig.rate_action`, a second action per stock). With the fixed rate `COSTS_TRADE_RATE` an
agent trained at zero cost traded exactly as slowly as one trained under costs, so the env's rule,
not learning, made both cost-aware, and their Sharpe ratios under costs were equal on every seed;
with the rate its own, PPO trained under costs learns a slow rate and the same agent trained at
zero cost does not (benchmarks/RESULTS.md, "A rate the policy chooses")."""

COSTS_LINEAR_SCALE = 8.0
"""The ``market-costs`` preset's `EnvConfig.linear_scale`: an action of +-1 in one stock aims at
8 / N of the capital there (the linear map's default is 2 / N). At 2 / N, PPO's mean actions after
524,288 transitions made a book about a fifth the size of the oracle's, so it traded a fifth as
much (0.16x to 0.22x of the oracle under costs' turnover) and kept 0.64x to 0.72x of its net
Sharpe; at 8 / N the same agent on the tuning seed reached 0.93x of it with 1.14x its turnover
(benchmarks/RESULTS.md, "Learning under costs, with an action that can hold")."""

HOLDING = {"weights_map": "linear", "linear_scale": COSTS_LINEAR_SCALE, "reward": "aim"}
"""The ``market-costs`` preset's action and reward beside the trade rate (`EnvConfig`): an aim that
grows with the action (`COSTS_LINEAR_SCALE`), so a learner can shrink its exploration noise and the
turnover it makes (the "normalized" book rescales any noise to full gross); and the aim's own return less the
step's costs as the reward, so that a discount of 0 credits each action with what it earns while
the book moves slowly toward it (benchmarks/RESULTS.md, "Learning under costs, with an action
that can hold")."""


def market_rules(
    cost: float = 0.0,
    episode_length: int = 390,
    features: tuple[str, ...] | None = (),
    return_windows: tuple[int, ...] = (30,),
    reward_scale: float = REWARD_SCALE,
    market_neutral: bool = False,
    **holding: Any,
) -> EnvConfig:
    """Trading rules for learning on a market: target weights with short selling (gross
    exposure at most 1), costs `cost` per side, training episodes of `episode_length`
    bars, rewards in basis points.

    By default the agents observe, per stock, only the t-statistic of its last 30
    returns (``EnvConfig.return_windows``), the statistic the planted rules are made of,
    and no other panel feature (``features=()``; None: every one).
    ``market_neutral`` demeans the actions across stocks (no net market exposure).
    ``holding``: `EnvConfig`'s ``weights_map``, ``trade_rate``, ``no_trade_band``,
    ``band_scope``, ``reward`` (default: today's mapping, the book rebalanced in full to the
    action, the change of value as the reward).
    """
    return EnvConfig(
        **holding,
        action_mode="weights",
        short_selling=True,
        buy_cost=cost,
        sell_cost=cost,
        episode_length=episode_length,
        features=features,
        return_windows=return_windows,
        reward_scale=reward_scale,
        market_neutral=market_neutral,
    )


def edge_rules(edge: dict[str, Any] | None, cost: float = 0.0, episode_length: int = 390, **holding: Any) -> EnvConfig:
    """`market_rules` for a data set whose meta carries a planted edge (``data.meta["edge"]``):
    the agents observe the return t-statistic over the edge's horizon, and trade
    market-neutral, as the dollar-neutral oracle does: the per-stock network's shared
    terms move every stock's weight the same way, so without it the policy carries
    market risk that the oracle does not (benchmarks/RESULTS.md, "Why per-stock PPO
    lost on the default edge", compares both). Without an edge: a 30-bar window."""
    window = int(edge["horizon"]) if edge else 30
    return market_rules(cost, episode_length, return_windows=(window,), market_neutral=True, **holding)


def market_algo_config(
    algo: str, *, steps: int, num_envs: int, network: str = "per_stock", replay_ratio: float = 1.0
) -> dict[str, Any]:
    """Config overrides of `algo` ("ppo", "sac", "td3") for the market env.

    ``network="per_stock"`` (the default) shares one small network across the stocks
    (`trader.agents.networks`); ``"mlp"`` is the flat MLP over the whole observation.
    `steps` and `num_envs`: the training budget (sizes the replay buffer and the
    warm-up); ``replay_ratio``: SAC's and TD3's gradient updates per step of the
    vector env.

    At zero cost in weights mode the portfolio is rebalanced in full every bar, so an
    action changes the next reward only: the problem is a contextual bandit, and a
    discount of 0 gives the plainest credit assignment (advantage = reward - V(s)).
    The observed columns are already scale-free (position shares, t-statistics), so
    PPO does not normalise them again. PPO's rollouts hold about 4,096 transitions (8 to 32 steps
    of each sub-environment): on this bandit the policy improves by iterations on fresh data, and
    with 512 sub-environments 8 steps learned the daily edge in a quarter of the transitions that
    32 needed, at the same update work per transition (benchmarks/RESULTS.md, "Time to learn").
    """
    per_stock = network == "per_stock"
    if algo == "ppo":
        return {
            "network": network,
            "num_steps": max(8, min(32, 4096 // num_envs)),
            "update_epochs": 4,
            "num_minibatches": 8,
            "gamma": 0.0,
            "gae_lambda": 0.0,
            "hidden_sizes": (32, 32) if per_stock else (64, 64),
            "init_log_std": -0.5,
            "learning_rate": 3e-4,
            "ent_coef": 0.0,
            "normalize_obs": False,
        }
    return {
        "network": network,
        # (16, 16): a per-stock update runs the networks once per stock, so wider layers
        # cost N times over; (16, 16) keeps it near the flat (256, 256) MLP's cost
        # (benchmarks/RESULTS.md, "What the per-stock network costs").
        "hidden_sizes": (16, 16) if per_stock else (256, 256),
        "gamma": 0.0,
        "batch_size": 256,
        "learning_starts": min(2_000, steps // 5),
        "updates_per_step": replay_ratio / num_envs,
        "iteration_steps": 1_000,
        "normalize_obs": True,
        "buffer_size": max(steps, 10_000),
        **(SAC_TEMPERATURE if algo == "sac" else {}),
        **(TD3_MARKET if algo == "td3" else {}),
    }


SAC_TEMPERATURE = {"autotune_alpha": False, "init_alpha": 1e-4}
"""SAC's entropy temperature on the market, fixed and small. A bar's reward in basis
points is about 0.1 for the oracle, shared among 100 stocks; the entropy term's pull on
each action's mean (``alpha x 2 tanh(u)`` per dimension) is larger than the critic's
(about 0.001 per stock) unless alpha is about 1e-4, and the default autotuning from
alpha = 1 (or even 1e-3) cannot get there within a few thousand updates (log alpha
moves about lr per update). benchmarks/RESULTS.md ("SAC and TD3 on the default edge")
compares autotuning with the fixed value on the default edge."""


TD3_MARKET = {"exploration_noise": 0.3, "critic_init_scale": 0.01}
"""TD3 on the market: exploration noise of std 0.3 on each stock's action instead of
0.1, and twin critics whose output layer starts 100x smaller (nearly flat in the
actions). benchmarks/sign_trace.py (a one-off, last at 9487227; docs/notebook/) showed why a seed could end on the rule's mirror
image: its freshly initialised critic sloped the wrong way in the actions, the actor
followed that slope, and the critic, fitting a per-bar edge far smaller than the
reward's noise, had not unlearned it by the end of the budget. With a nearly flat
initial critic the actor follows what the critic learns from the data; the wider
noise explores enough of each stock's action for the critic to learn its slope.
benchmarks/RESULTS.md ("SAC and TD3 on the default edge") has the seeds' Sharpe
ratios under each setting."""


PRESET_HOLDING: dict[str, dict[str, Any]] = {"market": {}, "market-costs": {**HOLDING, **COSTS_PACE}}
"""Each preset's `EnvConfig` keys beside `edge_rules`: none for ``market``; the action that can hold
(`HOLDING`) and the policy's rate (`COSTS_PACE`) for ``market-costs``. The one place a benchmark that
builds its own rules (benchmarks/learning_costs.py, at its own capital) takes them from."""

PRESETS = tuple(PRESET_HOLDING)
"""Names accepted by ``--preset`` (`trader train`, `trader tournament`, `trader walkforward`):
``market`` rebalances the book to the action every bar (today's mapping, with which the
zero-cost learning checks were measured); ``market-costs`` trades with the action that can hold
(`HOLDING`) at a rate the policy chooses per stock (`COSTS_PACE`), for markets where costs decide."""


def preset_rules(name: str, dataset: str | None, cost: float) -> EnvConfig:
    """The env rules of preset `name` for a data set recipe: ``"market"`` is
    `edge_rules` with the recipe's planted edge (if any) and `cost` per side;
    ``"market-costs"`` the same with `HOLDING` and `COSTS_PACE`."""
    from trader.errors import UserError

    if name not in PRESETS:
        raise UserError(f"--preset: unknown preset {name!r}; choose {', '.join(PRESETS)}")
    if dataset is None:
        raise UserError(f"--preset {name} needs --dataset (it sets the market env's rules)")
    if not 0 <= cost < 1:
        raise UserError(f"--commission must be in [0, 1), got {cost}")
    from market_envs.data import load

    return edge_rules(load(dataset).meta.get("edge"), cost, **PRESET_HOLDING[name])


def apply_preset(
    name: str,
    dataset: str | None,
    cost: float,
    algos: Iterable[str],
    *,
    steps: int,
    num_envs: int,
    env_config: Mapping[str, Any] | None = None,
    algo_configs: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The env rules and algo configs of preset `name` for a data set, under the keys
    already given: ``(env_config, algo_configs)`` as plain dicts.

    The one place a preset is applied (`trader train`, `trader tournament` and
    `trader demo`): the preset's rules (`preset_rules`) and each algorithm's config
    (`market_algo_config` for ``steps`` transitions on ``num_envs`` envs) are the
    defaults; every key of ``env_config`` and ``algo_configs[algo]`` stays as given.
    Configs of algorithms outside ``algos`` are kept as they are.

    Both presets train with the same algo configs. ``market-costs`` once started PPO's
    exploration noise at log-std -2 (chosen with a fixed trade rate); with the policy's own
    rate that noise was too small to move the rates from their initial 0.25, and PPO at -0.5
    kept 0.82x to 0.95x of the oracle under costs on validation where -2 kept 0.65x to 0.66x, on 5 of 5 fresh
    seeds (benchmarks/RESULTS.md, "The preset's exploration noise with the policy's rate")."""
    rules = config_to_dict(preset_rules(name, dataset, cost))
    given = {algo: dict(values) for algo, values in (algo_configs or {}).items()}
    for algo in algos:
        given[algo] = {**market_algo_config(algo, steps=steps, num_envs=num_envs), **given.get(algo, {})}
    return {**rules, **dict(env_config or {})}, given


__all__ = [
    "COSTS_TRADE_RATE",
    "HOLDING",
    "PRESETS",
    "PRESET_HOLDING",
    "REWARD_SCALE",
    "apply_preset",
    "capital_rules",
    "rules_at_capital",
    "edge_rules",
    "market_algo_config",
    "market_rules",
    "preset_rules",
]
