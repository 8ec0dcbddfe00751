"""Learning check: do PPO, SAC and TD3 find a planted edge, and only where there is one?

For each data set (default: the recipes ``synthetic-edge-minute``, with a planted edge
of known oracle Sharpe, and ``synthetic-minute``, edge-free), each algorithm is
trained for a fixed number of env transitions on the **training** period, from
``--seeds`` seeds, and every trained agent is then scored on the **validation**
period by the backtest engine (`trader.backtesting.run_backtest`), in one backtest per
data set, beside:

- ``oracle``: the planted rule's target weights (`market_envs.data.edge.oracle_weights`,
  computed on the whole panel from past closes only, then cut to the validation
  bars), traded through the same env: the ceiling;
- ``equal_weight``: equal-weight buy-and-hold, the backtest engine's baseline: the floor;
- ``random``: uniform random actions in [-1, 1]^N (seeded), a policy that knows nothing;
- ``linear_probe``: a diagnostic: per-ticker ridge regressions of the next bar's
  return on the observed features, fitted on the training period (`linear_probe`):
  how much of the edge the agents' observation carries at all.

On the edge-free data set the "oracle" row trades the edge data set's rule, which
should earn nothing there.

Trading rules, the same for training, agents, oracle and random policy: target
weights with short selling (``action_mode="weights"``, gross exposure at most 1), so
that the dollar-neutral oracle is expressible, and market-neutral by default
(``--market-neutral``: the actions are demeaned across the stocks, so a policy's
book has no net market exposure, as the oracle's has none; without it per-stock PPO
reached 0.41x the oracle, with it 0.94x, seed 0, benchmarks/RESULTS.md); rewards in
basis points of the capital (``--reward-scale``, `REWARD_SCALE`); costs ``--cost`` per side, 0 by
default, because the oracle's Sharpe is stated frictionless (it rebalances every
bar; `python benchmarks/oracle_costs.py` prints it at other cost levels). Training
episodes are ``--episode-length`` bars from random starts.

Checks printed under the table (medians over seeds):

1. edge data: each algorithm's validation Sharpe >= ``--target-fraction`` of the
   oracle's (default `TARGET_FRACTION`: issue 11's 0.5 for PPO, 0.3 for SAC and TD3);
2. edge-free data: no algorithm's Sharpe exceeds ``2 x`` its standard error
   ``sqrt(252 / days)`` (no excess where there is nothing to find);
3. edge data: PPO's validation return beats the random policy's and
   equal-weight buy-and-hold's (issue 4);
4. with ``--cost`` > 0: the best algorithm's Sharpe, net of costs, beats
   equal-weight's and the benchmark's (issue 11's costly-recipe target; run it on
   ``--edge-dataset synthetic-edge-daily --return-windows 5 --cost 0.0005``).

The exit status is 0 when every check passes, 1 otherwise.

    OMP_NUM_THREADS=1 python benchmarks/learning_check.py              # full: PPO ~19, SAC ~9, TD3 ~7 min per seed (one core)
    OMP_NUM_THREADS=1 python benchmarks/learning_check.py --quick      # a smoke run, ~2 min
    python benchmarks/learning_check.py --device cuda --out check.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

from market_envs.data import MarketData, load
from market_envs.data.recipes import find_recipe
from market_envs.data.edge import EdgeSpec
from market_envs.config import EnvConfig
from market_envs.env import StockTradingVecEnv
from market_envs.tables import observed_feature_table
from trader.agents import Agent, get_spec, make_agent, make_config
from trader.backtesting import ActionSchedule, BacktestConfig, run_backtest
from trader.backtesting.groups import oracle_schedule
from trader.errors import ConfigError
from podracer.presets import REWARD_SCALE, market_algo_config, market_rules

ALGOS = ("ppo", "sac", "td3")
EDGE_DATASET = "synthetic-edge-minute"
NULL_DATASET = "synthetic-minute"


@dataclass(frozen=True)
class Budget:
    """How much each algorithm trains; the same for every seed and data set."""

    steps: dict[str, int]
    """Env transitions (summed over sub-environments) per algorithm."""
    num_envs: dict[str, int]
    """Training sub-environments per algorithm."""


# The full budget fits issue 11's 20 minutes per seed and algorithm on one core of the
# 2-core reference machine: PPO about 19 minutes, SAC 11, TD3 8 (benchmarks/RESULTS.md);
# on a GPU raise it with --ppo-steps / --offpolicy-steps.
FULL = Budget(
    steps={"ppo": 1_000_000, "sac": 512_000, "td3": 512_000},
    num_envs={"ppo": 512, "sac": 256, "td3": 256},
)
TARGET_FRACTION = {"ppo": 0.5, "sac": 0.3, "td3": 0.3}
"""Issue 11's targets: each algorithm's median validation Sharpe as a fraction of the oracle's."""
REPLAY_RATIO = 4.0
"""SAC's and TD3's gradient updates per step of the vector env (of 256 sub-environments):
512k transitions are then 8,000 updates, about 8 (TD3) and 11 (SAC) minutes per seed on
one core of the reference machine with the (16, 16) per-stock network."""
QUICK = Budget(
    steps={"ppo": 16_384, "sac": 2_000, "td3": 2_000},
    num_envs={"ppo": 32, "sac": 8, "td3": 8},
)


