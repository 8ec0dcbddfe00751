"""Env-steps per second of `StockTradingVecEnv` beside FinRL-style single envs.

One run measures, for N in {30, 100} stocks and E in {1, 64, 1024, 4096, 16384}
sub-environments, on the CPU (and on CUDA when present), with the eager and the
torch.compile'd step kernel; and the FinRL-style pandas env and its numpy twin
(`finrl_style_env.py`) at each N. It prints a markdown table with the ratios to the
single envs and writes it to ``--out`` when given.

Every figure is the median of ``--repeats`` timed runs of about ``--seconds`` each,
after warm-up (and compilation). Env-steps/s = E x steps / wall seconds (CUDA is
synchronised before the clock stops); for CPU rows the table also gives env-steps
per second of process CPU time, which others' load on a shared machine disturbs
less, and its ratio to the pandas env's CPU-time rate. Ratios on a GPU compare its
wall-clock rate with the pandas env's on the same machine's CPU.

Actions are random in [-1, 1] (shares mode, 0.1% costs, episodes of 256 bars with
random starts, so autoresets happen during the timing). By default the vector
env observes what the FinRL env's state holds (close and the 8 indicators, plus cash
and positions); ``--features all`` observes all 13 panel features.

    python benchmarks/env_throughput.py                      # CPU (+ CUDA if present)
    python benchmarks/env_throughput.py --device cuda --envs 1,1024,16384,65536,262144 --out gpu.md

``--compare-costs`` times instead the step with every cost term of
`market_envs.costs.CostModel` on (commission per share with minimum and cap, the
Abdi-Ranaldo half-spread, square-root impact, a participation cap, a borrow fee)
against the flat-rate step of the same rules (short selling on, so the borrow fee
acts), in the same process, same E and N, eager and compiled. The target of issue 30: at
most 1.3x the time.

    python benchmarks/env_throughput.py --compare-costs --envs 1024,4096 --tickers 30,100 --repeats 101 --seconds 0.05

With ``--kernel-sources A.c,B.c`` the step with every term is timed once per version of the C
kernel's source (for a change to it: the last commit's, ``git show HEAD:market_envs/fill_costs.c >
before.c``, and the working tree's), all in the same rounds, so that the versions are paired as
the steps are; below the table, each version's time against the first's.

``--compare-action`` times the step of weights mode with the action that can hold (issue 40:
``weights_map="linear"``, a trade rate of 0.5 and a no-trade band of 0.2 / N per stock, the
costliest case: both on) against today's mapping (the action is the book, rebalanced in full),
at the flat rate and with every cost term, in the same process as above; and the same with the
rate the policy chooses per stock instead of the fixed one (``rate_action``: 2N actions, the band
too). The target of issue 40: at most 1.1x the time, eager and compiled.

    python benchmarks/env_throughput.py --compare-action --envs 1024,4096 --tickers 30,100 --repeats 101 --seconds 0.05

How the two comparisons time, and the terms of their table. The envs of one group (the baseline,
flat or today's, and the others) are built, warmed (and compiled) side by side, then timed in
``--repeats`` *rounds*: each round runs every env once for the same number of steps (about
``--seconds`` of the baseline), in an order drawn afresh each round, so the runs of a round are
close in time and a slow drift of a shared machine hits them alike; many short rounds beat a few
long ones. Each round gives one *paired ratio* per env: its seconds per step over the baseline's
in that round. The table gives, per env against its baseline:

- *env-steps/s*: E over the median seconds per step of that env's runs (wall-clock);
- *time ratio, median of rounds*: the median of the paired ratios (wall-clock), the figure the
  targets are stated in;
- *IQR of rounds*: their 25th to 75th percentiles, how much one pair of runs scatters;
- *95% CI of median*: the 2.5th to 97.5th percentiles of the median over 4,000 bootstrap
  resamples of the rounds (seeded), how well this run pins the median down;
- *CPU-time ratio (95% CI)*: the same median and interval from the process's CPU time per run
  (CPU rows), which time spent descheduled by others' work on a shared machine does not count;
- *<= target?*: "yes" when the interval lies at or below the target, "no" when above it,
  "undecided" when the target is inside it (more rounds, or a quieter machine, decide it).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import itertools
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple, NoReturn

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the checkout's root, for benchmarks.
from benchmarks.finrl_style_env import (  # noqa: E402
    FINRL_INDICATORS,
    NumpyFinRLEnv,
    PandasFinRLEnv,
    benchmark_panel,
    finrl_frame,
)
from market_envs import EnvConfig, StockTradingVecEnv, native_fill  # noqa: E402
from market_envs.costs import CostModel  # noqa: E402

EPISODE = 256
FEATURE_SETS = {"finrl": ("close",) + FINRL_INDICATORS, "all": None}
EVERY_COST = CostModel(
    commission_per_share=0.005,
    commission_min=1.0,
    commission_max_rate=0.01,
    spread_model="high_low",
    spread_window=390,
    impact_eta=1.0,
    impact_window_days=1,
    participation=0.1,
    borrow_rate=0.005,
)
SINGLE_TERMS = {
    "commission": CostModel(commission_per_share=0.005, commission_min=1.0, commission_max_rate=0.01),
    "spread": CostModel(spread_model="high_low", spread_window=390),
    "impact": CostModel(impact_eta=1.0, impact_window_days=1),
    "participation": CostModel(participation=0.1),
    "borrow": CostModel(borrow_rate=0.005),
}
"""--per-term: each term of EVERY_COST alone."""


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo where there is one."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", choices=["auto", "cpu", "cuda"], default="auto", help="auto: the CPU, and CUDA too when present"
    )
    parser.add_argument("--envs", default="1,64,1024,4096,16384", help="comma-separated E values")
    parser.add_argument("--tickers", default="30,100", help="comma-separated N values")
    parser.add_argument("--bars", type=int, default=2000, help="bars in the random-walk panel")
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one timed run")
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed runs per figure (median); --compare-costs/--compare-action: interleaved rounds (see above)",
    )
    parser.add_argument("--kernels", default="eager,compiled", help="eager and/or compiled")
    parser.add_argument(
        "--features",
        choices=sorted(FEATURE_SETS),
        default="finrl",
        help="observed features: finrl = close + FinRL's 8 indicators, the content of "
        "the FinRL env's state (default); all = the panel's 13",
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    parser.add_argument(
        "--compare-costs",
        action="store_true",
        help="time the step with every cost term on against the flat-rate step (see above)",
    )
    parser.add_argument("--mode", choices=["shares", "weights"], default="shares", help="--compare-costs: action mode")
    parser.add_argument("--per-term", action="store_true", help="--compare-costs: also time each term alone")
    parser.add_argument(
        "--kernel-sources",
        default="",
        metavar="A.c,B.c",
        help="--compare-costs: time the step with every term once per version of market_envs/fill_costs.c "
        "(each built as the env builds its own), all in the same rounds, and each against the first",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="STEPS",
        help="--compare-costs/--compare-action: after the timings, profile STEPS steps of each env "
        "(torch.profiler, CPU) and print the top operations by own time",
    )
    parser.add_argument(
        "--compare-action",
        action="store_true",
        help="time the action that can hold (linear map, trade rate, band) against today's mapping",
    )
    args = parser.parse_args(argv)
    if args.kernel_sources and not args.compare_costs:
        parser.error("--kernel-sources times the step with every cost term: it needs --compare-costs")
    return args


def timed(
    run_steps: Callable[[int], None], seconds: float, repeats: int, sync: Callable[[], None]
) -> tuple[float, float, int]:
    """Median (wall, cpu) seconds per step over `repeats` runs of about `seconds`."""
    steps = 1
    while True:  # calibrate the number of steps per run
        start = time.perf_counter()
        run_steps(steps)
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 4 or steps >= 1 << 20:
            break
        steps *= 2
    steps = max(1, int(steps * seconds / max(elapsed, 1e-9)))
    walls, cpus = [], []
    for _ in range(repeats):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        run_steps(steps)
        sync()
        walls.append((time.perf_counter() - wall0) / steps)
        cpus.append((time.process_time() - cpu0) / steps)
    return statistics.median(walls), statistics.median(cpus), steps


def single_env_rate(cls, frame, n: int, seconds: float, repeats: int) -> tuple[float, float]:
    """Steps/s (wall, cpu) of one FinRL-style env under random actions."""
    env = cls(frame, n)
    env.reset()
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, size=(64, n))
    count = [0]

    def run(steps: int) -> None:
        for _ in range(steps):
            if env.step(actions[count[0] % 64])[2]:
                env.reset()
            count[0] += 1

    wall, cpu, _ = timed(run, seconds, repeats, lambda: None)
    return 1.0 / wall, 1.0 / cpu


def check_twins(frame, n: int) -> None:
    """The numpy twin must follow the pandas env exactly (same assets after 50 steps)."""
    rng = np.random.default_rng(1)
    envs = [PandasFinRLEnv(frame, n), NumpyFinRLEnv(frame, n)]
    for _ in range(50):
        action = rng.uniform(-1, 1, size=n)
        for env in envs:
            env.step(action.copy())
    if envs[0].asset_memory != envs[1].asset_memory:
        raise SystemExit("numpy twin differs from the pandas env; the comparison would be unfair")


def vec_env_rate(data, num_envs: int, device: torch.device, compiled: bool, features, seconds: float, repeats: int):
    config = EnvConfig(episode_length=EPISODE, features=features)
    env = StockTradingVecEnv(data, num_envs, device, config, compile=compiled)
    env.reset(seed=0)
    g = torch.Generator(device=device).manual_seed(0)
    bank = [torch.rand(num_envs, data.num_tickers, generator=g, device=device) * 2 - 1 for _ in range(4)]
    for i in range(3):  # warm-up (and compilation)
        env.step(bank[i % 4])
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()

    def run(steps: int) -> None:
        for i in range(steps):
            env.step(bank[i % 4])

    wall, cpu, _ = timed(run, seconds, repeats, sync)
    return num_envs / wall, num_envs / cpu


def step_runner(data, num_envs: int, device: torch.device, config: EnvConfig, compiled: bool) -> Callable[[int], None]:
    """A function that steps a warmed-up (and compiled) env `steps` times under random actions."""
    env = StockTradingVecEnv(data, num_envs, device, config, compile=compiled)
    env.reset(seed=0)
    g = torch.Generator(device=device).manual_seed(0)
    bank = [torch.rand(num_envs, env.act_dim, generator=g, device=device) * 2 - 1 for _ in range(4)]
    for i in range(3):
        env.step(bank[i % 4])

    def run(steps: int) -> None:
        for i in range(steps):
            env.step(bank[i % 4])

    return run


def interleaved_times(
    runs: list[Callable[[int], None]], seconds: float, rounds: int, sync: Callable[[], None], seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Seconds per step of each runner in each round, wall and process CPU time, two arrays
    [rounds, len(runs)]. Every round runs each runner once for the same number of steps (about
    `seconds` of the first runner), in an order drawn afresh each round (seeded), so that a drift
    of the machine's speed hits every runner of a round alike and no runner always goes first:
    each round is one paired sample. The garbage collector is off while the clock runs."""
    steps = 1
    while True:  # calibrate on the first runner (today's step)
        start = time.perf_counter()
        runs[0](steps)
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 4 or steps >= 1 << 20:
            break
        steps *= 2
    steps = max(2, int(steps * seconds / max(elapsed, 1e-9)))
    for run in runs:  # one untimed run each: every runner starts the rounds warm
        run(steps)
    sync()
    order = np.random.default_rng(seed)
    walls = np.empty((rounds, len(runs)))
    cpus = np.empty((rounds, len(runs)))
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            for i in order.permutation(len(runs)):
                wall0, cpu0 = time.perf_counter(), time.process_time()
                runs[i](steps)
                sync()
                walls[r, i] = (time.perf_counter() - wall0) / steps
                cpus[r, i] = (time.process_time() - cpu0) / steps
    finally:
        gc.enable()
    return walls, cpus


