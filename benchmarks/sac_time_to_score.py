"""Equal learning on Pendulum-v1: wall-clock and CPU time of SAC to a score of -200.

`pendulum_learning.py` compares EQUAL WORK (same 256x256 networks, batch 256, one
update per env step). This script compares EQUAL LEARNING: each learner runs with
its own configuration and the clock stops when the score first reaches -200.

Learners:

- ``ours:<name>``: our SAC (agent + `OffPolicyRunner` on a `GymVecEnv`) with one of
  the named configurations in `CONFIGS` (the one we chose, `CHOSEN`, and the
  runner-ups we tried while searching).
- ``sb3-default``: Stable-Baselines3 SAC at its default hyperparameters (what a user
  gets: 256x256, batch 256, lr 3e-4, learning_starts 100, one update per env step,
  auto temperature), on one plain gymnasium env.
- ``sb3-chosen``: SB3 SAC given our chosen configuration where SB3 supports it
  (network width, batch size, learning rate for every optimiser, learning_starts,
  updates per env step via ``train_freq``/``gradient_steps``, number of envs via
  ``DummyVecEnv``); it has no ``torch.compile`` option.

The score is judged the same way for every learner: every ``--eval-every`` env steps
(transitions summed over the sub-environments) the deterministic policy plays
``--eval-episodes`` fresh Pendulum episodes with fixed seeds (the same episodes for
every learner, `pendulum_learning.evaluate`); neither the time spent evaluating nor
the time to build the learner (in a process's first run, mostly library imports) is
counted; ``torch.compile`` happens in the first updates and is counted. A run stops at the first score >= -200
or after ``--max-steps``. The table gives, per learner, the median over seeds of env
steps, wall-clock seconds and CPU seconds (``time.process_time``: steadier than
wall-clock on a shared machine) to -200 ("-" where the median run never got there),
and the ratios of our chosen SAC to each SB3 learner (below 1 means faster).

    OMP_NUM_THREADS=1 python benchmarks/sac_time_to_score.py             # 3 seeds
    OMP_NUM_THREADS=1 python benchmarks/sac_time_to_score.py --quick     # 1 seed
    OMP_NUM_THREADS=1 python benchmarks/sac_time_to_score.py --learners ours:chosen \\
        ours:w128 --seeds 1                                              # the search
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from market_envs.gym_vec import GymVecEnv
from trader.agents import get_spec, make_agent, make_config
from trader.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the checkout's root, for benchmarks.
from benchmarks.pendulum_learning import ENV_ID, SB3Driver, evaluate, write_json  # noqa: E402  (same scoring as that benchmark)

THRESHOLD = -200.0
Policy = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class SACSetup:
    """One configuration of our SAC for the time-to-score search."""

    hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden widths of the actor and of each critic."""
    batch_size: int = 256
    """Transitions per gradient update."""
    updates_per_step: float = 1.0
    """Gradient updates per collected transition."""
    num_envs: int = 1
    """Pendulum sub-environments stepped together (`GymVecEnv` num_envs)."""
    lr: float = 3e-4
    """Learning rate of the actor, the critics and the temperature."""
    learning_starts: int = 1_000
    """Transitions collected with uniform random actions before learning starts."""
    compile: bool = False
    """``torch.compile`` the networks' forward passes (compile time is counted)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Further `SACConfig` overrides (e.g. ``tau``)."""

    def overrides(self, iteration_steps: int) -> dict[str, Any]:
        """`SACConfig` overrides of this setup."""
        return {
            "hidden_sizes": self.hidden_sizes,
            "batch_size": self.batch_size,
            "updates_per_step": self.updates_per_step,
            "actor_lr": self.lr,
            "critic_lr": self.lr,
            "alpha_lr": self.lr,
            "learning_starts": self.learning_starts,
            "iteration_steps": iteration_steps,
            **self.extra,
        }