def algo_overrides(algo: str, budget: Budget, network: str = "per_stock", replay_ratio: float = 1.0) -> dict[str, Any]:
    """Hyperparameters for the market env: `podracer.presets.market_algo_config` (its
    docstring gives the reasons) at this budget."""
    return market_algo_config(
        algo, steps=budget.steps[algo], num_envs=budget.num_envs[algo], network=network, replay_ratio=replay_ratio
    )


# --------------------------------------------------------------------- data


def env_rules(
    cost: float,
    episode_length: int,
    features: tuple[str, ...] | None = (),
    return_windows: tuple[int, ...] = (30,),
    reward_scale: float = REWARD_SCALE,
    market_neutral: bool = False,
) -> EnvConfig:
    """Trading rules shared by training, agents, oracle and random policy:
    `podracer.presets.market_rules`.

    The check asks whether an agent learns *which* tickers carry an edge, with which
    sign and how to size it, not whether it can rebuild a 30-bar statistic from
    single-bar indicators (`linear_probe` shows those carry little of it), so by
    default the agents observe only the t-statistic of each stock's last 30 returns.
    """
    return market_rules(cost, episode_length, features, return_windows, reward_scale, market_neutral)


def edge_spec(data: MarketData) -> EdgeSpec | None:
    """The planted edge of a synthetic panel (from its meta), or None."""
    spec = data.meta.get("edge")
    return EdgeSpec.from_dict(dict(spec)) if spec else None


def validation_oracle(full: MarketData, validation: MarketData, spec: EdgeSpec) -> ActionSchedule:
    """The oracle as a backtest strategy: its target weights for each bar of `validation`.

    The weights are computed on the whole panel (closes up to each bar only) so the
    oracle needs no warm-up inside the period: the backtest's own `oracle_schedule`,
    with the rule given (on edge-free data it is the edge data set's rule).
    """
    return oracle_schedule(full, validation, spec)


def linear_probe(
    full: MarketData,
    train: MarketData,
    validation: MarketData,
    rules: EnvConfig,
    ridge: float = 1.0,
    pooled: bool = False,
) -> ActionSchedule:
    """A diagnostic, not an agent: how much of the edge the observed features carry.

    Per ticker, a ridge regression (fitted on the training period) of the next bar's
    open-to-close return on that ticker's normalised features at bar t (the very
    features the agents observe). In the validation period the predictions are
    demeaned across tickers and scaled to gross exposure 1: a dollar-neutral portfolio
    like the oracle's. If this earns a good part of the oracle's Sharpe, the
    observation carries the edge and what the agents miss is learning; if it earns
    nothing, the observation does not carry the edge. An `ActionSchedule` like
    `validation_oracle`. ``pooled=True`` fits one regression on every ticker's rows
    (the supervised counterpart of the per-stock network: one rule for all stocks).
    """
    features = observed_feature_table(full, rules).double()  # [T, N, F]
    target = torch.zeros(full.close.shape, dtype=torch.float64)
    target[:-1] = full.close[1:].double() / full.open[1:].double() - 1.0  # row t: bar t+1's open->close
    lo = int(full.timestamps.get_loc(train.timestamps[0]))
    hi = lo + train.num_bars - 1  # the last training row's target lies in the next period
    x = torch.cat([features[lo:hi], torch.ones_like(features[lo:hi, :, :1])], dim=-1).transpose(0, 1)  # [N, T, F+1]
    y = target[lo:hi].transpose(0, 1).unsqueeze(-1)  # [N, T, 1]
    if pooled:
        x, y = x.reshape(1, -1, x.shape[-1]), y.reshape(1, -1, 1)
    gram = x.transpose(1, 2) @ x + ridge * torch.eye(x.shape[-1], dtype=x.dtype)
    coef = torch.linalg.solve(gram, x.transpose(1, 2) @ y).expand(full.num_tickers, -1, -1)  # [N, F+1, 1]
    offset = int(full.timestamps.get_loc(validation.timestamps[0]))
    xv = features[offset : offset + validation.num_bars]
    xv = torch.cat([xv, torch.ones_like(xv[:, :, :1])], dim=-1)
    prediction = torch.einsum("tnf,nf->tn", xv, coef.squeeze(-1))
    centred = prediction - prediction.mean(dim=1, keepdim=True)
    return ActionSchedule(centred / centred.abs().sum(dim=1, keepdim=True).clamp_min(1e-12))