class PairedRatio(NamedTuple):
    """The time ratio of a runner to the baseline, from per-round pairs (`paired_ratio`)."""

    median: float  # the median over rounds of (runner's time / baseline's time in the same round)
    q1: float  # the interquartile range of those per-round ratios: their 25th ...
    q3: float  # ... and 75th percentiles (the spread of one pair)
    low: float  # the 95% bootstrap interval of the median: its 2.5th ...
    high: float  # ... and 97.5th percentiles over resamples of the rounds
    verdict: str  # against the target: "yes" (high <= target), "no" (low > target), else "undecided"


def paired_ratio(
    baseline: np.ndarray, other: np.ndarray, target: float, resamples: int = 4000, seed: int = 0
) -> PairedRatio:
    """`PairedRatio` of the per-round times `other` against `baseline` (seconds per step, [rounds]
    each, the same round at the same index). The ratio of each round is one sample; the median of
    the samples is the figure, the bootstrap (rounds resampled with replacement, seeded) gives the
    interval of that median, and the verdict says whether the interval lies on one side of
    `target`."""
    ratios = np.asarray(other, dtype=float) / np.asarray(baseline, dtype=float)
    q1, median, q3 = np.quantile(ratios, [0.25, 0.5, 0.75])
    draws = np.random.default_rng(seed).integers(0, len(ratios), size=(resamples, len(ratios)))
    low, high = np.quantile(np.median(ratios[draws], axis=1), [0.025, 0.975])
    verdict = "yes" if high <= target else "no" if low > target else "undecided"
    return PairedRatio(float(median), float(q1), float(q3), float(low), float(high), verdict)


