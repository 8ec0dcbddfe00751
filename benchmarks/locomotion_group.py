"""Seeds as a group on MuJoCo (issue 79): P SAC seeds of Ant-v5 trained side by side against P runs
one after another, at equal work (the same steps and config per seed).

Three arms, each training seeds ``--seed`` .. ``--seed + P - 1`` for ``--steps`` env steps each
with our locomotion SAC (`benchmarks.locomotion`'s `CHOSEN_SAC` config, ``learning_starts`` of
``--learning-starts``) on ``--num-envs`` sub-environments a seed, validated every ``--eval-every``
steps on the seed's own ``--eval-episodes`` episodes:

- **group**: one pod group of the P seeds (`trader.group_training.train_group`, what
  ``trader train --population P --env Ant-v5`` runs): one env of P x E sub-environments, one
  stacked update;
- **lone**: P `trader.train` runs one after another (what ``trader train`` runs for one seed);
- **group of one**: P groups of one seed, one after another: the reference a pod of the group must
  equal (a lone `trader.train` run draws from the agent's generator instead, so its numbers are
  another run of the same seed, docs/missing.md).

The table gives each arm's wall-clock (the ratio to the group's, measured in this run), the seeds'
best validation returns with their IQM and 95% stratified-bootstrap interval (`trader.aggregate`),
and the equality of each group pod with its group of one: the largest absolute difference of
their final weights and of their best scores (0 is bit for bit).

    OMP_NUM_THREADS=1 python benchmarks/locomotion_group.py --pods 8 --steps 8192
    OMP_NUM_THREADS=1 python benchmarks/locomotion_group.py --quick     # Pendulum-v1, 2 pods, seconds
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the checkout's root, for benchmarks.
from benchmarks.locomotion import CHOSEN_SAC, SAC_COMMON, SAC_CONFIGS  # noqa: E402
from benchmarks.sac_time_to_score import machine  # noqa: E402
from trader import aggregate  # noqa: E402
from trader.group_training import train_group  # noqa: E402
from trader.training import train  # noqa: E402

ARMS = ("group", "lone", "group of one")


def sac_config(learning_starts: int) -> dict[str, Any]:
    """Our locomotion SAC (`benchmarks.locomotion`) with ``learning_starts`` random steps first."""
    return {**SAC_CONFIGS[CHOSEN_SAC], **SAC_COMMON, "learning_starts": learning_starts}


def run_arm(arm: str, seeds: list[int], root: Path, args: argparse.Namespace) -> tuple[float, list[float]]:
    """Train one arm's seeds under ``root``; its wall-clock seconds and each seed's best score."""
    config = sac_config(args.learning_starts)
    options = {"steps": args.steps, "num_envs": args.num_envs, "eval_every": args.eval_every}
    options["eval_episodes"] = args.eval_episodes
    start = time.perf_counter()
    if arm == "group":
        dirs = [root / f"seed-{seed}" for seed in seeds]
        results = train_group("sac", args.env, [config] * len(seeds), dirs, seeds=seeds, **options)
    elif arm == "lone":
        results = [train("sac", args.env, config, root / f"seed-{seed}", seed=seed, **options) for seed in seeds]
    else:
        results = [
            train_group("sac", args.env, [config], [root / f"seed-{seed}"], seeds=[seed], **options)[0]
            for seed in seeds
        ]
    return time.perf_counter() - start, [float(result.best_score) for result in results]


def weight_difference(first: Path, second: Path) -> float:
    """The largest absolute difference of two runs' final weights (the agent's generator aside)."""
    a = load_file(first / "checkpoints" / "final.safetensors")
    b = load_file(second / "checkpoints" / "final.safetensors")
    return max(float((a[key].double() - b[key].double()).abs().max()) for key in a if key != "rng")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    seeds = [args.seed + k for k in range(args.pods)]
    out: dict[str, Any] = {"env": args.env, "seeds": seeds, "steps": args.steps, "arms": {}}
    with tempfile.TemporaryDirectory(prefix="locomotion-group-") as folder:
        warm = argparse.Namespace(**{**vars(args), "steps": args.num_envs * 4, "eval_every": args.num_envs * 4})
        run_arm("group of one", seeds[:1], Path(folder) / "warm-up", warm)  # imports and first calls, untimed
        roots = {arm: Path(folder) / arm.replace(" ", "-") for arm in ARMS}
        for arm in ARMS:
            seconds, scores = run_arm(arm, seeds, roots[arm], args)
            estimate = aggregate.stratified_interval(aggregate.iqm, [[score] for score in scores])
            out["arms"][arm] = {
                "seconds": seconds,
                "scores": scores,
                "iqm": [estimate.value, estimate.low, estimate.high],
            }
            print(f"  {arm}: {seconds:,.0f} s, best returns {', '.join(f'{s:,.1f}' for s in scores)}", flush=True)
        group, single = roots["group"], roots["group of one"]
        out["equality"] = {
            "weights": max(weight_difference(group / f"seed-{s}", single / f"seed-{s}") for s in seeds),
            "scores": max(
                abs(a - b)
                for a, b in zip(out["arms"]["group"]["scores"], out["arms"]["group of one"]["scores"], strict=True)
            ),
        }
    return out


def table(out: dict[str, Any]) -> str:
    group = out["arms"]["group"]["seconds"]
    lines = [
        "| arm | wall-clock (s) | / group's | best validation return per seed | IQM [95% CI] |",
        "|---|---:|---:|---|---:|",
    ]
    for arm, row in out["arms"].items():
        iqm, low, high = row["iqm"]
        lines.append(
            f"| {arm} | {row['seconds']:,.0f} | {row['seconds'] / group:.2f}x | "
            f"{', '.join(f'{s:,.0f}' for s in row['scores'])} | {iqm:,.0f} [{low:,.0f}, {high:,.0f}] |"
        )
    equality = out["equality"]
    lines.append(
        f"\nA group pod against its group of one: largest weight difference {equality['weights']:.3g}, "
        f"largest best-score difference {equality['scores']:.3g}."
    )
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Ant-v5", help="gymnasium id")
    parser.add_argument("--pods", type=int, default=8, help="seeds in the group (P)")
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--steps", type=int, default=8192, help="env steps per seed")
    parser.add_argument("--learning-starts", type=int, default=2048, help="random steps before SAC learns")
    parser.add_argument("--num-envs", type=int, default=8, help="sub-environments per seed")
    parser.add_argument("--eval-every", type=int, default=2048, help="steps between validations")
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--quick", action="store_true", help="Pendulum-v1, 2 pods, 512 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.env, args.pods, args.steps, args.learning_starts, args.eval_every = "Pendulum-v1", 2, 512, 256, 256
    for name in ("pods", "steps", "num_envs", "eval_every", "eval_episodes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    print(
        f"{args.env}: {args.pods} SAC seeds x {args.steps:,} steps, {args.num_envs} envs a seed; {machine()}",
        flush=True,
    )
    out = measure(args)
    print(table(out))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
