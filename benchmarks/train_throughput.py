"""PPO training throughput on the market env: ours against Stable-Baselines3 PPO.

One run prints one table of training samples/s: environment transitions collected
*and learned from* per second of the whole training loop (env stepping, policy
forward passes, GAE, the minibatch updates), on a synthetic market of N stocks
(default 30, one month of minute bars, `EnvConfig()` defaults: shares mode, costs
0.1%).

Equal work, stated in the table. Both learners use:

- the same networks: actor and critic MLPs 64x64 (tanh), a Gaussian policy with a
  state-independent log-std, orthogonal initialisation;
- the same rollout per update: ``--rollout`` rows (envs x steps per env; SB3: 8 envs
  x rollout/8 steps, ours: E envs x rollout/E steps);
- the same minibatch size and epochs, hence the same gradient steps per sample
  (epochs / minibatch size);
- the same loss terms: clipped surrogate (0.2), advantage normalisation, value loss
  without clipping (SB3's default ``clip_range_vf=None``), no entropy bonus, gradient
  norm clip 0.5, Adam (lr 3e-4, eps 1e-5), gamma 0.99, GAE lambda 0.95; no observation
  normalisation (SB3 without VecNormalize; ours with ``normalize_obs=False``).

SB3 runs ``DummyVecEnv`` over 8 `GymStockTradingEnv` (always on the CPU); ours runs
one `StockTradingVecEnv` with E sub-environments on ``--device``. Every minibatch size
in ``--minibatch-sizes`` is one equal-work block: SB3 and ours at every E with the
same minibatch size. Each row times ``--updates`` whole updates (``model.learn`` for
SB3, ``PPORunner.iteration()`` for ours) after one warm-up update; the figure is the
median over the timed updates. The phase columns split our time into env stepping
(`env.step`), the rest of collection (policy and value forward passes, storage,
GAE) and the update (`PPOAgent.update`). Samples per CPU-second (this process's
``time.process_time``) are given beside wall-clock samples/s: on a shared machine
they vary much less from run to run.

    OMP_NUM_THREADS=1 python benchmarks/train_throughput.py
    OMP_NUM_THREADS=1 python benchmarks/train_throughput.py --quick       # a tiny run
    OMP_NUM_THREADS=1 python benchmarks/train_throughput.py --grad-step   # one minibatch update only
    python benchmarks/train_throughput.py --device cuda --envs 4096,16384 --out ppo_cuda.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from market_envs.data.panel import MarketData
from market_envs.env import StockTradingVecEnv
from trader.agents import get_spec, make_agent, make_config
from trader.errors import ConfigError

HIDDEN = (64, 64)
SB3_ENVS = 8


@dataclass(frozen=True)
class Work:
    """The terms every learner shares in one equal-work block."""

    rollout: int
    """Rows per update: envs x steps per env."""
    minibatch_size: int
    """Rows per gradient step."""
    epochs: int
    """Passes over each rollout."""

    @property
    def grad_steps_per_1k_samples(self) -> float:
        """Gradient steps per 1000 samples collected: 1000 x epochs / minibatch size."""
        return 1000.0 * self.epochs / self.minibatch_size


@dataclass
class Row:
    """One measured learner: settings and samples/s."""

    learner: str
    device: str
    envs: int
    steps_per_env: int
    work: Work
    samples_per_s: list[float]
    samples_per_cpu_s: list[float]
    """Samples per second of this process's CPU time: steadier on a shared machine."""
    phases: dict[str, float] = field(default_factory=dict)
    """Our learner only: seconds per update in env.step / other collection / update."""

    @property
    def median(self) -> float:
        return statistics.median(self.samples_per_s)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.samples_per_cpu_s)


# --------------------------------------------------------------------- machine


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "load_average_1min": round(load[0], 2),
    }


def market(n_tickers: int, start: str, end: str, seed: int) -> MarketData:
    """The synthetic panel every learner trains on."""
    from market_envs.data.synthetic import synthetic

    return synthetic(n_tickers, start=start, end=end, seed=seed, name="synthetic-throughput")


