"""SAC and TD3 on Pendulum-v1 against Stable-Baselines3 SAC: steps and wall-clock to a score.

Every learner does equal work: one env (SB3: a plain gymnasium env, ours: a
`GymVecEnv` with E=1), 256x256 networks for actor and critics, batch 256, one
gradient update per env step after the same ``learning_starts`` random steps, the
same learning rate (also for SAC's temperature), gamma 0.99 and tau 0.005.

Every ``--eval-every`` env steps the deterministic policy is scored on
``--eval-episodes`` fresh Pendulum episodes (fixed seeds, the same for every
learner); the time spent evaluating is not counted. A run stops once it scores
>= -200 or after ``--max-steps``. The table shows, per learner, the median over
seeds of the env steps and wall-clock seconds at which the score first reached
-250 and -200 ("-" where the median run never did), and the ratio of our SAC and
TD3 to SB3 SAC (below 1 means faster). "cpu s" is the process's CPU time over the
same span: on a machine shared with other jobs it is steadier than wall-clock.

    OMP_NUM_THREADS=1 python benchmarks/pendulum_learning.py            # 3 seeds, 20k steps
    OMP_NUM_THREADS=1 python benchmarks/pendulum_learning.py --quick    # 1 seed, 2k steps
"""

from __future__ import annotations

from typing import Any

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from market_envs.gym_vec import GymVecEnv
from trader.agents import get_spec, make_agent, make_config

ENV_ID = "Pendulum-v1"
THRESHOLDS = (-250.0, -200.0)
LEARNERS = ("sac", "td3", "sb3-sac")
Policy = Callable[[torch.Tensor], torch.Tensor]
"""Raw observations [B, 3] -> deterministic actions in [-1, 1]."""


def evaluate(policy: Policy, episodes: int, seed: int = 10_000) -> float:
    """Mean return of ``policy`` over ``episodes`` Pendulum episodes run side by side."""
    env = GymVecEnv(ENV_ID, episodes, seed=seed)
    obs, _ = env.reset(seed=seed)
    total = torch.zeros(episodes)
    done = torch.zeros(episodes, dtype=torch.bool)
    while not bool(done.all()):
        obs, reward, terminated, truncated, _ = env.step(policy(obs))
        total += torch.where(done, 0.0, reward)
        done |= terminated | truncated
    env.close()
    return total.mean().item()


class OursLearner:
    """Our SAC or TD3 through the registry: agent + off-policy runner on a GymVecEnv."""

    def __init__(self, algo: str, seed: int, args: argparse.Namespace) -> None:
        overrides = {
            "hidden_sizes": (256, 256),
            "batch_size": 256,
            "actor_lr": args.lr,
            "critic_lr": args.lr,
            "learning_starts": args.learning_starts,
            "updates_per_step": 1.0,
            "iteration_steps": args.eval_every,
            "gamma": 0.99,
            "tau": 0.005,
        }
        if algo == "sac":
            overrides["alpha_lr"] = args.lr
        env = GymVecEnv(ENV_ID, 1, seed=seed)
        config = make_config(algo, overrides)
        self.agent = make_agent(algo, env.obs_dim, env.act_dim, config, seed=seed)
        self.runner = get_spec(algo).runner_cls(self.agent, env)

    def train(self, steps: int) -> None:
        target = self.runner.env_steps + steps
        while self.runner.env_steps < target:
            self.runner.iteration()

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.agent.act(obs, deterministic=True)


class SB3Driver:
    """Trains and queries an SB3 model (`model`, action bound `high`, set by subclasses)."""

    model: Any
    high: float
    first: bool = True

    def train(self, steps: int) -> None:
        self.model.learn(steps, reset_num_timesteps=self.first)
        self.first = False

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        actions, _ = self.model.predict(obs.numpy(), deterministic=True)
        return torch.as_tensor(np.asarray(actions) / self.high, dtype=torch.float32)


class SB3Learner(SB3Driver):
    """Stable-Baselines3 SAC with the same network size, batch and update ratio."""

    def __init__(self, seed: int, args: argparse.Namespace) -> None:
        import gymnasium as gym
        from stable_baselines3 import SAC

        env = gym.make(ENV_ID)
        self.high = float(env.action_space.high[0])
        self.model = SAC(
            "MlpPolicy",
            env,
            learning_rate=args.lr,
            buffer_size=1_000_000,
            learning_starts=args.learning_starts,
            batch_size=256,
            tau=0.005,
            gamma=0.99,
            train_freq=1,
            gradient_steps=1,
            policy_kwargs={"net_arch": [256, 256]},
            seed=seed,
            device="cpu",
            verbose=0,
        )


