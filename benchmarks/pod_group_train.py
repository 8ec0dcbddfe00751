"""What a pod group buys whole pods: P pods trained one after another (`trader.train`, as a
tournament worker trains its pods today) against the same P pods as one group
(`trader.group_training.train_group`), in one process (issue 77).

``--algo`` picks PPO (default), SAC or TD3. Equal work: the same P pods (seeds 0..P-1, one config, ``--pod-steps`` transitions on
``--num-envs`` sub-environments each, validated at the end), each way; both write every pod's run
directory. Two pod kinds:

- **small**: the tournament's fresh pod (PPO: `PPOConfig`'s defaults, flat MLPs 64x64; SAC and TD3:
  the tournament's base configs, `tournament.config.DEFAULT_ALGO_CONFIGS`, flat MLPs 256x256);
- **demo**: the demo's pod (the market preset: the per-stock network), ``--pod-steps 16384``,
  ``--num-envs 64`` as `trader demo` runs it (PPO only: a per-stock SAC or TD3 pod does not group).

Printed per P: seconds per pod one after another and in the group, the speed-up (pods per hour
of the group over the lone pods'), the median validation score both ways (a group's pod is not
today's lone run: its random streams are its row's, `market_envs.streams`), and the equality
check: the largest difference between the final weights of pod 0 in the group of P and pod 0 in
the group of one (0: bit for bit; on a GPU, the contract is within float rounding).

    OMP_NUM_THREADS=1 python benchmarks/pod_group_train.py                     # small pods, P = 1, 4, 16
    OMP_NUM_THREADS=1 python benchmarks/pod_group_train.py --kind demo --pods 4 --pod-steps 16384 --num-envs 64
    python benchmarks/pod_group_train.py --device cuda --pods 1,16,64                    # a GPU
    OMP_NUM_THREADS=1 python benchmarks/pod_group_train.py --algo sac --pods 16           # SAC, TD3
    OMP_NUM_THREADS=1 python benchmarks/pod_group_train.py --memory --pods 16             # peak memory

``--memory`` measures the issue's memory rule instead (a group of P grows the process by at most P
times one pod's growth; the panel is shared): each in a fresh process, the peak resident memory of
loading the market alone, of training one pod, and of training a group of P; printed as each one's
growth over the market alone.
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


def pod_config(kind: str, dataset: str, pod_steps: int, num_envs: int, algo: str = "ppo") -> tuple[dict, object]:
    """The config and the market of an ``algo`` pod of ``kind``."""
    if kind == "small":
        from tournament.config import DEFAULT_ALGO_CONFIGS

        return dict(DEFAULT_ALGO_CONFIGS.get(algo, {})), resolve_market(dataset)
    from podracer.presets import apply_preset
    from trader.names import DEMO_COST
    from trader.spec import market_spec

    rules, configs = apply_preset("market", dataset, DEMO_COST, [algo], steps=pod_steps, num_envs=num_envs)
    return configs[algo], market_spec(dataset, rules)


def one_size(pods: int, args: argparse.Namespace, root: Path) -> tuple[float, float, list[float], list[float]]:
    """Seconds per pod lone and grouped, and the pods' scores each way."""
    config, market = pod_config(args.kind, args.dataset, args.pod_steps, args.num_envs, args.algo)
    common = {"steps": args.pod_steps, "num_envs": args.num_envs, "eval_every": 0, "device": args.device}
    tick = time.perf_counter()
    lone = [train(args.algo, market, config, root / f"lone{pods}-{seed}", seed=seed, **common) for seed in range(pods)]
    lone_s = (time.perf_counter() - tick) / pods
    tick = time.perf_counter()
    dirs = [root / f"group{pods}-{seed}" for seed in range(pods)]
    group = train_group(args.algo, market, [config] * pods, dirs, seeds=list(range(pods)), **common)
    group_s = (time.perf_counter() - tick) / pods
    _sync(args.device)
    return lone_s, group_s, [r.best_score for r in lone], [r.best_score for r in group]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def largest_difference(first: Path, second: Path) -> float:
    """The largest absolute difference between two checkpoints' network weights."""
    from safetensors.torch import load_file

    a, b = (
        load_file(first / "checkpoints" / "final.safetensors"),
        load_file(second / "checkpoints" / "final.safetensors"),
    )
    return max(float((a[key].double() - b[key].double()).abs().max()) for key in a if key.startswith("net."))


