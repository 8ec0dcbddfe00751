"""What a pod group buys whole pods: P PPO pods trained one after another (`trader.train`, as a
tournament worker trains its pods today) against the same P pods as one group
(`trader.group_training.train_group`), in one process (issue 77).

Equal work: the same P pods (seeds 0..P-1, one config, ``--pod-steps`` transitions on
``--num-envs`` sub-environments each, validated at the end), each way; both write every pod's run
directory. Two pod kinds:

- **small**: the tournament's fresh PPO pod (`PPOConfig`'s defaults, flat MLPs 64x64);
- **demo**: the demo's PPO pod (the market preset: the per-stock network), ``--pod-steps 16384``,
  ``--num-envs 64`` as `trader demo` runs it.

Printed per P: seconds per pod one after another and in the group, the speed-up (pods per hour
of the group over the lone pods'), and each pod's validation score both ways (a group's pod is not
today's lone run: its random streams are its row's, `market_envs.streams`).

    OMP_NUM_THREADS=1 python benchmarks/pod_group_train.py                     # small pods, P = 1, 4, 16
    OMP_NUM_THREADS=1 python benchmarks/pod_group_train.py --kind demo --pods 4 --pod-steps 16384 --num-envs 64
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from trader.group_training import train_group
from trader.spec import resolve_market
from trader.training import train


def pod_config(kind: str, dataset: str, pod_steps: int, num_envs: int) -> tuple[dict, object]:
    """The PPO config and the market of a pod of ``kind``."""
    if kind == "small":
        return {}, resolve_market(dataset)
    from podracer.presets import apply_preset
    from trader.names import DEMO_COST
    from trader.spec import market_spec

    rules, configs = apply_preset("market", dataset, DEMO_COST, ["ppo"], steps=pod_steps, num_envs=num_envs)
    return configs["ppo"], market_spec(dataset, rules)


def one_size(pods: int, args: argparse.Namespace, root: Path) -> tuple[float, float, list[float], list[float]]:
    """Seconds per pod lone and grouped, and the pods' scores each way."""
    config, market = pod_config(args.kind, args.dataset, args.pod_steps, args.num_envs)
    common = {"steps": args.pod_steps, "num_envs": args.num_envs, "eval_every": 0}
    tick = time.perf_counter()
    lone = [train("ppo", market, config, root / f"lone{pods}-{seed}", seed=seed, **common) for seed in range(pods)]
    lone_s = (time.perf_counter() - tick) / pods
    tick = time.perf_counter()
    dirs = [root / f"group{pods}-{seed}" for seed in range(pods)]
    group = train_group("ppo", market, [config] * pods, dirs, seeds=list(range(pods)), **common)
    group_s = (time.perf_counter() - tick) / pods
    return lone_s, group_s, [r.best_score for r in lone], [r.best_score for r in group]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", default="1,4,16", help="Group sizes P, a comma list.")
    parser.add_argument("--kind", choices=("small", "demo"), default="small")
    parser.add_argument("--dataset", default="synthetic-edge-daily")
    parser.add_argument("--pod-steps", type=int, default=4096)
    parser.add_argument("--num-envs", type=int, default=16)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(
        f"# {platform.node()}, torch {torch.__version__}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; "
        f"{args.kind} PPO pods of {args.pod_steps:,} transitions on {args.num_envs} envs of {args.dataset}"
    )
    print("| pods P | lone s/pod | group s/pod | group speed-up | lone scores (median) | group scores (median) |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="pod-group-train-") as tmp:
        for pods in (int(p) for p in args.pods.split(",")):
            lone_s, group_s, lone, group = one_size(pods, args, Path(tmp))
            print(
                f"| {pods} | {lone_s:.2f} | {group_s:.2f} | {lone_s / group_s:.2f}x | "
                f"{sorted(lone)[len(lone) // 2]:.3f} | {sorted(group)[len(group) // 2]:.3f} |",
                flush=True,
            )
    print(f"# load after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