def profiled(run: Callable[[int], None], steps: int, sync: Callable[[], None]) -> str:
    """The top operations by own time of `steps` steps of `run` (`torch.profiler`, CPU activity)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        run(steps)
        sync()
    return profile.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=48)


def ratio_table(
    args: argparse.Namespace,
    devices: list[torch.device],
    header: str,
    rates: tuple[str, str],
    target: float,
    groups: Callable[[int], list[list[tuple[str, EnvConfig]]]],
    kernels_by_label: dict[str, ctypes.CDLL] | None = None,
) -> int:
    """Print (and with ``--out`` write) a table of step rates: for every N, device, E and kernel,
    each group of ``groups(N)`` ((label, rules) pairs) is timed in interleaved rounds
    (`interleaved_times`, ``--repeats`` rounds of ``--seconds`` per run), and each rules after
    the group's first get a row: its label, the two rates, and its time ratio to the first
    (`paired_ratio`, wall-clock and process CPU time) against `target`. ``rates`` names the
    two rates. `kernels_by_label` gives the rules of some labels another build of the C kernel
    (`with_kernel`); those labels are also timed against the first of them, in lines below the
    table."""
    env_counts = [int(x) for x in args.envs.split(",")]
    kernels = [k.strip() for k in args.kernels.split(",")]
    print(header, flush=True)
    rows = [
        f"| device | N | E | kernel | costs | {rates[0]} | {rates[1]} | time ratio, median of rounds | "
        f"IQR of rounds | 95% CI of median | CPU-time ratio (95% CI) | <= {target:g}x? |",
        "|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    kernels_by_label = kernels_by_label or {}
    versions = []
    for n in [int(x) for x in args.tickers.split(",")]:
        data = benchmark_panel(n, args.bars)
        for device in devices:
            sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
            for num_envs, kernel, group in itertools.product(env_counts, kernels, groups(n)):
                runs = []
                for label, rules in group:
                    library = kernels_by_label.get(label)
                    with with_kernel(library):
                        run = step_runner(data.to(device), num_envs, device, rules, kernel == "compiled")
                    runs.append(run if library is None else kernel_switching(library, run))
                walls, cpus = interleaved_times(runs, args.seconds, args.repeats, sync)
                switched = [i for i, (label, _) in enumerate(group) if label in kernels_by_label]
                for i in switched[1:]:
                    versus = paired_ratio(walls[:, switched[0]], walls[:, i], 1.0)
                    versions.append(
                        f"{device.type}, N {n}, E {num_envs}, {kernel}: {group[i][0]} against {group[switched[0]][0]}: "
                        f"time ratio {versus.median:.3f} (95% CI {versus.low:.3f}-{versus.high:.3f})"
                    )
                    print(versions[-1], flush=True)
                base = float(np.median(walls[:, 0]))
                for i, (label, _) in enumerate(group[1:], start=1):
                    wall = paired_ratio(walls[:, 0], walls[:, i], target)
                    cpu = paired_ratio(cpus[:, 0], cpus[:, i], target) if device.type == "cpu" else None
                    cpu_cell = f"{cpu.median:.3f} ({cpu.low:.3f}-{cpu.high:.3f})" if cpu else "-"
                    rows.append(
                        f"| {device.type} | {n} | {num_envs} | {kernel} | {label} | {num_envs / base:,.0f} | "
                        f"{num_envs / float(np.median(walls[:, i])):,.0f} | {wall.median:.3f} | "
                        f"{wall.q1:.3f}-{wall.q3:.3f} | {wall.low:.3f}-{wall.high:.3f} | {cpu_cell} | {wall.verdict} |"
                    )
                    print(rows[-1], flush=True)
                for (label, _), run in zip(group, runs) if args.profile else ():
                    print(f"\nprofile of {args.profile} steps: {label}, {device.type}, N {n}, E {num_envs}, {kernel}")
                    print(profiled(run, args.profile, sync))
    table = "\n".join(rows) + "".join(f"\n\n{line}" for line in versions)
    print("\n" + header + "\n\n" + table)
    if args.out is not None:
        args.out.write_text(f"{header}\n\n{table}\n")
    return 0


@contextlib.contextmanager
def with_kernel(library: ctypes.CDLL | None) -> Iterator[None]:
    """The env's C kernel is `library` inside (None: the env's own): `market_envs.native_fill.native_library`
    is what every call of the kernel asks for it."""
    if library is None:
        yield
        return
    own = native_fill.native_library
    native_fill.native_library = lambda: library
    try:
        yield
    finally:
        native_fill.native_library = own


def kernel_switching(library: ctypes.CDLL, run: Callable[[int], None]) -> Callable[[int], None]:
    """`run` with the C kernel `library` while it steps."""

    def switched(steps: int) -> None:
        with with_kernel(library):
            run(steps)

    return switched


def refuse(message: str) -> NoReturn:
    """Stop on bad input as argparse does: one line on stderr naming what is wrong, exit status 2."""
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def kernel_builds(sources: str) -> dict[str, ctypes.CDLL]:
    """Each source of ``--kernel-sources`` built as the env builds its own (`market_envs.native_fill.build_native`)
    and bound, by the label its step gets in the table."""
    paths = [Path(part.strip()) for part in sources.split(",") if part.strip()]
    if len(paths) == 1:
        refuse("--kernel-sources: give two versions or more (or none, for the env's own)")
    for path in paths:
        if not path.is_file():
            refuse(f"--kernel-sources: no file {path}")
    names = [path.name for path in paths]
    if len(set(names)) < len(names):
        refuse(f"--kernel-sources: two files named alike in {names}; give each version its own name")
    builds = {}
    for path in paths:
        try:
            library = ctypes.CDLL(str(native_fill.build_native(source=path)))
        except (OSError, subprocess.SubprocessError) as error:
            said = (getattr(error, "stderr", b"") or b"").decode(errors="replace").strip().splitlines()
            refuse(f"--kernel-sources: {path} did not build: {said[0] if said else error}")
        try:
            builds[f"every term ({path.name})"] = native_fill.bind_native(library)
        except AttributeError as error:  # built, but not a version of the kernel
            refuse(f"--kernel-sources: {path} is not a version of fill_costs.c ({error})")
    return builds


def interleaving(args: argparse.Namespace) -> str:
    """The header's words for how `ratio_table` times."""
    return (
        f"interleaved rounds: {args.repeats} x ~{args.seconds:g} s per run, order drawn per round; "
        f"ratio = median over rounds of the per-round ratio; load {os.getloadavg()[0]:.1f}"
    )