def peak_growth_mib(mode: str, pods: int, args: argparse.Namespace) -> float:
    """Peak resident MiB of a fresh process that trains ``mode`` ("none", "lone", "group"), less
    nothing: the caller subtracts the "none" process's (the market loaded, nothing trained)."""
    import subprocess
    import sys

    code = (
        "import resource, sys, tempfile, torch; sys.path.insert(0, sys.argv[1]); torch.set_num_threads(1)\n"
        "from pathlib import Path; import pod_group_train as b\n"
        "args = b.parse([*sys.argv[4:]]); mode, pods = sys.argv[2], int(sys.argv[3])\n"
        "config, market = b.pod_config(args.kind, args.dataset, args.pod_steps, args.num_envs)\n"
        "market.data() if hasattr(market, 'data') else None\n"
        "common = {'steps': args.pod_steps, 'num_envs': args.num_envs, 'eval_every': 0}\n"
        "root = Path(tempfile.mkdtemp())\n"
        "if mode == 'lone': b.train('ppo', market, config, root / 'lone', seed=0, **common)\n"
        "if mode == 'group': b.train_group('ppo', market, [config] * pods, [root / str(p) for p in range(pods)], "
        "seeds=list(range(pods)), **common)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)\n"
    )
    flags = ["--kind", args.kind, "--dataset", args.dataset, "--pod-steps", str(args.pod_steps)]
    flags += ["--num-envs", str(args.num_envs)]
    done = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent), mode, str(pods), *flags],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def memory_table(args: argparse.Namespace) -> None:
    base = peak_growth_mib("none", 1, args)
    lone = peak_growth_mib("lone", 1, args) - base
    print(f"# peak resident memory of the market alone: {base:.0f} MiB; one pod grows it by {lone:.0f} MiB")
    print("| pods P | group's growth MiB | P x one pod's growth MiB | group / (P x one pod) |")
    print("|---|---|---|---|")
    for pods in (int(p) for p in args.pods.split(",")):
        group = peak_growth_mib("group", pods, args) - base
        print(f"| {pods} | {group:.0f} | {pods * lone:.0f} | {group / (pods * lone):.2f} |", flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", default="1,4,16", help="Group sizes P, a comma list.")
    parser.add_argument("--kind", choices=("small", "demo"), default="small")
    parser.add_argument("--algo", choices=("ppo", "sac", "td3"), default="ppo")
    parser.add_argument("--dataset", default="synthetic-edge-daily")
    parser.add_argument("--pod-steps", type=int, default=4096)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--memory", action="store_true", help="Measure peak memory instead (see the docstring).")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    torch.set_num_threads(1)
    if args.memory:
        memory_table(args)
        return 0
    where = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    print(
        f"# {platform.node()}, {where}, torch {torch.__version__}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; "
        f"{args.kind} {args.algo.upper()} pods of {args.pod_steps:,} transitions on {args.num_envs} envs of {args.dataset}"
    )
    print(
        "| pods P | lone s/pod | group s/pod | group speed-up | lone scores (median) | group scores (median) "
        "| pod 0 against its group of one |"
    )
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="pod-group-train-") as tmp:
        root = Path(tmp)
        one_size(1, args, root / "alone")  # warms the process up; the group of one every pod 0 is compared with
        for pods in (int(p) for p in args.pods.split(",")):
            lone_s, group_s, lone, group = one_size(pods, args, root / f"p{pods}")
            difference = largest_difference(root / "alone" / "group1-0", root / f"p{pods}" / f"group{pods}-0")
            print(
                f"| {pods} | {lone_s:.2f} | {group_s:.2f} | {lone_s / group_s:.2f}x | "
                f"{sorted(lone)[len(lone) // 2]:.3f} | {sorted(group)[len(group) // 2]:.3f} | {difference:.2g} |",
                flush=True,
            )
    print(f"# load after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
