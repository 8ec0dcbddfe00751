"""The fill with costs by hand for the CPU: `fill_costs.c`, built once per machine with its C compiler.

On the CPU the env's step takes this kernel for the terms of `CostModel`, eager and under
torch.compile alike (`market_envs.env._fill`); it computes what `_fill_with_costs` computes
(tests/test_native_fill.py). It exists for speed: the exact rules need about 14 sums per
sub-environment, which torch's kernels pay for with many passes over memory (eager) or with
sums ended lane by lane (inductor), while this one takes a row in two passes with one register
per sum, in a version specialised for the terms that are on. With it the step with every term
costs about what the flat-rate step costs (benchmarks/RESULTS.md, "Costs in the env step",
fifth pass). CUDA, and a CPU where it cannot be built, keep the torch kernels.

The library is built with ``$CC`` (default ``cc``) into ``$XDG_CACHE_HOME/market_envs/native``
(default ``~/.cache/...``), one file per source, flags and CPU, so that a shared home directory
serves hosts of different CPUs (it is built for the CPU it runs on). Set
``MARKET_ENVS_NATIVE=0`` to use the torch kernels on the CPU too; a machine without a compiler
falls back to them with one warning.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import subprocess
import tempfile
import warnings
from pathlib import Path

import torch
from torch import Tensor

SOURCE = Path(__file__).with_name("fill_costs.c")
FLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
         "-shared", "-fPIC")  # fmt: skip
"""-ffp-contract=off: no fused multiply-adds, so each product rounds as torch's does.
-fno-math-errno (sqrt need not set errno) and -fno-trapping-math (floating-point exceptions need
not be raised where the source raises them) change no result; without them gcc leaves the loops
with square roots, floors and selects scalar or half-vectorised, 2x to 3.5x slower
(benchmarks/fill_layouts.py --native)."""
OUTPUTS = ("cash", "traded", "commission", "spread", "impact", "ordered", "unfilled_value", "unfilled_shares")
"""The rows of the kernel's [8, E] result, in `market_envs.env._Fill`'s order after the holdings."""
BUILD_SECONDS = 120


def enabled() -> bool:
    """Whether the env may take the native kernel (``MARKET_ENVS_NATIVE`` is not "0")."""
    return os.environ.get("MARKET_ENVS_NATIVE", "1") != "0"


def _cpu_identity() -> str:
    """What a library built with -march=native depends on: the CPU's model and feature flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "\n".join(sorted({line for line in lines if line.startswith(("model name", "flags"))}))
    except OSError:
        return platform.processor() or platform.machine()


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "market_envs" / "native"


def build(directory: Path | None = None, source: Path = SOURCE) -> Path:
    """Compile `source` into a shared library in `directory` (default: the cache), once: an
    existing library of the same source, flags and CPU is reused.

    Written under a temporary name and renamed, so that processes building at once (dask
    workers) never load a half-written file. Raises OSError or CalledProcessError.
    """
    compiler = os.environ.get("CC", "cc")
    text = source.read_bytes()
    key = hashlib.sha256(b"\0".join([text, " ".join((compiler, *FLAGS)).encode(), _cpu_identity().encode()]))
    directory = directory or _cache_dir()
    library = directory / f"{source.stem}-{key.hexdigest()[:16]}.so"
    if library.exists():
        return library
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        partial = Path(scratch) / library.name
        subprocess.run([compiler, *FLAGS, "-o", str(partial), str(source), "-lm"], check=True,
                       capture_output=True, timeout=BUILD_SECONDS)  # fmt: skip
        os.replace(partial, library)
    return library