CONFIGS: dict[str, SACSetup] = {
    "equal-work": SACSetup(lr=1e-3),
    "w64-b64-lr1e-3": SACSetup((64, 64), 64, lr=1e-3),
    "w64-b64-lr3e-3": SACSetup((64, 64), 64, lr=3e-3),
    "w64-b128-lr1e-3": SACSetup((64, 64), 128, lr=1e-3),
    "w128-b128-lr1e-3": SACSetup((128, 128), 128, lr=1e-3),
    "w64-b64-lr1e-3-ls500": SACSetup((64, 64), 64, lr=1e-3, learning_starts=500),
    "w64-b64-lr1e-3-e4-u0.5": SACSetup((64, 64), 64, 0.5, num_envs=4, lr=1e-3),
    "w32-b64-lr3e-3": SACSetup((32, 32), 64, lr=3e-3),
    "w64-b64-lr3e-3-ls500": SACSetup((64, 64), 64, lr=3e-3, learning_starts=500),
    "w64-b64-lr3e-3-e4-u0.5": SACSetup((64, 64), 64, 0.5, num_envs=4, lr=3e-3),
    "w64-b64-lr3e-3-e10-u0.2": SACSetup((64, 64), 64, 0.2, num_envs=10, lr=3e-3),
    "w64-b64-lr3e-3-compile": SACSetup((64, 64), 64, lr=3e-3, compile=True),
}
"""Every configuration tried while searching for the fastest to -200 (names: width,
batch, learning rate, then what differs from 1 env, 1 update/step, 1000 random steps).

The search, measured with ``--quick --max-steps 10000 --learners ours:NAME`` (seed 0;
steps to -200, CPU s to -200) on the 2-core AMD EPYC shared with other jobs:
equal-work 3500, 34.4; w64-b64-lr1e-3 3500, 9.8; w64-b64-lr3e-3 3500, 8.3;
w64-b128-lr1e-3 4000, 10.9; w128-b128-lr1e-3 3500, 11.3; w64-b64-lr1e-3-ls500 4000, 10.8;
w64-b64-lr1e-3-e4-u0.5 7000, 9.0; w32-b64-lr3e-3 5500, 13.8; w64-b64-lr3e-3-ls500 5000, 18.4;
w64-b64-lr3e-3-e4-u0.5 7000, 10.6; w64-b64-lr3e-3-e10-u0.2 not within 10000 (7.1 s spent);
w64-b64-lr3e-3-compile 3500, 17.2 CPU s but 42.8 wall s (compilation runs in worker
processes that ``process_time`` does not count). Then 3 seeds (``--seeds 3 --max-steps
15000``), medians: w64-b64-lr3e-3 3500, 10.8; w64-b64-lr1e-3-e4-u0.5 7000, 11.3;
w64-b64-lr1e-3 4000, 12.5. (The search's figures still counted building the learner: about
1.5 s of imports in the first run of each command, i.e. for the first name listed.)
"""
CHOSEN = "w64-b64-lr3e-3"
"""The configuration ``ours:chosen`` and ``sb3-chosen`` run."""


class OursLearner:
    """Our SAC with a `SACSetup`: agent + off-policy runner on a `GymVecEnv`."""

    def __init__(self, setup: SACSetup, seed: int, eval_every: int) -> None:
        env = GymVecEnv(ENV_ID, setup.num_envs, seed=seed)
        config = make_config("sac", setup.overrides(eval_every))
        self.agent = make_agent("sac", env.obs_dim, env.act_dim, config, seed=seed)
        if setup.compile:
            self.agent.compile()
        self.runner = get_spec("sac").runner_cls(self.agent, env)

    def train(self, steps: int) -> None:
        target = self.runner.env_steps + steps
        while self.runner.env_steps < target:
            self.runner.iteration()

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.agent.act(obs, deterministic=True)