def random_policy(num_tickers: int, seed: int) -> Callable[[Tensor], Tensor]:
    """Uniform random actions in [-1, 1]^N from its own seeded generator."""
    generator = torch.Generator().manual_seed(seed)

    def policy(obs: Tensor) -> Tensor:
        actions = torch.rand((obs.shape[0], num_tickers), generator=generator) * 2.0 - 1.0
        return actions.to(obs.device)

    return policy


# --------------------------------------------------------------------- training


def train_agent(
    algo: str,
    data: MarketData,
    rules: EnvConfig,
    budget: Budget,
    seed: int,
    device: torch.device,
    network: str = "per_stock",
    replay_ratio: float = 1.0,
    extra: dict[str, Any] | None = None,
    on_iteration: Callable[[Agent, dict[str, float], int], None] | None = None,
) -> tuple[Agent, float]:
    """Train one agent on `data` for the budget's steps; returns it and the seconds taken.

    `extra`: config keys set on top of `algo_overrides` (``--set algo.key=value``);
    `on_iteration(agent, metrics, steps so far)`: called after every runner iteration
    (the one-off benchmarks/sign_trace.py, last at 9487227, measured the agent there)."""
    torch.manual_seed(seed)  # the env's start generator is drawn from the global RNG
    env = StockTradingVecEnv(data, budget.num_envs[algo], device, rules)
    config = make_config(algo, {**algo_overrides(algo, budget, network, replay_ratio), **(extra or {})})
    agent = make_agent(algo, env.obs_dim, env.act_dim, config, device=device, seed=seed)
    runner = get_spec(algo).runner_cls(agent, env)
    start, steps = time.perf_counter(), 0
    while steps < budget.steps[algo]:
        metrics = runner.iteration()
        steps += int(metrics["env_steps"])
        if on_iteration is not None:
            on_iteration(agent, metrics, steps)
    return agent, time.perf_counter() - start


# --------------------------------------------------------------------- one data set


@dataclass
class Scores:
    """Validation metrics of every strategy of one data set."""

    dataset: str
    days: int
    oracle_sharpe: float | None
    rows: dict[str, dict[str, float]]
    """strategy name -> {"sharpe", "cum_return", "train_s" (agents)}."""


