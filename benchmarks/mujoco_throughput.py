"""Env-steps per second of MuJoCo envs behind `GymVecEnv`: sync against async workers.

For each env id and E sub-environments, `GymVecEnv` with ``vectorization="sync"``
(one process, gymnasium's `SyncVectorEnv`) and ``"async"`` (one worker process per
env, `AsyncVectorEnv`), beside one plain ``gymnasium.make`` env stepped in a loop.
Actions are random in [-1, 1], drawn before the clock starts; autoresets happen
during the timing. Each figure is the median of ``--repeats`` runs of about
``--seconds``. The CPU column is this process's CPU seconds per env step (async
workers' CPU is not in it: it shows what the main process is left with).

    OMP_NUM_THREADS=1 python benchmarks/mujoco_throughput.py
    OMP_NUM_THREADS=1 python benchmarks/mujoco_throughput.py --envs Humanoid-v5 --sizes 1,4,16
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from market_envs.gym_vec import GymVecEnv

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the checkout's root, for benchmarks.
from benchmarks.sac_time_to_score import machine  # noqa: E402


def timed(step, seconds: float, repeats: int) -> tuple[float, float]:
    """Median steps/s and median process-CPU ms per call of ``step`` over ``repeats`` runs."""
    rates, cpu = [], []
    for _ in range(repeats):
        count, start, start_cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            step(count)
            count += 1
        rates.append(count / (time.perf_counter() - start))
        cpu.append(1e3 * (time.process_time() - start_cpu) / count)
    return statistics.median(rates), statistics.median(cpu)


def plain_rate(env_id: str, seconds: float, repeats: int) -> tuple[float, float]:
    """One ``gymnasium.make`` env stepped in a Python loop, reset when an episode ends."""
    env = gym.make(env_id)
    env.reset(seed=0)
    actions = np.random.default_rng(0).uniform(-1, 1, (1000, *env.action_space.shape))
    actions = actions.astype(env.action_space.dtype)

    def step(count: int) -> None:
        _, _, terminated, truncated, _ = env.step(actions[count % 1000])
        if terminated or truncated:
            env.reset()

    rate = timed(step, seconds, repeats)
    env.close()
    return rate


def vec_rate(env_id: str, num_envs: int, mode: str, seconds: float, repeats: int) -> tuple[float, float]:
    """`GymVecEnv` steps/s times E (transitions per second) and CPU ms per transition."""
    env = GymVecEnv(env_id, num_envs, seed=0, vectorization=mode)
    env.reset()
    generator = torch.Generator().manual_seed(0)
    actions = torch.rand(100, num_envs, env.act_dim, generator=generator) * 2 - 1
    for index in range(5):  # warm-up (async workers start their loops)
        env.step(actions[index])
    rate, cpu = timed(lambda count: env.step(actions[count % 100]), seconds, repeats)
    env.close()
    return rate * num_envs, cpu / num_envs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="Ant-v5", help="comma-separated gymnasium ids")
    parser.add_argument("--sizes", default="1,2,4,8,16", help="comma-separated E values")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"{machine()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(
        "| env | E | plain gymnasium (steps/s) | sync (steps/s) | async (steps/s) | async / sync "
        "| main-process CPU ms per step: sync / async |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    for env_id in args.envs.split(","):
        plain, _ = plain_rate(env_id, args.seconds, args.repeats)
        for num_envs in (int(size) for size in args.sizes.split(",")):
            sync, sync_cpu = vec_rate(env_id, num_envs, "sync", args.seconds, args.repeats)
            asyn, async_cpu = vec_rate(env_id, num_envs, "async", args.seconds, args.repeats)
            print(
                f"| {env_id} | {num_envs} | {plain:,.0f} | {sync:,.0f} | {asyn:,.0f} | "
                f"{asyn / sync:.2f} | {sync_cpu:.3f} / {async_cpu:.3f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