def run_one(learner_name: str, seed: int, args: argparse.Namespace) -> dict:
    """Train one learner until -200 or ``max_steps``; record when each threshold was met."""
    torch.manual_seed(seed)  # SB3 seeds itself; ours uses the agent's own generator
    if learner_name == "sb3-sac":
        learner: OursLearner | SB3Learner = SB3Learner(seed, args)
    else:
        learner = OursLearner(learner_name, seed, args)
    reached: dict[float, tuple[int, float, float]] = {}
    steps, wall, cpu, score = 0, 0.0, 0.0, -math.inf
    curve = []
    while steps < args.max_steps and len(reached) < len(THRESHOLDS):
        start, start_cpu = time.perf_counter(), time.process_time()
        learner.train(args.eval_every)
        wall += time.perf_counter() - start
        cpu += time.process_time() - start_cpu
        steps += args.eval_every
        with torch.no_grad():
            score = evaluate(learner.policy, args.eval_episodes)
        curve.append((steps, round(wall, 2), round(cpu, 2), round(score, 1)))
        for threshold in THRESHOLDS:
            if score >= threshold and threshold not in reached:
                reached[threshold] = (steps, wall, cpu)
    result = {
        "learner": learner_name,
        "seed": seed,
        "final_score": score,
        "steps": steps,
        "wall_s": wall,
        "cpu_s": cpu,
        "ms_per_step": 1e3 * wall / steps,
        "cpu_ms_per_step": 1e3 * cpu / steps,
        "curve": curve,
    }
    for threshold in THRESHOLDS:
        step_at, wall_at, cpu_at = reached.get(threshold, (math.inf, math.inf, math.inf))
        result[f"steps_to_{int(-threshold)}"] = step_at
        result[f"wall_to_{int(-threshold)}"] = wall_at
        result[f"cpu_to_{int(-threshold)}"] = cpu_at
    print(
        f"  {learner_name:8s} seed {seed}: score {score:7.1f} at {steps} steps, "
        f"{wall:6.1f} s wall, {cpu:6.1f} s cpu ({result['ms_per_step']:.1f} ms/step); "
        + ", ".join(f"{k}={v:.1f}" for k, v in result.items() if k.startswith(("steps_to", "wall_to"))),
        flush=True,
    )
    return result


def median(values: list[float]) -> float:
    return statistics.median(values)  # inf where most runs never reached the score


def table(results: list[dict], learners: list[str]) -> str:
    """Markdown table of medians over seeds, with ratios to SB3 SAC."""
    keys = [f"{kind}_to_{int(-t)}" for t in THRESHOLDS for kind in ("steps", "wall", "cpu")]
    medians = {
        name: {key: median([r[key] for r in results if r["learner"] == name]) for key in keys} for name in learners
    }
    rates = ("ms_per_step", "cpu_ms_per_step")
    for name in learners:
        for rate in rates:
            medians[name][rate] = median([r[rate] for r in results if r["learner"] == name])
    unit = {"steps": "steps", "wall": "wall s", "cpu": "cpu s"}
    head = "| learner | " + " | ".join(f"{unit[k.split('_', 1)[0]]} to -{k.rsplit('_', 1)[1]}" for k in keys)
    lines = [head + " | ms/step | cpu ms/step |", "|" + "---|" * (len(keys) + 3)]

    def fmt(value: float, digits: int) -> str:
        return "-" if math.isinf(value) else f"{value:.{digits}f}"

    for name in learners:
        cells = [fmt(medians[name][k], 0 if k.startswith("steps") else 1) for k in keys]
        cells += [f"{medians[name][rate]:.1f}" for rate in rates]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if "sb3-sac" in learners:
        for name in (n for n in learners if n != "sb3-sac"):
            ratios = []
            for key in [*keys, *rates]:
                ours, theirs = medians[name][key], medians["sb3-sac"][key]
                ratio = ours / theirs if math.isfinite(ours) and math.isfinite(theirs) else math.inf
                ratios.append(fmt(ratio, 2))
            lines.append(f"| {name} / sb3-sac | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    full = {"seeds": 3, "max_steps": 20_000, "learning_starts": 1_000}
    quick = {"seeds": 1, "max_steps": 2_000, "learning_starts": 500}
    parser.add_argument("--seeds", type=int, help="seeds 0..N-1 per learner (3)")
    parser.add_argument("--max-steps", type=int, help="env steps per run at most (20000)")
    parser.add_argument("--eval-every", type=int, default=1_000, help="env steps between scores")
    parser.add_argument("--eval-episodes", type=int, default=10, help="episodes per score")
    parser.add_argument("--learning-starts", type=int, help="random steps first (1000)")
    parser.add_argument("--lr", type=float, default=1e-3, help="learning rate of every optimiser")
    parser.add_argument("--learners", nargs="+", default=list(LEARNERS), choices=LEARNERS)
    parser.add_argument("--json", type=Path, default=None, help="also write all runs here")
    parser.add_argument("--quick", action="store_true", help="defaults of 1 seed, 2k steps, 500 random steps")
    args = parser.parse_args(argv)
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def write_json(results: list[dict], path: Path) -> None:
    """The per-run results as JSON, for later tables."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    print(
        f"{ENV_ID}: {args.seeds} seeds, <= {args.max_steps} steps, score every "
        f"{args.eval_every} steps on {args.eval_episodes} episodes; 256x256, batch 256, "
        f"1 update/step, lr {args.lr}, learning_starts {args.learning_starts}",
        flush=True,
    )
    results = [run_one(name, seed, args) for name in args.learners for seed in range(args.seeds)]
    print()
    print(table(results, args.learners))
    if args.json is not None:
        write_json(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