@functools.cache
def library() -> ctypes.CDLL | None:
    """The loaded kernel, or None (disabled, or it could not be built: warned once)."""
    if not enabled():
        return None
    try:
        native = ctypes.CDLL(str(build()))
    except (OSError, subprocess.SubprocessError) as error:
        detail = getattr(error, "stderr", b"") or b""
        warnings.warn(
            f"market_envs: the CPU kernel for trading costs could not be built ({error}"
            f"{': ' + detail.decode(errors='replace').strip().splitlines()[0] if detail.strip() else ''}); "
            "the torch kernel is used instead (slower with costs; set MARKET_ENVS_NATIVE=0 to silence this)",
            RuntimeWarning, stacklevel=2,
        )  # fmt: skip
        return None
    native.fill_with_costs.restype = None
    native.fill_with_costs.argtypes = (
        [ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * 6
        + [ctypes.c_void_p, ctypes.c_int64] * 3 + [ctypes.c_double] * 5 + [ctypes.c_int64] * 2
        + [ctypes.c_void_p] * 2
    )  # fmt: skip
    return native


def available() -> bool:
    """Whether the kernel is loaded (building it on first call); the env asks once per construction."""
    return library() is not None


def _table_pointer(table: Tensor | None) -> tuple[int | None, int]:
    """A market table's pointer and row stride: 0 for a [1, N] row that every bar shares."""
    if table is None:
        return None, 0
    return table.data_ptr(), 0 if table.shape[0] == 1 else table.shape[1]


def fill_with_costs(
    sells: Tensor, buys: Tensor, price: Tensor, holdings: Tensor, cash: Tensor, bars: Tensor,
    half_spread: Tensor | None, impact: Tensor | None, fill_cap: Tensor | None,
    buy_cost: float, sell_cost: float, per_share: float, minimum: float, max_rate: float,
    per_order: bool, weights_mode: bool,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """The fill of `market_envs.env._fill_with_costs` on CPU float64 tensors: the new holdings
    [E, N] and the [8, E] rows of `OUTPUTS`. The market tables are [T, N], [1, N] or None, read
    at each sub-environment's fill bar `bars` (int64 [E])."""
    native = library()
    if native is None:
        raise RuntimeError("the native fill is not available (see market_envs.native.library)")
    num_envs, n = sells.shape
    inputs = [x.contiguous() for x in (sells, buys, price, holdings, cash, bars)]
    tables = [None if x is None else x.contiguous() for x in (half_spread, impact, fill_cap)]
    holdings_out = torch.empty_like(inputs[3])
    out = torch.empty((len(OUTPUTS), num_envs), dtype=torch.float64)
    market = [value for table in tables for value in _table_pointer(table)]
    native.fill_with_costs(
        num_envs, n, *(x.data_ptr() for x in inputs), *market,
        buy_cost, sell_cost, per_share, minimum, max_rate, int(per_order), int(weights_mode),
        holdings_out.data_ptr(), out.data_ptr(),
    )  # fmt: skip
    return holdings_out, out


# `fill_with_costs` as an operator that torch.compile calls from its kernel as it is. Defined with
# torch.library's lower-level API, a CPU kernel and a fake one for tracing, rather than with
# `torch.library.custom_op`, whose autograd layers a step never needs and which cost about twice as
# much per call (benchmarks/RESULTS.md, "Costs in the env step", fifth pass).
_LIBRARY = torch.library.Library("market_envs", "DEF")
_LIBRARY.define(
    "fill_with_costs(Tensor sells, Tensor buys, Tensor price, Tensor holdings, Tensor cash, Tensor bars, "
    "Tensor? half_spread, Tensor? impact, Tensor? fill_cap, float buy_cost, float sell_cost, float per_share, "
    "float minimum, float max_rate, bool per_order, bool weights_mode) -> (Tensor, Tensor)"
)
_LIBRARY.impl("fill_with_costs", fill_with_costs, "CPU")


@torch.library.register_fake("market_envs::fill_with_costs", lib=_LIBRARY)
def _(sells, buys, price, holdings, cash, bars, half_spread, impact, fill_cap, *rules):
    return torch.empty_like(holdings), holdings.new_empty((len(OUTPUTS), holdings.shape[0]))


fill_with_costs_op = torch.ops.market_envs.fill_with_costs.default
