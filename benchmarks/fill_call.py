"""Where the compiled CPU step with every cost term spends its time beyond the flat step (issue 41).

`env_throughput.py --compare-costs` gives the ratio of the two steps; this script splits the
costs step's extra time into what the C kernel (`market_envs/fill_costs.c`) and its call cost,
on the env's own inputs (the benchmark panel and cost model of `env_throughput.py`, E
sub-environments, N stocks, `--mode`):

- ``flat step`` and ``costs step``: the compiled steps, timed in alternating runs (ms per step);
- ``C kernel in the step``: the kernel's own time per call inside the compiled costs step (a
  timer around the ctypes call of `fill_with_costs`, in the same runs; mean per call);
- ``C kernel alone``: the same kernel on the inputs of 32 of those steps (copied out of the step),
  each called again right after a first call, so that its inputs and the rows of its tables are
  in the caches: the kernel's arithmetic, its memory as little as it can be (median over the 32);
- the call's fixed cost, on 4 sub-environments (a kernel call of next to no work):
  ``operator`` (`torch.ops.market_envs.fill_with_costs`, as inductor's code calls it), ``Python
  kernel`` (`market_envs.native_fill.fill_with_costs_c`, which the operator dispatches to: the
  arguments made contiguous, the outputs allocated, the ctypes call) and ``ctypes call`` (the
  library's function on ready pointers).

The difference between "in the step" and "alone" is what the rest of the step costs the kernel
(its inputs and tables no longer in the caches); the operator's fixed cost comes on top of "in the
step". Medians over ``--rounds`` rounds.

    OMP_NUM_THREADS=1 python benchmarks/fill_call.py --envs 1024 --tickers 30 --mode shares
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from env_throughput import EPISODE, EVERY_COST, FEATURE_SETS, cpu_name, step_runner
from finrl_style_env import benchmark_panel

from market_envs import EnvConfig
from market_envs import native_fill

CAPTURED = 32
"""Steps whose kernel inputs are copied out for the kernel alone."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, default=1024)
    parser.add_argument("--tickers", type=int, default=30)
    parser.add_argument("--bars", type=int, default=2000)
    parser.add_argument("--mode", choices=["shares", "weights"], default="shares")
    parser.add_argument("--rounds", type=int, default=9, help="alternating rounds of each measurement")
    parser.add_argument("--steps", type=int, default=100, help="steps per timed run of a step")
    return parser.parse_args(argv)


class KernelTimer:
    """Stands in for the loaded library's `fill_with_costs`: calls it and records each call's
    time; the first `CAPTURED` calls after `capture()` also keep a copy of their inputs."""

    def __init__(self, kernel: Callable[..., None]) -> None:
        self.kernel = kernel
        self.times: list[float] = []
        self.captured: list[tuple] = []
        self.capturing = False
        names = [name for _, name in native_fill.c_parameters()]
        self.rows, self.columns = names.index("num_envs"), names.index("n")
        self.arrays = {names.index(name): name for name in ("orders", "holdings", "cash", "bars")}
        self.outputs = [names.index("holdings_out"), names.index("out")]

    def capture(self) -> None:
        self.captured, self.capturing = [], True

    def __call__(self, *arguments) -> None:
        start = time.perf_counter()
        self.kernel(*arguments)
        self.times.append(time.perf_counter() - start)
        if self.capturing and len(self.captured) < CAPTURED:
            self.captured.append(self._copy(arguments))

    def _copy(self, arguments: tuple) -> tuple:
        """The call's arguments with its arrays and outputs copied into tensors of their own
        (kept alive with the tuple); the open table and the market tables stay the env's (read in place)."""
        e, n = arguments[self.rows], arguments[self.columns]
        arguments, keep = list(arguments), []
        for index, name in self.arrays.items():
            count, c_type, dtype = e * n, ctypes.c_double, torch.float64
            if name == "bars":
                count, c_type, dtype = e, ctypes.c_int64, torch.int64
            elif name == "cash":
                count = e
            copy = torch.frombuffer((c_type * count).from_address(arguments[index]), dtype=dtype).clone()
            keep.append(copy)
            arguments[index] = copy.data_ptr()
        for index, count in zip(self.outputs, (e * n, len(native_fill.OUTPUTS) * e), strict=True):
            out = torch.empty(count, dtype=torch.float64)
            keep.append(out)
            arguments[index] = out.data_ptr()
        return tuple(arguments), keep


