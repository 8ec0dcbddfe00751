"""What else could run the CPU's fill with costs: numba, a torch C++ extension or torch.compile alone,
against the C kernel called through ctypes (issue 41).

Each times the rows-layout stand-in of `fill_layouts.py` (`fill`, the same passes and row sums as
the env's fill with every term; `fill_native.c`'s `costly_fill` in C) on the same inputs, gathered
by bar, milliseconds per call (median of repeats x calls), and how long it takes to build:

- ``torch.compile``: `fill_layouts.fill` under inductor (what the env runs with
  ``MARKET_ENVS_NATIVE=0 compile=True``);
- ``C (ctypes)``: `fill_native.c` built by `market_envs.native_fill.build_native` with the env's flags, called
  as the env calls its kernel;
- ``numba``: `costly_fill` written again in Python for ``numba.njit`` (the same arithmetic in the
  same order), with ``fastmath={"reassoc", "nsz", "arcp"}`` (no ``contract``: no fused
  multiply-adds, as the env's ``-ffp-contract=off``), so that it may vectorise the row sums as
  the C kernel's OpenMP SIMD reductions do; skipped without numba;
- ``C++ extension``: `fill_native.c` inside a ``torch.utils.cpp_extension.load_inline`` operator
  taking tensors (the env's flags), called as ``torch.ops``.

    OMP_NUM_THREADS=1 python benchmarks/fill_alternatives.py --envs 1024 --tickers 30
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from fill_layouts import NATIVE_SOURCE, as_step, fill, inputs, milliseconds, native_kernels  # noqa: E402

from market_envs.native_fill import C_FLAGS  # noqa: E402


def numba_kernel():
    """`costly_fill` of fill_native.c for numba, or None where numba is not installed."""
    try:
        import numba
        import numpy as np
    except ImportError:
        return None

    @numba.njit(fastmath={"reassoc", "nsz", "arcp"}, error_model="numpy", cache=False)
    def costly_fill(holdings, price_table, actions, hs_table, imp_table, cap_table, t, cash_in, holdings_out, out):
        num_envs, n = holdings.shape
        sells = np.empty(n)
        buys = np.empty(n)
        for e in range(num_envs):
            bar = t[e]
            unfilled_shares = unfilled_value = proceeds = needed = linear = count = ordered_value = sale_fees = 0.0
            for j in range(n):
                price, hs, imp, cap = price_table[bar, j], hs_table[bar, j], imp_table[bar, j], cap_table[bar, j]
                delta = np.trunc(np.float64(actions[e, j]) * 100.0)
                sell = max(min(max(-delta, 0.0), holdings[e, j] + 100.0), 0.0)
                buy = max(delta, 0.0)
                ordered = sell + buy
                sell = min(sell, cap)
                buy = min(buy, cap)
                unfilled = ordered - (sell + buy)
                unfilled_shares += unfilled
                unfilled_value += unfilled * price
                filled = sell + buy
                fee = max(filled * price * 0.001 + filled * 0.005, 1.0)
                rate = min(hs + imp * np.sqrt(max(filled, 1e-300)), 1.0)
                sold, wanted = sell * price, buy * price
                sale_fee = min(sold * min(1.0 - rate, 0.01), fee)
                buy_fee = min(wanted * 0.01, fee)
                proceeds += sold - sold * rate - sale_fee
                needed += wanted + wanted * rate + buy_fee
                linear += wanted * 1.001 + wanted * rate + buy * 0.005
                count += 1.0 if buy > 0.0 else 0.0
                ordered_value += filled * price
                sale_fees += sale_fee
                sells[j] = sell
                buys[j] = buy
            cash = cash_in[e] + proceeds
            scale = max(cash - count, 0.0) / max(linear, 1e-300) if needed > cash else 1.0
            traded = buy_fees = slipped = spread = bill = borrow = worth = 0.0
            for j in range(n):
                price, hs, imp = price_table[bar, j], hs_table[bar, j], imp_table[bar, j]
                bought = np.floor(buys[j] * scale)
                rate = min(hs + imp * np.sqrt(max(sells[j] + bought, 1e-300)), 1.0)
                value, bought_value = (sells[j] + bought) * price, bought * price
                buy_fee = min(bought_value * 0.01, max(bought_value * 0.001 + bought * 0.005, 1.0))
                bill += bought_value + bought_value * rate + buy_fee
                traded += value
                buy_fees += buy_fee
                slipped += value * rate
                spread += value * hs
                held = holdings[e, j] - sells[j] + bought
                holdings_out[e, j] = held
                borrow += min(held, 0.0) * price
                worth += held * price
            out[e, 0] = cash - bill - borrow * 1e-5 + worth
            out[e, 1] = traded
            out[e, 2] = sale_fees + buy_fees
            out[e, 3] = slipped
            out[e, 4] = spread
            out[e, 5] = ordered_value + unfilled_value
            out[e, 6] = unfilled_shares
            out[e, 7] = unfilled_value

    def step(x, holdings, actions, t, cash):
        holdings_out = torch.empty_like(holdings)
        out = torch.empty((holdings.shape[0], 8), dtype=torch.float64)
        costly_fill(
            holdings.numpy(),
            x["price"].numpy(),
            actions.numpy(),
            x["half_spread"].numpy(),
            x["impact"].numpy(),
            x["cap"].numpy(),
            t.numpy(),
            cash.numpy(),
            holdings_out.numpy(),
            out.numpy(),
        )
        return (holdings_out, *out.unbind(1))

    return step


EXTENSION = """
#include <torch/extension.h>
extern "C" {
#include "SOURCE"
}
std::vector<at::Tensor> costly(at::Tensor holdings, at::Tensor price, at::Tensor actions, at::Tensor half_spread,
                               at::Tensor impact, at::Tensor cap, at::Tensor t, at::Tensor cash) {
    auto holdings_out = at::empty_like(holdings);
    auto out = at::empty({holdings.size(0), 8}, holdings.options());
    costly_fill(holdings.size(0), holdings.size(1), holdings.data_ptr<double>(), price.data_ptr<double>(),
                actions.data_ptr<float>(), half_spread.data_ptr<double>(), impact.data_ptr<double>(),
                cap.data_ptr<double>(), t.data_ptr<int64_t>(), cash.data_ptr<double>(),
                holdings_out.data_ptr<double>(), out.data_ptr<double>());
    return {holdings_out, out};
}
TORCH_LIBRARY(fill_alternatives, m) { m.def("costly", &costly); }
"""


def extension_kernel(build_dir: Path):
    """`costly_fill` of fill_native.c as a torch C++ operator (load_inline), with the env's flags."""
    from torch.utils.cpp_extension import load_inline

    flags = [f for f in C_FLAGS if f not in ("-shared", "-fPIC")] + ["-fpermissive", "-w"]  # C's malloc without casts
    load_inline(
        "fill_alternatives",
        EXTENSION.replace("SOURCE", str(NATIVE_SOURCE)),
        extra_cflags=flags,
        build_directory=str(build_dir),
        is_python_module=False,
        verbose=False,
    )
    op = torch.ops.fill_alternatives.costly

    def step(x, holdings, actions, t, cash):
        holdings_out, out = op(holdings, x["price"], actions, x["half_spread"], x["impact"], x["cap"], t, cash)
        return (holdings_out, *out.unbind(1))

    return step


