"""Would another memory layout make the compiled step's fill with costs cheaper? (issue 30)

Under torch.compile on the CPU, `market_envs.env`'s fill with every cost term spends much of
its time finishing row sums: the step's tensors are [E, N] (a row of N stocks per
sub-environment), inductor vectorises along the row and ends each of a row's many float64
sums lane by lane. This script times a stand-in of the fill in three layouts, flat rate
and with costs, so that the idea "lay the stocks out as the outer dimension" can be judged
before the env's state is rewritten for it:

- ``rows [E, N]``: the env's layout;
- ``stocks [N, E]``: stock-major, every row sum a vertical sum across sub-environments;
- ``blocked [E/8, N, 8]``: 8 sub-environments interleaved, a row sum a vertical sum over N
  with 8 lanes of envs, no lane-by-lane end.

Each layout is timed twice: with its inputs already laid out (the best case: a state and
tables stored that way, a bar's rows taken once outside the timing) and with the prices and
the cost rows gathered per sub-environment from [T, N] tables by its bar, as the env must
(each sub-environment is at its own bar), and the actions arriving [E, N] from the policy.

The stand-in (`fill`) keeps what sets the fill's cost: the same passes (the participation
cap, the commission with a minimum and a cap, half-spread + square-root impact, the cash
limit of the buys decided from the full orders' exact bill and its linear bound, rounding,
the bought shares' costs) and the same 14 row sums, against the flat rate's 4
(`flat_fill`). It is not the env's rule set in every detail; the env's own kernels are
timed by `env_throughput.py --compare-costs`.

    OMP_NUM_THREADS=1 python benchmarks/fill_layouts.py --envs 4096 --tickers 30,100

and where the rows layout's time goes, by instruction (Linux `perf`):

    perf record -o /tmp/fill.perf python benchmarks/fill_layouts.py --layouts rows --tickers 30 --calls 3000 --repeats 1
    perf report -i /tmp/fill.perf --stdio --sort dso,sym | head     # the compiled kernels, each its own .so
    perf annotate -i /tmp/fill.perf --stdio --dsos KERNEL.so kernel > /tmp/kernel.txt
    python benchmarks/fill_layouts.py --lane-share /tmp/kernel.txt

``--lane-share`` sums the samples on the instructions that finish a float64 row sum lane
by lane (ATen's generic `vec_reduce_all`: lanes extracted, stored to the stack and added
one at a time, as its SIMD versions exist for float only).

``--native`` times the rows layout's stand-ins written by hand in C (`fill_native.c`, built
by `market_envs.native_fill.build_native` with the env's flags) beside torch eager and compiled: the
measurement that led to the env's own C kernel (`market_envs/fill_costs.c`).

    OMP_NUM_THREADS=1 python benchmarks/fill_layouts.py --native --envs 1024,4096 --tickers 30,100
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from torch import Tensor  # noqa: E402

from market_envs.native_fill import build_native  # noqa: E402

BARS = 2000
LANES = 8  # the blocked layout's sub-environments per block: 8 float64 lanes, inductor's vector width here


def orders(actions: Tensor, holdings: Tensor) -> tuple[Tensor, Tensor]:
    """Sells and buys in shares (both >= 0) of actions in [-1, 1], at most 100 shares short."""
    delta = torch.trunc(actions * 100.0)
    return torch.minimum((-delta).clamp_min(0.0), holdings + 100.0).clamp_min(0.0), delta.clamp_min(0.0)


def flat_fill(axis: int) -> Callable[..., tuple[Tensor, ...]]:
    """The flat rate's fill; row sums over `axis` (the stocks' axis of the layout)."""

    def fill(holdings, price, actions, half_spread, impact, cap, cash):
        rows, per_env = (lambda x: x.sum(axis)), (lambda x: x.unsqueeze(axis))
        sells, buys = orders(actions, holdings)
        sold = rows(sells * price)
        cash = cash + sold * 0.999
        wanted = rows(buys * price)
        scale = torch.where(
            wanted * 1.001 > cash, cash.clamp_min(0.0) / (wanted * 1.001).clamp_min(1e-300), torch.ones_like(cash)
        )
        bought = torch.floor(buys * per_env(scale))
        bought_value = rows(bought * price)
        holdings = holdings - sells + bought
        return holdings, cash - bought_value * 1.001 + rows(holdings * price), sold + bought_value, sold + wanted

    return fill


def fill(axis: int) -> Callable[..., tuple[Tensor, ...]]:
    """The stand-in of the fill with every cost term (see the module docstring)."""

    def costly(holdings, price, actions, half_spread, impact, cap, cash):
        rows, per_env = (lambda x: x.sum(axis)), (lambda x: x.unsqueeze(axis))
        sells, buys = orders(actions, holdings)
        ordered = sells + buys
        sells, buys = torch.minimum(sells, cap), torch.minimum(buys, cap)
        unfilled = ordered - (sells + buys)
        unfilled_shares, unfilled_value = rows(unfilled), rows(unfilled * price)
        filled = sells + buys
        fee = (filled * price * 0.001 + filled * 0.005).clamp_min(1.0)
        rate = (half_spread + impact * filled.clamp_min(1e-300).sqrt()).clamp_max(1.0)
        sold, wanted = sells * price, buys * price
        sale_fee = torch.minimum(sold * torch.minimum(1.0 - rate, torch.full_like(rate, 0.01)), fee)
        buy_fee = torch.minimum(wanted * 0.01, fee)
        cash = cash + rows(sold - sold * rate - sale_fee)
        needed = rows(wanted + wanted * rate + buy_fee)
        linear = rows(wanted * 1.001 + wanted * rate + buys * 0.005)
        count = rows((buys > 0).double())
        scale = torch.where(
            needed > cash, (cash - count).clamp_min(0.0) / linear.clamp_min(1e-300), torch.ones_like(cash)
        )
        bought = torch.floor(buys * per_env(scale))
        rate = (half_spread + impact * (sells + bought).clamp_min(1e-300).sqrt()).clamp_max(1.0)
        value, bought_value = (sells + bought) * price, bought * price
        buy_fee = torch.minimum(bought_value * 0.01, (bought_value * 0.001 + bought * 0.005).clamp_min(1.0))
        left = cash - rows(bought_value + bought_value * rate + buy_fee)
        holdings = holdings - sells + bought
        borrow = rows(holdings.clamp_max(0.0) * price) * 1e-5
        return (
            holdings,
            left - borrow + rows(holdings * price),
            rows(value),
            rows(sale_fee + buy_fee),
            rows(value * rate),
            rows(value * half_spread),
            rows(filled * price) + unfilled_value,
            unfilled_shares,
            unfilled_value,
        )

    return costly


def inputs(num_envs: int, n: int) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(0)

    def uniform(shape, scale=1.0, low=0.0, dtype=torch.float64):
        return torch.rand(shape, generator=g, dtype=dtype) * scale + low

    return {
        "price": uniform((BARS, n), 100.0, 1.0),
        "half_spread": uniform((BARS, n), 1e-4),
        "impact": uniform((BARS, n), 1e-3),
        "cap": uniform((BARS, n), 1000.0),
        "t": torch.randint(0, BARS, (num_envs,), generator=g),
        "holdings": uniform((num_envs, n), 50.0),
        "actions": uniform((num_envs, n), 2.0, -1.0, torch.float32),
        "cash": torch.full((num_envs,), 1e6, dtype=torch.float64),
    }


TABLES = ("price", "half_spread", "impact", "cap")


def as_step(
    kernel: Callable, layout: str, gathered: bool, x: dict[str, Tensor], compile: bool = True
) -> tuple[Callable, tuple]:
    """The kernel as a step function of (holdings, actions, t, cash), its tables read per env by
    bar, and its arguments; torch.compile'd unless `compile` is False."""
    num_envs, n = x["holdings"].shape
    blocks = num_envs // LANES

    def arrange(rows: Tensor) -> Tensor:  # [E, N] -> the layout
        if layout == "stocks":
            return rows.t()
        if layout == "blocked":
            return rows.view(blocks, LANES, n).permute(0, 2, 1)
        return rows

    def arrange_cash(cash: Tensor) -> Tensor:
        return cash.view(blocks, LANES) if layout == "blocked" else cash

    if gathered:  # the state stored in the layout; tables gathered by bar; actions [E, N]

        def step(holdings, actions, t, cash):
            price, half_spread, impact, cap = (arrange(x[name].index_select(0, t)) for name in TABLES)
            return kernel(holdings, price, arrange(actions.double()), half_spread, impact, cap, arrange_cash(cash))

        state = arrange(x["holdings"]).contiguous()
    else:  # best case: every input already in the layout (a bar's rows taken once, outside the timing)
        rows = {name: arrange(x[name].index_select(0, x["t"])).contiguous() for name in TABLES}
        ready = arrange(x["actions"].double()).contiguous()

        def step(holdings, actions, t, cash):
            return kernel(
                holdings, rows["price"], ready, rows["half_spread"], rows["impact"], rows["cap"], arrange_cash(cash)
            )

        state = arrange(x["holdings"]).contiguous()
    arguments = (state, x["actions"], x["t"], x["cash"])
    if not compile:
        return step, arguments
    torch._dynamo.reset()  # each case its own compilation (one `step` code object serves them all)
    return torch.compile(step), arguments