def per_call(run: Callable[[], object], calls: int) -> float:
    """Seconds per call of `run`, `calls` calls back to back."""
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls


def kernel_alone(kernel: Callable[..., None], arguments: tuple, calls: int = 4) -> float:
    """Seconds per call of `kernel` on one step's `arguments`, after a call that brings its inputs
    and its table rows into the caches."""
    kernel(*arguments)
    return per_call(lambda: kernel(*arguments), calls)


def fixed_costs(rounds: int) -> dict[str, float]:
    """The call's fixed cost (us) on 4 sub-environments x 30 stocks, no cost table, every way in."""
    e, n = 4, 30
    zeros = torch.zeros((e, n), dtype=torch.float64)
    arguments = {
        "orders": zeros,
        "holdings": zeros.clone(),
        "cash": torch.ones(e, dtype=torch.float64),
        "bars": torch.zeros(e, dtype=torch.int64),
        "open_prices": torch.ones((1, n), dtype=torch.float32),
        "half_spread": None,
        "impact": None,
        "fill_cap": None,
        "buy_cost": 0.001,
        "sell_cost": 0.001,
        "per_share": 0.005,
        "minimum": 1.0,
        "max_rate": 0.01,
        "terms": 0,
    }
    positional = list(arguments.values())
    holdings_out, out = torch.empty((e, n), dtype=torch.float64), torch.empty((8, e), dtype=torch.float64)
    pointers = [e, n, *(t.data_ptr() for t in positional[:5]), 0, None, 0, None, 0, None, 0, *positional[8:]]
    pointers += [holdings_out.data_ptr(), out.data_ptr()]
    kernel = native_fill.native_library().fill_with_costs
    ways = {
        "operator": lambda: native_fill.fill_with_costs_op(*positional),
        "Python kernel": lambda: native_fill.fill_with_costs_c(*positional),
        "ctypes call": lambda: kernel(*pointers),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, way in ways.items():
            times[name].append(per_call(way, 2000))
    return {name: statistics.median(t) * 1e6 for name, t in times.items()}


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    native = native_fill.native_library()
    if native is None:
        raise SystemExit("the C kernel is not available here (MARKET_ENVS_NATIVE=0, or no C compiler)")
    data = benchmark_panel(args.tickers, args.bars)
    flat = EnvConfig(episode_length=EPISODE, features=FEATURE_SETS["finrl"], short_selling=True, action_mode=args.mode)
    device = torch.device("cpu")
    run_flat = step_runner(data, args.envs, device, flat, True)
    run_costs = step_runner(data, args.envs, device, replace(flat, costs=EVERY_COST), True)
    timer = KernelTimer(native.fill_with_costs)
    native.fill_with_costs = timer  # the Python kernel looks it up on the library at each call
    try:
        flat_times, cost_times, in_step, alone = [], [], [], []
        for _ in range(args.rounds):
            flat_times.append(per_call(lambda: run_flat(1), args.steps))
            timer.times = []
            cost_times.append(per_call(lambda: run_costs(1), args.steps))
            in_step.append(sum(timer.times) / len(timer.times))
            if not timer.captured:
                timer.capture()
                run_costs(CAPTURED)
                timer.capturing = False
            alone.append(statistics.median(kernel_alone(timer.kernel, arguments) for arguments, _ in timer.captured))
    finally:
        native.fill_with_costs = timer.kernel
    fixed = fixed_costs(args.rounds)
    flat_ms, cost_ms = statistics.median(flat_times) * 1e3, statistics.median(cost_times) * 1e3
    rows = [
        ("flat step", flat_ms * 1e3),
        ("costs step", cost_ms * 1e3),
        ("costs step less flat step", (cost_ms - flat_ms) * 1e3),
        ("C kernel in the step", statistics.median(in_step) * 1e6),
        ("C kernel alone, same inputs", statistics.median(alone) * 1e6),
        *((f"fixed cost: {name}", value) for name, value in fixed.items()),
    ]
    print(
        f"the compiled step's fill with every cost term, CPU: torch {torch.__version__}; {cpu_name()} "
        f"({os.cpu_count()} cores, torch threads {torch.get_num_threads()}); N {args.tickers}, E {args.envs}, "
        f"{args.mode} mode; medians of {args.rounds} rounds; load average {os.getloadavg()[0]:.1f}\n"
    )
    print("| what | us per step or call |\n|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value:,.0f} |")
    print(f"\ntime ratio (costs / flat step): {cost_ms / flat_ms:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