def sb3_schedule(updates_per_step: float, num_envs: int) -> tuple[int, int]:
    """SB3's ``(train_freq, gradient_steps)`` for ``updates_per_step`` per transition.

    SB3 trains every ``train_freq`` vec-env steps (each ``num_envs`` transitions) for
    ``gradient_steps`` updates; the ratio must come out exactly.
    """
    per_vec_step = updates_per_step * num_envs
    if per_vec_step >= 1:
        train_freq, gradient_steps = 1, round(per_vec_step)
    else:
        train_freq, gradient_steps = round(1 / per_vec_step), 1
    if not math.isclose(gradient_steps / train_freq, per_vec_step):
        raise ConfigError(f"SB3 cannot do {updates_per_step} updates per step with {num_envs} envs")
    return train_freq, gradient_steps


class SB3Learner(SB3Driver):
    """Stable-Baselines3 SAC, at its defaults (``setup=None``) or given a `SACSetup`."""

    def __init__(self, setup: SACSetup | None, seed: int) -> None:
        import gymnasium as gym
        from stable_baselines3 import SAC
        from stable_baselines3.common.env_util import make_vec_env

        if setup is None:
            env: Any = gym.make(ENV_ID)
            self.high = float(env.action_space.high[0])
            self.model = SAC("MlpPolicy", env, seed=seed, device="cpu", verbose=0)
        else:
            if setup.compile or setup.extra:
                raise ConfigError("SB3 SAC has no torch.compile; extra overrides are ours only")
            env = make_vec_env(ENV_ID, n_envs=setup.num_envs, seed=seed)
            self.high = float(env.action_space.high[0])
            train_freq, gradient_steps = sb3_schedule(setup.updates_per_step, setup.num_envs)
            self.model = SAC(
                "MlpPolicy",
                env,
                learning_rate=setup.lr,
                learning_starts=setup.learning_starts,
                batch_size=setup.batch_size,
                train_freq=train_freq,
                gradient_steps=gradient_steps,
                policy_kwargs={"net_arch": list(setup.hidden_sizes)},
                seed=seed,
                device="cpu",
                verbose=0,
            )


def setup_of(learner_name: str) -> SACSetup | None:
    """The `SACSetup` a learner runs with (None: SB3's defaults)."""
    if learner_name == "sb3-default":
        return None
    if learner_name == "sb3-chosen" or learner_name == "ours:chosen":
        return CONFIGS[CHOSEN]
    return CONFIGS[learner_name.removeprefix("ours:")]


def build(learner_name: str, seed: int, eval_every: int) -> OursLearner | SB3Learner:
    """The learner named ``learner_name`` (see the module docstring)."""
    setup = setup_of(learner_name)
    if learner_name.startswith("sb3"):
        return SB3Learner(setup, seed)
    assert setup is not None
    return OursLearner(setup, seed, eval_every)