def timed_build(make):
    start = time.perf_counter()
    made = make()
    return made, time.perf_counter() - start


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="1024", help="comma-separated E")
    parser.add_argument("--tickers", default="30", help="comma-separated N")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--build-dir", type=Path, help="keep the builds here (a second run reuses the C++ extension)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if torch.backends.cpu.get_cpu_capability() == "AVX512":
        torch._inductor.config.cpp.simdlen = 256  # as the env compiles its step
    with tempfile.TemporaryDirectory() as temporary:
        scratch = args.build_dir or Path(temporary)
        c, c_build = timed_build(lambda: native_kernels(Path(scratch) / "c")["costly"])
        numba_step, numba_build = timed_build(numba_kernel)
        (Path(scratch) / "ext").mkdir(parents=True, exist_ok=True)
        extension, extension_build = timed_build(lambda: extension_kernel(Path(scratch) / "ext"))
        print(
            f"torch {torch.__version__}; load {os.getloadavg()[0]:.1f}; build s: C {c_build:.1f}, "
            f"C++ extension {extension_build:.1f}, numba import {numba_build:.1f} (its compilation is in the "
            f"first call)"
        )
        print("| N | E | torch.compile ms | C (ctypes) ms | numba ms | C++ extension ms | numba first call s |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for n in (int(v) for v in args.tickers.split(",")):
            for num_envs in (int(v) for v in args.envs.split(",")):
                x = inputs(num_envs, n)
                step, arguments = as_step(fill(1), "rows", True, x, compile=True)
                expected = step(*arguments)
                times = {"compile": milliseconds(step, arguments, args.repeats, args.calls)}
                first = float("nan")
                for name, kernel in (("C", c), ("numba", numba_step), ("extension", extension)):
                    if kernel is None:
                        times[name] = float("nan")
                        continue
                    bound = functools.partial(kernel, x)
                    start = time.perf_counter()
                    got = bound(*arguments)
                    if name == "numba":
                        first = time.perf_counter() - start
                    for want, have in zip(expected, got, strict=True):  # each computes the stand-in
                        torch.testing.assert_close(have, want, rtol=1e-9, atol=1e-6)
                    times[name] = milliseconds(bound, arguments, args.repeats, args.calls)
                print(
                    f"| {n} | {num_envs} | {times['compile']:.3f} | {times['C']:.3f} | {times['numba']:.3f} | "
                    f"{times['extension']:.3f} | {first:.1f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
