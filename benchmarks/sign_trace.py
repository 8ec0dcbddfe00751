"""Sign trace: does an agent's book follow the planted rule or its mirror image while it trains?

A diagnostic for issue 11 (TD3 ending on the rule's mirror image on some seeds). It
trains one algorithm exactly as `benchmarks/learning_check.py` does (same data set,
rules, budget and configs, ``--set`` overrides included) and every ``--every``
iterations measures, on a fixed probe of training observations:

- ``actor_corr``: the correlation, over probe rows x stocks, between the agent's
  deterministic actions demeaned across stocks (the market-neutral book) and the
  rule's direction (the oracle's sign times the demeaned observed t-statistic):
  +1 follows the rule, -1 is its mirror image;
- ``critic_corr`` (SAC, TD3): the same correlation for the gradient of the first
  Q-network with respect to the actions at the actor's action, demeaned across
  stocks: the direction in which the critic pushes the book;
- ``mean_abs_action`` and ``saturated`` (share of actions with ``|a| > 0.99``);
- the runner's own metrics of that iteration (critic loss, Q mean, ...);
- with ``--validate-every K``: the validation Sharpe (`trader.agents.evaluator.market_evaluator`,
  the score `trader.train` selects checkpoints by) every K-th trace row.

    OMP_NUM_THREADS=1 python benchmarks/sign_trace.py --algo td3 --seed 2 --every 16
    OMP_NUM_THREADS=1 python benchmarks/sign_trace.py --algo td3 --seed 2 --set critic_init_scale=1 --out trace.csv
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning_check import FULL, REPLAY_RATIO, Budget, edge_spec, env_rules, parse_override, train_agent  # noqa: E402

from market_envs.data import load  # noqa: E402
from market_envs.data.edge import edge_layout  # noqa: E402
from market_envs.env import StockTradingVecEnv  # noqa: E402
from trader.agents.evaluator import market_evaluator  # noqa: E402


def probe_observations(data: Any, rules: Any, num_envs: int, steps: int, seed: int) -> Tensor:
    """Observations of `data` from random starts after `steps` random actions (so the
    position columns are not all zero): the fixed probe, ``[num_envs, obs_dim]``."""
    torch.manual_seed(10_000 + seed)
    env = StockTradingVecEnv(data, num_envs, "cpu", rules)
    obs, _ = env.reset(seed=10_000 + seed)
    generator = torch.Generator().manual_seed(10_000 + seed)
    for _ in range(steps):
        obs, *_ = env.step(torch.rand((num_envs, env.act_dim), generator=generator) * 2 - 1)
    return obs


def rule_direction(obs: Tensor, num_stocks: int, sign: float) -> Tensor:
    """The rule's book on each probe row, up to scale: sign x the demeaned t-statistic
    (the observation's only feature per stock in the learning check)."""
    stat = obs[:, 1 + num_stocks :].reshape(obs.shape[0], num_stocks, -1)[:, :, 0]
    return sign * (stat - stat.mean(dim=1, keepdim=True))


def correlation(x: Tensor, y: Tensor) -> float:
    """Pearson correlation of two equally shaped tensors, flattened."""
    x, y = x.flatten().double(), y.flatten().double()
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / (x.norm() * y.norm()).clamp_min(1e-300))


def demeaned(x: Tensor) -> Tensor:
    return x - x.mean(dim=1, keepdim=True)


def critic_push(agent: Any, normalized: Tensor, actions: Tensor) -> Tensor:
    """d Q1(s, a) / d a at `actions` (the first Q-network of the twin critic)."""
    actions = actions.detach().clone().requires_grad_(True)
    q = agent.critic(normalized, actions)[0].sum()
    (grad,) = torch.autograd.grad(q, actions)
    return grad


def trace_row(agent: Any, probe: Tensor, direction: Tensor) -> dict[str, float]:
    """The sign measures of the agent on the probe (see the module docstring)."""
    with torch.no_grad():
        actions = agent.act(probe, deterministic=True)
    row = {
        "actor_corr": correlation(demeaned(actions), direction),
        "mean_abs_action": float(actions.abs().mean()),
        "saturated": float((actions.abs() > 0.99).float().mean()),
    }
    if hasattr(agent, "critic"):
        normalized = agent.normalizer.normalize(probe)
        row["critic_corr"] = correlation(demeaned(critic_push(agent, normalized, actions)), direction)
    return row


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", default="td3", choices=("ppo", "sac", "td3"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset", default="synthetic-edge-minute", help="recipe with a planted edge")
    parser.add_argument("--steps", type=int, default=None, help="transitions (default: the learning check's)")
    parser.add_argument("--every", type=int, default=16, help="iterations between trace rows")
    parser.add_argument(
        "--validate-every", type=int, default=0, help="validate every K-th trace row (0: only at the end)"
    )
    parser.add_argument(
        "--set", type=parse_override, action="append", help="algo config key=value on top of the check's (repeatable)"
    )
    parser.add_argument("--probe-envs", type=int, default=256, help="probe rows")
    parser.add_argument("--out", default=None, help="also write the trace as CSV")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    full = load(args.dataset)
    spec = edge_spec(full)
    if spec is None or not isinstance(spec.kind, str):
        print(f"sign_trace: {args.dataset} must plant one kind of edge", file=sys.stderr)
        return 2
    train, validation = full.period("train"), full.period("validation")
    rules = env_rules(0.0, 390, (), (spec.horizon,), market_neutral=True)
    steps = dict(FULL.steps)
    if args.steps is not None:
        steps[args.algo] = args.steps
    budget = Budget(steps=steps, num_envs=FULL.num_envs)
    extra = dict(args.set or [])
    probe = probe_observations(train, rules, args.probe_envs, 5, args.seed)
    direction = rule_direction(probe, train.num_tickers, float(edge_layout(spec, full.num_tickers).sign[0]))
    evaluator = market_evaluator(validation, rules)
    print(f"{args.algo} seed {args.seed}: {budget.steps[args.algo]} transitions, overrides {extra}", flush=True)
    rows: list[dict[str, float]] = []
    start = time.perf_counter()
    iteration = 0  # runner iterations so far

    def trace(agent: Any, metrics: dict[str, float], done: int) -> None:
        nonlocal iteration
        iteration += 1
        last = done >= budget.steps[args.algo]
        if iteration % args.every and not last:
            return
        row = {"iteration": iteration, "steps": done, "seconds": round(time.perf_counter() - start, 1)}
        row.update(trace_row(agent, probe, direction))
        row.update({k: v for k, v in metrics.items() if k in agent.metric_names})
        if last or (args.validate_every and (len(rows) + 1) % args.validate_every == 0):
            row["val_sharpe"] = evaluator.evaluate(agent)["sharpe"]
        rows.append(row)
        print(
            "  " + "  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True
        )

    train_agent(
        args.algo,
        train,
        rules,
        budget,
        args.seed,
        torch.device("cpu"),
        replay_ratio=REPLAY_RATIO,
        extra=extra,
        on_iteration=trace,
    )
    frame = pd.DataFrame(rows)
    if args.out:
        frame.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