# --------------------------------------------------------------------- our PPO


def ppo_overrides(work: Work, envs: int) -> dict[str, Any]:
    """Our PPOConfig for an equal-work block (see the module docstring)."""
    return {
        "num_steps": work.rollout // envs,
        "num_minibatches": work.rollout // work.minibatch_size,
        "update_epochs": work.epochs,
        "hidden_sizes": HIDDEN,
        "learning_rate": 3e-4,
        "adam_eps": 1e-5,
        "clip_coef": 0.2,
        "clip_vloss": False,
        "norm_adv": True,
        "ent_coef": 0.0,
        "vf_coef": 0.5,
        "max_grad_norm": 0.5,
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "normalize_obs": False,
    }


class _Timed:
    """Wraps a callable and accumulates the seconds spent in it."""

    def __init__(self, fn: Callable[..., Any], sync: Callable[[], None]) -> None:
        self.fn, self.sync, self.seconds = fn, sync, 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = self.fn(*args, **kwargs)
        self.sync()
        self.seconds += time.perf_counter() - start
        return out


def measure_ours(data: MarketData, envs: int, work: Work, updates: int, device: torch.device, seed: int) -> Row:
    """Our PPO: ``updates`` timed runner iterations after one warm-up iteration."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    env = StockTradingVecEnv(data, envs, device)
    config = make_config("ppo", ppo_overrides(work, envs))
    agent = make_agent("ppo", env.obs_dim, env.act_dim, config, device=device, seed=seed)
    runner = get_spec("ppo").runner_cls(agent, env)
    step_timer = _Timed(env.step, sync)
    update_timer = _Timed(agent.update, sync)
    env.step = step_timer  # type: ignore[method-assign]  # instance attributes, for the phase split
    agent.update = update_timer  # type: ignore[method-assign]
    runner.iteration()  # warm-up: allocator, first-call overheads
    sync()
    step_timer.seconds = update_timer.seconds = 0.0
    rates, cpu_rates, total = [], [], 0.0
    for _ in range(updates):
        start, cpu_start = time.perf_counter(), time.process_time()
        metrics = runner.iteration()
        sync()
        elapsed = time.perf_counter() - start
        total += elapsed
        rates.append(metrics["env_steps"] / elapsed)
        cpu_rates.append(metrics["env_steps"] / (time.process_time() - cpu_start))
    phases = {
        "env_step_s": step_timer.seconds / updates,
        "collect_other_s": (total - step_timer.seconds - update_timer.seconds) / updates,
        "update_s": update_timer.seconds / updates,
    }
    return Row("ours", str(device), envs, work.rollout // envs, work, rates, cpu_rates, phases)


def grad_step_times(
    obs_dim: int, act_dim: int, minibatch_size: int, device: torch.device, repeats: int = 5, steps: int = 100
) -> dict[str, float]:
    """Median wall and CPU milliseconds of one PPO minibatch update (loss, backward, clip, Adam).

    CPU time (``time.process_time``) is steadier than wall time on a shared machine.
    Used to measure changes to the update alone (``--grad-step``).
    """
    from trader.agents.ppo import minibatch_step
    from trader.agents.rollout import RolloutBatch

    rows = 16 * minibatch_size
    generator = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(device)

    batch = RolloutBatch(
        obs=randn(rows, obs_dim),
        actions=randn(rows, act_dim),
        logprobs=randn(rows),
        values=randn(rows),
        advantages=randn(rows),
        returns=randn(rows),
    )
    agent = make_agent(
        "ppo", obs_dim, act_dim, make_config("ppo", ppo_overrides(Work(rows, minibatch_size, 1), 1)), device=device
    )
    step = minibatch_step(batch)
    indices = torch.randperm(rows, generator=generator)[:minibatch_size].to(device)
    for _ in range(10):
        step(agent, indices)
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            step(agent, indices)
        if device.type == "cuda":
            torch.cuda.synchronize()
        wall.append(1e3 * (time.perf_counter() - w0) / steps)
        cpu.append(1e3 * (time.process_time() - c0) / steps)
    return {"wall_ms": statistics.median(wall), "cpu_ms": statistics.median(cpu)}


# --------------------------------------------------------------------- SB3 PPO


def measure_sb3(data: MarketData, work: Work, updates: int, seed: int) -> Row:
    """SB3 PPO on 8 DummyVecEnv copies of the single-env adapter (CPU)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from market_envs.gym_adapter import GymStockTradingEnv

    vec_env = DummyVecEnv([lambda: GymStockTradingEnv(data) for _ in range(SB3_ENVS)])
    model = PPO(
        "MlpPolicy",
        vec_env,
        learning_rate=3e-4,
        n_steps=work.rollout // SB3_ENVS,
        batch_size=work.minibatch_size,
        n_epochs=work.epochs,
        gamma=0.99,
        gae_lambda=0.95,
        clip_range=0.2,
        clip_range_vf=None,
        normalize_advantage=True,
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=0.5,
        policy_kwargs={"net_arch": {"pi": list(HIDDEN), "vf": list(HIDDEN)}, "activation_fn": torch.nn.Tanh},
        seed=seed,
        device="cpu",
        verbose=0,
    )
    model.learn(work.rollout)  # warm-up update
    rates, cpu_rates = [], []
    for _ in range(updates):
        start, cpu_start = time.perf_counter(), time.process_time()
        model.learn(work.rollout, reset_num_timesteps=False)
        rates.append(work.rollout / (time.perf_counter() - start))
        cpu_rates.append(work.rollout / (time.process_time() - cpu_start))
    vec_env.close()
    return Row("sb3", "cpu", SB3_ENVS, work.rollout // SB3_ENVS, work, rates, cpu_rates)


# --------------------------------------------------------------------- table


def table(rows: list[Row], info: dict[str, Any]) -> str:
    """Markdown table; the ratio is against SB3 in the same equal-work block."""
    lines = [
        f"PPO training throughput, market env N={info['n_tickers']} ({info['bars']} bars), "
        f"machine: {info['machine']['platform']}, {info['machine']['processor']}, "
        f"{info['machine']['cpu_count']} cores, torch {info['machine']['torch']} "
        f"({info['machine']['torch_threads']} thread), load average {info['machine']['load_average_1min']} "
        f"at start, {info['load_average_end']} at end",
        "",
        "| learner | device | envs x steps | rollout | minibatch | epochs | grad steps / 1k samples "
        "| samples/s (median) | x SB3 | samples/CPU-s | x SB3 (CPU) | env.step s | other collect s | update s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    sb3 = {row.work: row for row in rows if row.learner == "sb3"}
    for row in rows:
        ratio = row.median / sb3[row.work].median if row.work in sb3 else float("nan")
        cpu_ratio = row.cpu_median / sb3[row.work].cpu_median if row.work in sb3 else float("nan")
        phases = [f"{row.phases[k]:.2f}" if row.phases else "-" for k in ("env_step_s", "collect_other_s", "update_s")]
        lines.append(
            f"| {row.learner} | {row.device} | {row.envs} x {row.steps_per_env} | {row.work.rollout} "
            f"| {row.work.minibatch_size} | {row.work.epochs} | {row.work.grad_steps_per_1k_samples:.1f} "
            f"| {row.median:,.0f} | {ratio:.1f} | {row.cpu_median:,.0f} | {cpu_ratio:.1f} | "
            + " | ".join(phases)
            + " |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="device of our env and agent (SB3 stays on the CPU)")
    parser.add_argument("--envs", default="8,1024,4096", help="our sub-environment counts E, comma-separated")
    parser.add_argument("--rollout", type=int, default=16384, help="rows per update (envs x steps), for all learners")
    parser.add_argument("--minibatch-sizes", default="64,2048", help="one equal-work block per minibatch size")
    parser.add_argument("--epochs", type=int, default=10, help="passes over each rollout")
    parser.add_argument("--updates", type=int, default=2, help="timed updates per row, after one warm-up")
    parser.add_argument("--n-tickers", type=int, default=30, help="stocks N")
    parser.add_argument("--start", default="2023-01-03", help="first session of the synthetic panel")
    parser.add_argument("--end", default="2023-02-01", help="end (exclusive) of the synthetic panel")
    parser.add_argument("--seed", type=int, default=0, help="data and agent seed")
    parser.add_argument("--no-sb3", action="store_true", help="skip SB3 (e.g. on a GPU machine without it)")
    parser.add_argument("--quick", action="store_true", help="tiny run: E in {8, 64}, rollout 512, 1 update")
    parser.add_argument(
        "--grad-step", action="store_true", help="only time one PPO minibatch update per minibatch size"
    )
    parser.add_argument("--out", default=None, help="also write the rows and the machine as JSON here")
    args = parser.parse_args(argv)
    if args.quick:
        args.envs, args.rollout, args.minibatch_sizes, args.updates = "8,64", 512, "64", 1
        args.end, args.epochs = "2023-01-10", 2
    return args


def blocks(args: argparse.Namespace) -> tuple[list[int], list[Work]]:
    """Parse and check the E values and the equal-work blocks."""
    envs = [int(e) for e in args.envs.split(",")]
    works = [Work(args.rollout, int(m), args.epochs) for m in args.minibatch_sizes.split(",")]
    for e in [*envs, SB3_ENVS]:
        if e <= 0 or args.rollout % e:
            raise ConfigError(f"--rollout {args.rollout} must be a positive multiple of every env count (got {e})")
    for work in works:
        if work.minibatch_size <= 0 or args.rollout % work.minibatch_size:
            raise ConfigError(f"--rollout {args.rollout} must be a multiple of minibatch size {work.minibatch_size}")
    return envs, works


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {args.device}: CUDA is not available here")
    env_counts, works = blocks(args)
    if args.grad_step:
        obs_dim = 1 + args.n_tickers * 14  # cash + positions + 13 features per stock
        for work in works:
            times = grad_step_times(obs_dim, args.n_tickers, work.minibatch_size, device)
            print(
                f"PPO grad step, obs {obs_dim}, minibatch {work.minibatch_size}, {device}: "
                f"{times['wall_ms']:.3f} ms wall, {times['cpu_ms']:.3f} ms CPU (median of 5 x 100)"
            )
        print(f"machine: {json.dumps(machine())}")
        return 0
    info: dict[str, Any] = {"machine": machine(), "n_tickers": args.n_tickers}
    data = market(args.n_tickers, args.start, args.end, args.seed)
    info["bars"] = data.num_bars
    rows: list[Row] = []
    for work in works:
        if not args.no_sb3:
            rows.append(measure_sb3(data, work, args.updates, args.seed))
            print(f"  sb3  minibatch {work.minibatch_size}: {rows[-1].median:,.0f} samples/s", flush=True)
        for envs in env_counts:
            rows.append(measure_ours(data, envs, work, args.updates, device, args.seed))
            print(f"  ours E={envs} minibatch {work.minibatch_size}: {rows[-1].median:,.0f} samples/s", flush=True)
    info["load_average_end"] = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    print()
    print(table(rows, info))
    if args.out:
        payload = {
            **info,
            "rows": [
                {
                    "learner": r.learner,
                    "device": r.device,
                    "envs": r.envs,
                    "steps_per_env": r.steps_per_env,
                    "rollout": r.work.rollout,
                    "minibatch_size": r.work.minibatch_size,
                    "epochs": r.work.epochs,
                    "samples_per_s": r.samples_per_s,
                    "median_samples_per_s": r.median,
                    "samples_per_cpu_s": r.samples_per_cpu_s,
                    "median_samples_per_cpu_s": r.cpu_median,
                    "phases": r.phases,
                }
                for r in rows
            ],
        }
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