def load_overrides(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """``--override`` pairs, plus ``--edge-strength`` and ``--edge-fraction`` on a recipe
    that plants an edge."""
    overrides = dict(args.override or [])
    changes = {"strength_sharpe": args.edge_strength, "fraction": args.edge_fraction}
    changes = {key: value for key, value in changes.items() if value is not None}
    if changes:
        edge = dict(overrides.get("edge") or find_recipe(name).options.get("edge") or {})
        if edge:
            overrides["edge"] = {**edge, **changes}
    return overrides


def check_dataset(name: str, args: argparse.Namespace, budget: Budget, device: torch.device) -> Scores:
    """Train every algorithm from every seed on `name`, backtest all on its validation period."""
    full = load(name, **load_overrides(name, args))
    train, validation = full.period("train"), full.period("validation")
    rules = env_rules(
        args.cost, args.episode_length, args.features, args.return_windows, args.reward_scale, args.market_neutral
    )
    print(
        f"{name}: {full.num_tickers} tickers, train {train.num_bars} bars, validation {validation.num_bars} bars",
        flush=True,
    )
    policies: dict[str, Any] = {}
    train_seconds: dict[str, float] = {}
    for algo in args.algos:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            agent, seconds = train_agent(
                algo,
                train,
                rules,
                budget,
                seed,
                device,
                args.network,
                args.replay_ratio,
                {k.split(".", 1)[1]: v for k, v in (args.set or []) if k.split(".", 1)[0] == algo},
            )
            policies[f"{algo}-{seed}"] = agent
            train_seconds[f"{algo}-{seed}"] = seconds
            print(f"  trained {algo} seed {seed}: {budget.steps[algo]} steps in {seconds:.0f} s", flush=True)
    spec = edge_spec(full) or args.null_spec  # edge-free data: the edge data set's rule
    if spec is not None:
        policies["oracle"] = validation_oracle(full, validation, spec)
    policies["linear_probe"] = linear_probe(full, train, validation, rules)
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        policies[f"random-{seed}"] = random_policy(full.num_tickers, 1000 + seed)
    config = BacktestConfig(
        buy_cost=args.cost, sell_cost=args.cost, policy_env=rules, record_positions="day", tear_sheet=False
    )
    yardsticks = ["equal_weight"] + (["benchmark"] if validation.benchmark is not None else [])
    result = run_backtest(validation, policies, baselines=yardsticks, config=config, device=device)
    table = result.metrics
    rows = {
        strategy: {
            "sharpe": float(table.loc[strategy, "sharpe_ratio"]),
            "cum_return": float(table.loc[strategy, "cum_returns_final"]),
            **({"train_s": train_seconds[strategy]} if strategy in train_seconds else {}),
        }
        for strategy in table.index
    }
    days = int(table["days"].iloc[0]) if "days" in table.columns else len(result.daily_returns)
    oracle = rows["oracle"]["sharpe"] if edge_spec(full) is not None else None  # the ceiling, on edge data only
    return Scores(name, days, oracle, rows)


# --------------------------------------------------------------------- report


def median_of(rows: dict[str, dict[str, float]], prefix: str, key: str) -> float:
    """Median of `key` over the seeds of strategy `prefix` (rows named prefix-seed)."""
    values = [row[key] for name, row in rows.items() if name.rsplit("-", 1)[0] == prefix]
    return statistics.median(values) if values else math.nan


def report(scores: list[Scores], args: argparse.Namespace) -> tuple[str, list[tuple[str, bool]]]:
    """The markdown table and the checks (name, passed)."""
    lines = [
        "| data set | strategy | Sharpe (median) | Sharpe per seed | Sharpe s.e. | cum. return (median) | x oracle Sharpe | train s / seed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    checks: list[tuple[str, bool]] = []
    for s in scores:
        for prefix in (*args.algos, "random", "equal_weight", "benchmark", "linear_probe", "oracle"):
            seeds = [row for name, row in s.rows.items() if name.rsplit("-", 1)[0] == prefix or name == prefix]
            if not seeds:
                continue
            sharpe = statistics.median(r["sharpe"] for r in seeds)
            per_seed = ", ".join(f"{r['sharpe']:.2f}" for r in seeds)
            cum = statistics.median(r["cum_return"] for r in seeds)
            frac = sharpe / s.oracle_sharpe if s.oracle_sharpe and prefix not in ("oracle",) else math.nan
            train_s = statistics.median(r["train_s"] for r in seeds) if "train_s" in seeds[0] else math.nan
            lines.append(
                f"| {s.dataset} | {prefix} | {sharpe:.2f} | {per_seed} | {math.sqrt(252.0 / max(s.days, 1)):.2f} | {cum:+.4%} | "
                f"{'-' if math.isnan(frac) else f'{frac:.2f}'} | {'-' if math.isnan(train_s) else f'{train_s:.0f}'} |"
            )
        has_edge = s.dataset == args.edge_dataset
        if has_edge and s.oracle_sharpe is not None:
            for algo in args.algos:
                sharpe = median_of(s.rows, algo, "sharpe")
                fraction = args.target_fraction if args.target_fraction is not None else TARGET_FRACTION[algo]
                need = fraction * s.oracle_sharpe
                checks.append(
                    (
                        f"{s.dataset}: {algo} Sharpe {sharpe:.2f} >= {fraction} x oracle {s.oracle_sharpe:.2f} = {need:.2f}",
                        sharpe >= need,
                    )
                )
            ppo = median_of(s.rows, "ppo", "cum_return")
            if "ppo" in args.algos:
                rnd = median_of(s.rows, "random", "cum_return")
                eq = s.rows["equal_weight"]["cum_return"]
                checks.append((f"{s.dataset}: ppo validation return {ppo:+.4%} > random {rnd:+.4%}", ppo > rnd))
                checks.append((f"{s.dataset}: ppo validation return {ppo:+.4%} > equal-weight {eq:+.4%}", ppo > eq))
            if args.cost > 0 and args.algos:
                checks.append(costly_check(s, args.algos))
        if not has_edge:
            bound = 2.0 * math.sqrt(252.0 / max(s.days, 1))
            for algo in args.algos:
                sharpe = median_of(s.rows, algo, "sharpe")
                checks.append(
                    (
                        f"{s.dataset}: {algo} Sharpe {sharpe:.2f} <= 2 standard errors {bound:.2f} (no edge)",
                        sharpe <= bound,
                    )
                )
    return "\n".join(lines), checks


def costly_check(s: Scores, algos: tuple[str, ...]) -> tuple[str, bool]:
    """Issue 11's target on a recipe with costs: the best algorithm's median Sharpe,
    net of costs, above equal-weight's and the benchmark's (when the data has one)."""
    best = max(algos, key=lambda algo: median_of(s.rows, algo, "sharpe"))
    sharpe = median_of(s.rows, best, "sharpe")
    floors = {name: s.rows[name]["sharpe"] for name in ("equal_weight", "benchmark") if name in s.rows}
    text = ", ".join(f"{name} {value:.2f}" for name, value in floors.items())
    return f"{s.dataset}: best ({best}) Sharpe {sharpe:.2f} net of costs > {text}", all(
        sharpe > v for v in floors.values()
    )


def machine() -> str:
    return (
        f"{platform.platform()}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} thread), load average {os.getloadavg()[0]:.1f}"
    )


def parse_override(text: str) -> tuple[str, Any]:
    """``key=value`` for `load` overrides and ``--set`` (ints and floats parsed;
    a comma-separated value is a tuple, e.g. ``sac.hidden_sizes=16,16``)."""
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    if "," in value:
        return key, tuple(_number(part) for part in value.split(","))
    return key, _number(value)


def _number(value: str) -> Any:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algos", default=",".join(ALGOS), help="comma-separated algorithms")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per algorithm: FIRST..FIRST+N-1")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed (to run seeds in separate processes)")
    parser.add_argument("--edge-dataset", default=EDGE_DATASET, help="recipe with a planted edge")
    parser.add_argument("--null-dataset", default=NULL_DATASET, help="edge-free recipe ('' to skip)")
    parser.add_argument(
        "--override",
        type=parse_override,
        action="append",
        help="recipe override key=value (both data sets), repeatable",
    )
    parser.add_argument("--edge-strength", type=float, default=None, help="replace the edge recipe's strength_sharpe")
    parser.add_argument(
        "--edge-fraction", type=float, default=None, help="replace the edge recipe's fraction of edge tickers"
    )
    parser.add_argument(
        "--cost", type=float, default=0.0, help="cost rate per side (0: the oracle's frictionless setting)"
    )
    parser.add_argument(
        "--features", default="", help="panel features to observe, comma-separated ('all': every one; default none)"
    )
    parser.add_argument(
        "--return-windows", default="30", help="ret_tstat windows to observe, comma-separated ('' for none)"
    )
    parser.add_argument(
        "--network",
        default="per_stock",
        choices=("per_stock", "mlp"),
        help="the agents' networks (trader.agents.networks)",
    )
    parser.add_argument(
        "--set", type=parse_override, action="append", help="algo config key, e.g. ppo.learning_rate=1e-3 (repeatable)"
    )
    parser.add_argument(
        "--market-neutral",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="EnvConfig.market_neutral: actions demeaned across stocks (default; the oracle is dollar-neutral)",
    )
    parser.add_argument(
        "--replay-ratio",
        type=float,
        default=None,
        help=f"SAC/TD3 gradient updates per vector env step (default {REPLAY_RATIO:g}; 1 with --quick)",
    )
    parser.add_argument(
        "--reward-scale",
        type=float,
        default=REWARD_SCALE,
        help="EnvConfig.reward_scale for training (1e-2: basis points)",
    )
    parser.add_argument("--episode-length", type=int, default=390, help="training episode length in bars")
    parser.add_argument(
        "--target-fraction",
        type=float,
        default=None,
        help="fraction of the oracle's Sharpe to reach (default: issue 11's, 0.5 for PPO, 0.3 for SAC and TD3)",
    )
    parser.add_argument("--ppo-steps", type=int, default=None, help="override PPO's transitions")
    parser.add_argument("--offpolicy-envs", type=int, default=None, help="override SAC's and TD3's sub-environments")
    parser.add_argument("--offpolicy-steps", type=int, default=None, help="override SAC's and TD3's transitions")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, ...")
    parser.add_argument("--jobs", type=int, default=2, help="processes: the data sets side by side")
    parser.add_argument(
        "--null-only", action="store_true", help="train and score on the edge-free data set only (check 2)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny budget (a smoke run, not the check)")
    parser.add_argument("--out", default=None, help="also write the scores as JSON here")
    args = parser.parse_args(argv)
    args.algos = tuple(a for a in args.algos.split(",") if a)
    args.features = None if args.features == "all" else tuple(f for f in args.features.split(",") if f)
    args.return_windows = tuple(int(w) for w in args.return_windows.split(",") if w)
    if args.replay_ratio is None:
        args.replay_ratio = 1.0 if args.quick else REPLAY_RATIO
    args.null_spec = None  # set by run_all: the edge data set's rule, traded on edge-free data
    unknown = [a for a in args.algos if a not in ALGOS]
    if unknown:
        raise ConfigError(f"--algos: unknown {unknown}; choose from {list(ALGOS)}")
    return args


def make_budget(args: argparse.Namespace) -> Budget:
    base = QUICK if args.quick else FULL
    steps = dict(base.steps)
    if args.ppo_steps is not None:
        steps["ppo"] = args.ppo_steps
    if args.offpolicy_steps is not None:
        steps["sac"] = steps["td3"] = args.offpolicy_steps
    num_envs = dict(base.num_envs)
    if args.offpolicy_envs is not None:
        num_envs["sac"] = num_envs["td3"] = args.offpolicy_envs
    return Budget(steps=steps, num_envs=num_envs)


def _dataset_job(name: str, args: argparse.Namespace, budget: Budget) -> Scores:
    """One data set, in a worker process (one torch thread)."""
    torch.set_num_threads(1)
    return check_dataset(name, args, budget, torch.device(args.device))


def run_all(args: argparse.Namespace, budget: Budget) -> list[Scores]:
    """Both data sets, side by side in ``--jobs`` processes (1: one after the other)."""
    names = [args.edge_dataset] + ([args.null_dataset] if args.null_dataset else [])
    if args.null_only:
        if not args.null_dataset:
            raise ConfigError("--null-only needs --null-dataset")
        names = [args.null_dataset]
    args.null_spec = edge_spec(load(args.edge_dataset, **load_overrides(args.edge_dataset, args)))
    if args.jobs <= 1 or len(names) == 1:
        return [_dataset_job(name, args, budget) for name in names]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=context) as pool:
        futures = [pool.submit(_dataset_job, name, args, budget) for name in names]
        return [future.result() for future in futures]


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    budget = make_budget(args)
    print(f"machine: {machine()}")
    print(f"budget: {asdict(budget)}, cost {args.cost}, episode {args.episode_length} bars", flush=True)
    start = time.perf_counter()
    scores = run_all(args, budget)
    table, checks = report(scores, args)
    print()
    print(
        f"Learning check, validation period, medians of {args.seeds} seeds; machine: {machine()}; "
        f"total {time.perf_counter() - start:.0f} s"
    )
    print(table)
    print()
    for text, passed in checks:
        print(f"[{'PASS' if passed else 'FAIL'}] {text}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "machine": machine(),
                    "budget": asdict(budget),
                    "cost": args.cost,
                    "scores": [asdict(s) for s in scores],
                    "checks": checks,
                },
                handle,
                indent=2,
            )
    return 0 if all(passed for _, passed in checks) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