def milliseconds(step: Callable, args: tuple, repeats: int, calls: int) -> float:
    for _ in range(5):  # compile and warm up
        step(*args)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            step(*args)
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times) * 1e3


LANE_BY_LANE = ("vextractf64x2", "valignq", "vmovhpd", "vaddsd", "vunpckhpd", "vpermpd", "vshufpd")


def lane_share(annotated: str) -> tuple[float, float]:
    """(all samples, samples on lane-by-lane ends of row sums), in percent of a `perf annotate
    --stdio` listing of one kernel: the lane moves of `LANE_BY_LANE` and scalar stores to the stack."""
    total = lanes = 0.0
    for line in annotated.splitlines():
        match = re.match(r"\s*([0-9.]+)\s*:\s*[0-9a-f]+:\s*(\S+)\s*(.*)", line)
        if not match:
            continue
        share, op, operands = float(match.group(1)), match.group(2), match.group(3)
        total += share
        if op in LANE_BY_LANE or (op == "vmovsd" and "(%rbp)" in operands):
            lanes += share
    return total, lanes


NATIVE_SOURCE = Path(__file__).with_name("fill_native.c")


def native_kernels(build_dir: Path) -> dict[str, Callable]:
    """`flat_fill` and `fill` of the rows layout, gathered by bar, from fill_native.c built with the
    system's C compiler: step functions of (holdings, actions, t, cash) as `as_step` makes, over
    the tables of an `inputs` dict given as their first argument."""
    native = ctypes.CDLL(str(build_native(build_dir, NATIVE_SOURCE)))  # with the env's flags
    pointer = ctypes.c_void_p

    def call(function, width: int, x: dict[str, Tensor], holdings, actions, t, cash, tables):
        num_envs, n = holdings.shape
        holdings_out = torch.empty_like(holdings)
        out = torch.empty((num_envs, width), dtype=torch.float64)
        arguments = [holdings, x["price"], actions, *(x[name] for name in tables), t, cash, holdings_out, out]
        function(ctypes.c_int64(num_envs), ctypes.c_int64(n), *(pointer(a.data_ptr()) for a in arguments))
        return (holdings_out, *out.unbind(1))

    def flat(x, holdings, actions, t, cash):
        return call(native.flat_fill, 4, x, holdings, actions, t, cash, ())[:4]

    def costly(x, holdings, actions, t, cash):
        return call(native.costly_fill, 8, x, holdings, actions, t, cash, TABLES[1:])

    return {"flat": flat, "costly": costly}