def run_one(learner_name: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Train one learner until -200 or ``max_steps``; the steps and times at -200."""
    torch.manual_seed(seed)  # SB3 seeds itself; ours uses the agent's own generator
    learner = build(learner_name, seed, args.eval_every)
    steps, wall, cpu, score, curve = 0, 0.0, 0.0, -math.inf, []
    while steps < args.max_steps and score < THRESHOLD:
        start, start_cpu = time.perf_counter(), time.process_time()
        learner.train(args.eval_every)
        wall += time.perf_counter() - start
        cpu += time.process_time() - start_cpu
        steps += args.eval_every
        with torch.no_grad():
            score = evaluate(learner.policy, args.eval_episodes)
        curve.append((steps, round(wall, 2), round(cpu, 2), round(score, 1)))
    reached = score >= THRESHOLD
    result = {
        "learner": learner_name,
        "seed": seed,
        "final_score": score,
        "steps": steps,
        "wall_s": wall,
        "cpu_s": cpu,
        "steps_to": steps if reached else math.inf,
        "wall_to": wall if reached else math.inf,
        "cpu_to": cpu if reached else math.inf,
        "cpu_ms_per_step": 1e3 * cpu / steps,
        "curve": curve,
    }
    print(
        f"  {learner_name:16s} seed {seed}: score {score:7.1f} at {steps:6d} steps, "
        f"{wall:6.1f} s wall, {cpu:6.1f} s cpu ({result['cpu_ms_per_step']:.2f} cpu ms/step)",
        flush=True,
    )
    return result


def table(results: list[dict[str, Any]], learners: list[str]) -> str:
    """Markdown table of medians over seeds, and ratios of ``ours:chosen`` to SB3."""
    keys = ("steps_to", "wall_to", "cpu_to", "cpu_ms_per_step")
    medians = {
        name: {k: statistics.median(r[k] for r in results if r["learner"] == name) for k in keys} for name in learners
    }
    seeds = {name: sum(r["learner"] == name for r in results) for name in learners}

    def fmt(value: float, digits: int) -> str:
        return "-" if not math.isfinite(value) else f"{value:.{digits}f}"

    lines = [
        "| learner | seeds | steps to -200 | wall s to -200 | cpu s to -200 | cpu ms/step |",
        "|---|---|---|---|---|---|",
    ]
    for name in learners:
        m = medians[name]
        lines.append(
            f"| {name} | {seeds[name]} | {fmt(m['steps_to'], 0)} | {fmt(m['wall_to'], 1)} | "
            f"{fmt(m['cpu_to'], 1)} | {m['cpu_ms_per_step']:.2f} |"
        )
    ours = "ours:chosen"
    for theirs in (n for n in ("sb3-default", "sb3-chosen") if n in learners):
        if ours not in learners:
            break
        cells = []
        for key in keys:
            a, b = medians[ours][key], medians[theirs][key]
            cells.append(fmt(a / b, 2) if math.isfinite(a) and math.isfinite(b) else "-")
        lines.append(f"| {ours} / {theirs} | | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def describe(name: str) -> str:
    """One line naming a learner's configuration."""
    setup = setup_of(name)
    if setup is None:
        return f"{name}: SB3 SAC defaults (256x256, batch 256, lr 3e-4, learning_starts 100, 1 update/step)"
    fields = {k: v for k, v in asdict(setup).items() if k != "extra" or v}
    return f"{name}: " + ", ".join(f"{k}={v}" for k, v in fields.items())


def machine() -> str:
    """The CPU model (from /proc/cpuinfo where there is one) and its core count."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} cores"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    choices = ["ours:chosen", "sb3-default", "sb3-chosen", *(f"ours:{n}" for n in CONFIGS)]
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per learner (3)")
    parser.add_argument("--max-steps", type=int, default=20_000, help="env steps per run at most")
    parser.add_argument("--eval-every", type=int, default=500, help="env steps between scores")
    parser.add_argument("--eval-episodes", type=int, default=10, help="episodes per score")
    parser.add_argument(
        "--learners",
        nargs="+",
        default=["ours:chosen", "sb3-default", "sb3-chosen"],
        choices=choices,
    )
    parser.add_argument("--json", type=Path, default=None, help="also write all runs here")
    parser.add_argument("--quick", action="store_true", help="1 seed (the search used this)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds = 1
    for name in args.learners:
        setup = setup_of(name)
        if setup is not None and args.eval_every % setup.num_envs:
            raise ConfigError(
                f"--eval-every {args.eval_every} is not a multiple of the {setup.num_envs} envs of {name}"
            )
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    print(
        f"{ENV_ID}, time to {THRESHOLD:.0f}: {args.seeds} seeds, <= {args.max_steps} env steps, "
        f"deterministic score every {args.eval_every} env steps on {args.eval_episodes} "
        f"episodes (evaluation not timed)\nmachine: {machine()}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} thread",
        flush=True,
    )
    for name in args.learners:
        print("  " + describe(name))
    results = [run_one(name, seed, args) for name in args.learners for seed in range(args.seeds)]
    print()
    print(table(results, args.learners))
    if args.json is not None:
        write_json(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
