"""Env steps per second of Ant and Humanoid on the device (MuJoCo Warp) against `GymVecEnv` (MuJoCo C).

For each env id, `WarpMujocoEnv` steps N robots as one batch (``--sizes``; on CUDA
1,024 to 65,536, on the CPU a few, through warp's CPU device) and `GymVecEnv` steps E
sub-environments one after another in this process (``--gym-envs``, sync), in the same
run, so the ratio compares the two on one machine. A figure is transitions per second
(steps/s x N), the median of ``--repeats`` runs of about ``--seconds`` each; actions are
random in [-1, 1], drawn on the device before the clock starts; autoresets happen during
the timing. "first step" is the seconds from the constructor to the first step's end:
kernel compilation on a fresh warp cache (~/.cache/warp), a load from it otherwise, and on
CUDA the graph capture. Needs `make gpu` (MuJoCo Warp); without it the script says so.

    OMP_NUM_THREADS=1 python benchmarks/warp_throughput.py --device cpu --sizes 8,32 --seconds 3
    python benchmarks/warp_throughput.py --device cuda --envs Ant-v5,Humanoid-v5 --out warp.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from market_envs.gym_vec import GymVecEnv
from market_envs.warp_mujoco import NOT_INSTALLED, WarpMujocoEnv, mjw

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the checkout's root, for benchmarks.
from benchmarks.sac_time_to_score import machine

CUDA_SIZES = "1024,4096,16384,65536"
CPU_SIZES = "8,32"


def rate(step: Callable[[int], None], sync: Callable[[], None], seconds: float, repeats: int) -> float:
    """Median calls per second of ``step`` over ``repeats`` runs (the device drained before each clock stops)."""
    rates = []
    for _ in range(repeats):
        sync()
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            step(count)
            count += 1
        sync()
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates)


def warp_rate(env_id: str, num_envs: int, device: str, seconds: float, repeats: int) -> tuple[float, float]:
    """Transitions per second of `WarpMujocoEnv` and the seconds to its first step's end."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else lambda: None
    start = time.perf_counter()
    env = WarpMujocoEnv(env_id, num_envs, device, seed=0)
    env.reset()
    generator = torch.Generator(device).manual_seed(0)
    actions = torch.rand(16, num_envs, env.act_dim, generator=generator, device=device) * 2 - 1
    env.step(actions[0])
    sync()
    first = time.perf_counter() - start
    steps = rate(lambda count: env.step(actions[count % 16]), sync, seconds, repeats)
    env.close()
    return steps * num_envs, first


def gym_rate(env_id: str, num_envs: int, seconds: float, repeats: int) -> float:
    """Transitions per second of `GymVecEnv` (sync, MuJoCo C on the host)."""
    env = GymVecEnv(env_id, num_envs, seed=0)
    env.reset()
    actions = torch.rand(16, num_envs, env.act_dim, generator=torch.Generator().manual_seed(0)) * 2 - 1
    steps = rate(lambda count: env.step(actions[count % 16]), lambda: None, seconds, repeats)
    env.close()
    return steps * num_envs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="Ant-v5", help="comma-separated: Ant-v5, Humanoid-v5")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", default=None, help=f"robots N (default {CUDA_SIZES} on CUDA, {CPU_SIZES} on CPU)")
    parser.add_argument("--gym-envs", type=int, default=16, help="GymVecEnv's sub-environments E (16)")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    args = parser.parse_args(argv)
    if mjw is None:
        print(NOT_INSTALLED, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    sizes = [int(n) for n in (args.sizes or (CUDA_SIZES if args.device.startswith("cuda") else CPU_SIZES)).split(",")]
    device_name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "warp's CPU device"
    lines = [
        f"{machine()}, {device_name}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}",
        "",
        (
            f"| env | device | N | warp (steps/s) | first step (s) | GymVecEnv sync E={args.gym_envs} (steps/s) "
            "| warp / GymVecEnv |"
        ),
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    for env_id in args.envs.split(","):
        reference = gym_rate(env_id, args.gym_envs, args.seconds, args.repeats)
        for num_envs in sizes:
            steps, first = warp_rate(env_id, num_envs, args.device, args.seconds, args.repeats)
            line = (
                f"| {env_id} | {args.device} | {num_envs:,} | {steps:,.0f} | {first:.1f} | {reference:,.0f} "
                f"| {steps / reference:.2f} |"
            )
            lines.append(line)
            print(line, flush=True)
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