def compare_costs(args: argparse.Namespace, devices: list[torch.device]) -> int:
    """The table of --compare-costs: flat-rate step vs every cost term on."""
    flat = EnvConfig(
        episode_length=EPISODE, features=FEATURE_SETS[args.features], short_selling=True, action_mode=args.mode
    )
    builds = kernel_builds(args.kernel_sources)
    every = dict.fromkeys(builds or ["every term"], EVERY_COST)
    variants = {**every, **(SINGLE_TERMS if args.per_term else {})}
    header = (
        f"env step, cost terms vs flat rate: torch {torch.__version__}; {cpu_name()} ({os.cpu_count()} cores, "
        f"torch threads {torch.get_num_threads()}); {args.bars} bars, {args.mode} mode, short selling, features "
        f"{args.features}; {interleaving(args)}"
    )
    group = [("flat", flat), *((name, replace(flat, costs=costs)) for name, costs in variants.items())]
    return ratio_table(
        args,
        devices,
        header,
        ("flat env-steps/s", "with costs env-steps/s"),
        1.3,
        lambda n: [group],
        builds,
    )


def compare_action(args: argparse.Namespace, devices: list[torch.device]) -> int:
    """The table of --compare-action: today's weights mapping vs the action that can hold."""
    header = (
        f"env step, the action that can hold vs today's mapping: torch {torch.__version__}; {cpu_name()} "
        f"({os.cpu_count()} cores, torch threads {torch.get_num_threads()}); {args.bars} bars, weights mode, short "
        f"selling, market-neutral, features {args.features}; {interleaving(args)}"
    )

    def groups(n: int) -> list[list[tuple[str, EnvConfig]]]:
        pairs = []
        for label, costs in (("flat", CostModel()), ("every term", EVERY_COST)):
            today = EnvConfig(
                episode_length=EPISODE,
                features=FEATURE_SETS[args.features],
                short_selling=True,
                market_neutral=True,
                action_mode="weights",
                costs=costs,
            )
            held = replace(today, weights_map="linear", no_trade_band=0.2 / n)
            pairs.append(
                [
                    (label, today),
                    (f"{label}, fixed rate", replace(held, trade_rate=0.5)),
                    (f"{label}, policy rate", replace(held, rate_action=True)),
                ]
            )
        return pairs

    return ratio_table(args, devices, header, ("today env-steps/s", "new action env-steps/s"), 1.1, groups)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    torch._dynamo.config.recompile_limit = 64  # one compilation per (E, N): more than the default 8
    devices = [torch.device("cpu")] if args.device in ("auto", "cpu") else []
    if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: no CUDA device is available")
        devices.append(torch.device("cuda"))
    if args.compare_costs:
        return compare_costs(args, devices)
    if args.compare_action:
        return compare_action(args, devices)
    env_counts = [int(x) for x in args.envs.split(",")]
    ticker_counts = [int(x) for x in args.tickers.split(",")]
    kernels = [k.strip() for k in args.kernels.split(",")]

    machines = [f"{cpu_name()} ({os.cpu_count()} cores, torch threads {torch.get_num_threads()})"]
    machines += [torch.cuda.get_device_name(d) for d in devices if d.type == "cuda"]
    header = (
        f"env throughput: torch {torch.__version__}; {'; '.join(machines)}; "
        f"{args.bars} bars, features {args.features}, median of {args.repeats} x ~{args.seconds:g} s"
    )
    print(header, flush=True)
    rows = [
        "| device | N | E | kernel | env-steps/s (wall) | env-steps/s (CPU time) | x pandas | x numpy "
        "| x pandas (CPU time) |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for n in ticker_counts:
        data = benchmark_panel(n, args.bars)
        frame = finrl_frame(data)
        check_twins(frame, n)
        pandas_wall, pandas_cpu = single_env_rate(PandasFinRLEnv, frame, n, args.seconds, args.repeats)
        numpy_wall, numpy_cpu = single_env_rate(NumpyFinRLEnv, frame, n, args.seconds, args.repeats)
        singles = (("FinRL-style pandas", pandas_wall, pandas_cpu), ("FinRL-style numpy", numpy_wall, numpy_cpu))
        for label, wall, cpu in singles:
            rows.append(
                f"| cpu | {n} | 1 | {label} | {wall:,.0f} | {cpu:,.0f} | {wall / pandas_wall:.2f} | "
                f"{wall / numpy_wall:.2f} | {cpu / pandas_cpu:.2f} |"
            )
            print(rows[-1], flush=True)
        for device in devices:
            for num_envs in env_counts:
                for kernel in kernels:
                    wall, cpu = vec_env_rate(
                        data.to(device),
                        num_envs,
                        device,
                        kernel == "compiled",
                        FEATURE_SETS[args.features],
                        args.seconds,
                        args.repeats,
                    )
                    on_cpu = device.type == "cpu"
                    rows.append(
                        f"| {device.type} | {n} | {num_envs} | {kernel} | {wall:,.0f} | "
                        f"{f'{cpu:,.0f}' if on_cpu else '-'} | {wall / pandas_wall:,.0f} | {wall / numpy_wall:,.0f} | "
                        f"{f'{cpu / pandas_cpu:,.0f}' if on_cpu else '-'} |"
                    )
                    print(rows[-1], flush=True)
    table = "\n".join(rows)
    print("\n" + header + "\n\n" + table)
    if args.out is not None:
        args.out.write_text(f"{header}\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