def native_table(args: argparse.Namespace) -> None:
    """--native: the rows layout, gathered by bar, in torch (eager and compiled) and by hand in C."""
    print(
        "| N | E | flat eager ms | flat compiled ms | flat C ms | with costs eager ms | with costs compiled ms "
        "| with costs C ms | C with costs / compiled flat | C with costs / eager flat |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as build_dir:
        kernels = native_kernels(Path(build_dir))
        for n in (int(v) for v in args.tickers.split(",")):
            for num_envs in (int(v) for v in args.envs.split(",")):
                x = inputs(num_envs, n)
                times = {}
                for name, kernel in (("flat", flat_fill(1)), ("costly", fill(1))):
                    for compiled in (False, True):
                        step, arguments = as_step(kernel, "rows", True, x, compile=compiled)
                        times[name, compiled] = milliseconds(step, arguments, args.repeats, args.calls)
                    native = functools.partial(kernels[name], x)
                    times[name, "C"] = milliseconds(native, arguments, args.repeats, args.calls)
                print(
                    f"| {n} | {num_envs} | {times['flat', False]:.3f} | {times['flat', True]:.3f} | "
                    f"{times['flat', 'C']:.3f} | {times['costly', False]:.3f} | {times['costly', True]:.3f} | "
                    f"{times['costly', 'C']:.3f} | {times['costly', 'C'] / times['flat', True]:.2f} | "
                    f"{times['costly', 'C'] / times['flat', False]:.2f} |",
                    flush=True,
                )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="4096", help="comma-separated E (multiples of 8)")
    parser.add_argument("--tickers", default="30,100", help="comma-separated N")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--layouts", default="rows,stocks,blocked", help="comma-separated layouts to time")
    parser.add_argument(
        "--lane-share", type=Path, help="a `perf annotate --stdio` listing: print its lane-by-lane share"
    )
    parser.add_argument(
        "--native",
        action="store_true",
        help="time the rows layout by hand in C (fill_native.c) beside torch, eager and compiled",
    )
    args = parser.parse_args(argv)
    if args.lane_share is not None:
        total, lanes = lane_share(args.lane_share.read_text())
        print(f"{lanes:.1f}% of {total:.1f}% of the kernel's samples finish row sums lane by lane")
        return 0
    if torch.backends.cpu.get_cpu_capability() == "AVX512":
        torch._inductor.config.cpp.simdlen = 256  # as the env compiles its step (market_envs.env._compile_options)
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}; median ms per call of {args.repeats} x {args.calls}"
    )
    if args.native:
        native_table(args)
        return 0
    print("| N | E | layout | inputs | flat ms | with costs ms | ratio |\n|---:|---:|---|---|---:|---:|---:|")
    layouts = args.layouts.split(",")
    cases = [
        (layout, gathered)
        for layout in ("rows", "stocks", "blocked")
        if layout in layouts
        for gathered in (False, True)
    ]
    for n in (int(v) for v in args.tickers.split(",")):
        for num_envs in (int(v) for v in args.envs.split(",")):
            x = inputs(num_envs, n)
            for layout, gathered in cases:
                axis = 0 if layout == "stocks" else 1
                flat_ms = milliseconds(*as_step(flat_fill(axis), layout, gathered, x), args.repeats, args.calls)
                cost_ms = milliseconds(*as_step(fill(axis), layout, gathered, x), args.repeats, args.calls)
                source = "gathered by bar" if gathered else "laid out already"
                print(
                    f"| {n} | {num_envs} | {layout} | {source} | {flat_ms:.3f} | {cost_ms:.3f} | {cost_ms / flat_ms:.2f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
