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
falls back to them with one warning (and fails tests/test_native_fill.py, which skips its tests of
the kernel only under ``MARKET_ENVS_NATIVE=0``).

The kernel's interface is declared once, in `INTERFACE`: the ctypes types (`argtypes`), the
operator's schema (`schema`) and the C call are generated from it, and the tests read
fill_costs.c's signature and its ``TERM_*`` bits and fail when they differ from `INTERFACE` and
`TERM_FLAGS`. Which terms are on comes from `CostModel.terms` (`term_flags`).
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
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, NamedTuple

import torch
from torch import Tensor

if TYPE_CHECKING:
    from market_envs.costs import Terms

SOURCE = Path(__file__).with_name("fill_costs.c")
FLAGS = (
    "-O3",
    "-march=native",
    "-fopenmp-simd",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-shared",
    "-fPIC",
)
"""-ffp-contract=off: no fused multiply-adds, so each product rounds as torch's does.
-fno-math-errno (sqrt need not set errno) and -fno-trapping-math (floating-point exceptions need
not be raised where the source raises them) change no result; without them gcc leaves the loops
with square roots, floors and selects scalar or half-vectorised, 2x to 3.5x slower
(benchmarks/fill_layouts.py --native)."""
OUTPUTS = ("cash", "traded", "commission", "spread", "impact", "ordered", "unfilled_value", "unfilled_shares")
"""The rows of the kernel's [8, E] result, in `market_envs.env._Fill`'s order after the holdings."""
BUILD_SECONDS = 120


class Arg(NamedTuple):
    """One parameter of the kernel's interface (`INTERFACE`)."""

    name: str  # in fill_costs.c's signature, and in the operator's schema where it is an operator argument
    kind: Literal["rows", "columns", "array", "table", "real", "flags", "output"]
    element: str = "double"  # the C type of an array's elements
    term: str = ""  # a table: the term of `TERM_FLAGS` whose table it is (given exactly when the term is on)


INTERFACE: tuple[Arg, ...] = (
    Arg("num_envs", "rows"),
    Arg("n", "columns"),
    Arg("sells", "array"),
    Arg("buys", "array"),
    Arg("price", "array"),
    Arg("holdings", "array"),
    Arg("cash", "array"),
    Arg("bars", "array", "int64_t"),
    Arg("half_spread", "table", term="spread"),
    Arg("impact", "table", term="impact"),
    Arg("fill_cap", "table", term="participation"),
    Arg("buy_cost", "real"),
    Arg("sell_cost", "real"),
    Arg("per_share", "real"),
    Arg("minimum", "real"),
    Arg("max_rate", "real"),
    Arg("terms", "flags"),
    Arg("holdings_out", "output"),
    Arg("out", "output"),
)
"""The interface of `fill_with_costs` in fill_costs.c, declared once: the C parameters
(`c_parameters`), the ctypes types, the operator's schema (`schema`) and the call are generated
from it, and tests/test_native_fill.py reads the C signature and fails when it differs.

The kinds: ``rows`` and ``columns``, E and N of the [E, N] orders (int64_t); ``array``, a tensor
read whole (``const element *``, made contiguous; ``Tensor`` in the schema); ``table``, a market
table [T, N] or [1, N], or None where the term is off (``const double *`` and its row stride
``<name>_stride``, 0 for a [1, N] row; ``Tensor?``); ``real``, a rule (``double``; ``float``);
``flags``, the bits of `TERM_FLAGS` (``int64_t``; ``int``); ``output``, the results, made by
the call (``double *``): the new holdings [E, N] and the [8, E] rows of `OUTPUTS`."""

TERM_FLAGS = ("spread", "impact", "participation", "per_order_commission", "weights_mode")
"""Bit k of the kernel's ``terms`` is on when ``CostModel.terms()`` has this term on (the last
one: the env runs in weights mode); fill_costs.c names bit k ``TERM_<NAME>`` (tests hold them
equal). The tables' bits are set exactly when the table is given (`fill_with_costs` checks it)."""

_C_TYPES = {"int64_t": ctypes.c_int64, "double": ctypes.c_double}
_SCHEMA_TYPES = {"array": "Tensor", "table": "Tensor?", "real": "float", "flags": "int"}
OPERATOR_ARGS = tuple(arg for arg in INTERFACE if arg.kind in _SCHEMA_TYPES)
"""The operator's arguments, in order: the parameters of `fill_with_costs` and of its schema."""
_OUTPUTS = tuple(arg.name for arg in INTERFACE if arg.kind == "output")
_HOLDINGS = [arg.name for arg in OPERATOR_ARGS].index("holdings")


def c_parameters() -> list[tuple[str, str]]:
    """The C signature that `INTERFACE` declares: (type, name) per parameter, types spelled as
    in fill_costs.c (``const double *``, ``int64_t``)."""
    spelled = {"rows": "int64_t", "columns": "int64_t", "real": "double", "flags": "int64_t", "output": "double *"}
    parameters = []
    for arg in INTERFACE:
        if arg.kind == "array":
            parameters.append((f"const {arg.element} *", arg.name))
        elif arg.kind == "table":
            parameters += [("const double *", arg.name), ("int64_t", f"{arg.name}_stride")]
        else:
            parameters.append((spelled[arg.kind], arg.name))
    return parameters


def argtypes() -> list[type]:
    """The ctypes types of `c_parameters`: a pointer is a ``c_void_p`` (the call passes addresses)."""
    return [ctypes.c_void_p if c_type.endswith("*") else _C_TYPES[c_type] for c_type, _ in c_parameters()]


def schema() -> str:
    """The torch operator's schema of `fill_with_costs`, from `INTERFACE`."""
    arguments = ", ".join(f"{_SCHEMA_TYPES[arg.kind]} {arg.name}" for arg in OPERATOR_ARGS)
    return f"fill_with_costs({arguments}) -> ({', '.join('Tensor' for _ in _OUTPUTS)})"


def term_flags(terms: Terms, weights_mode: bool) -> int:
    """The kernel's ``terms`` argument: the bits of `TERM_FLAGS` for the terms on (`CostModel.terms`)."""
    on = {**terms._asdict(), "weights_mode": weights_mode}
    return sum(1 << bit for bit, name in enumerate(TERM_FLAGS) if on[name])


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
        subprocess.run(
            [compiler, *FLAGS, "-o", str(partial), str(source), "-lm"],
            check=True,
            capture_output=True,
            timeout=BUILD_SECONDS,
        )
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
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    native.fill_with_costs.restype = None
    native.fill_with_costs.argtypes = argtypes()
    return native


def available() -> bool:
    """Whether the kernel is on (`enabled`) and loaded (building it on first call); the env asks once
    per construction."""
    return enabled() and library() is not None


def call_source() -> str:
    """The source of `fill_with_costs`, generated from `INTERFACE` (read it with
    ``print(market_envs.native.call_source())``).

    Generated rather than a loop over the declaration at each call: it runs once per step, and
    the loop measured slower (its first version here, one run on a loaded machine: 173 and 181 us
    a call against 55 and 118 us for the hand-written call; this code: 43 to 73 against 50 to 70).
    """
    names = [arg.name for arg in OPERATOR_ARGS]
    body = [
        f"def fill_with_costs({', '.join(names)}):",
        '    """The fill of `market_envs.env._fill_with_costs` by the C kernel, on CPU tensors: the',
        "    arguments of `OPERATOR_ARGS`; returns the new holdings [E, N] and the [8, E] rows of",
        '    `OUTPUTS`. Generated from `INTERFACE` (`call_source`)."""',
        "    native = library()",
        "    if native is None:",
        '        raise RuntimeError("the native fill is not available (see market_envs.native.library)")',
    ]
    tables = [arg for arg in INTERFACE if arg.kind == "table"]
    given = " | ".join(f"({arg.name} is not None) * {1 << TERM_FLAGS.index(arg.term)}" for arg in tables)
    mask = sum(1 << TERM_FLAGS.index(arg.term) for arg in tables)
    orders = next(arg.name for arg in INTERFACE if arg.kind == "array")  # [E, N]: the rows and columns
    body += [
        f"    if not 0 <= terms < {1 << len(TERM_FLAGS)} or (terms & {mask}) != ({given}):",
        '        raise ValueError(f"fill_with_costs: terms {terms:#b} do not match the tables given")',
    ]
    call = []
    for arg in INTERFACE:
        if arg.kind == "rows":
            body.append(f"    {arg.name} = {orders}.shape[0]")
            call.append(arg.name)
        elif arg.kind == "columns":
            body.append(f"    {arg.name} = {orders}.shape[1]")
            call.append(arg.name)
        elif arg.kind == "array":  # contiguous, and referenced until the call returns
            body.append(f"    {arg.name} = {arg.name}.contiguous()")
            call.append(f"{arg.name}.data_ptr()")
        elif arg.kind == "table":  # None where the term is off; stride 0 for a [1, N] row every bar shares
            body.append(f"    {arg.name}, {arg.name}_stride = _table({arg.name})")
            call += [f"None if {arg.name} is None else {arg.name}.data_ptr()", f"{arg.name}_stride"]
        elif arg.kind == "output":
            shape = f"{orders}.shape" if arg.name == "holdings_out" else f"(len(OUTPUTS), {orders}.shape[0])"
            body.append(f"    {arg.name} = torch.empty({shape}, dtype=torch.float64)")
            call.append(f"{arg.name}.data_ptr()")
        else:
            call.append(arg.name)
    body.append(f"    native.fill_with_costs({', '.join(call)})")
    body.append(f"    return {', '.join(_OUTPUTS)}")
    return "\n".join(body) + "\n"


def _table(table: Tensor | None) -> tuple[Tensor | None, int]:
    """A market table made contiguous and its row stride: 0 for a [1, N] row that every bar shares."""
    if table is None:
        return None, 0
    table = table.contiguous()
    return table, 0 if table.shape[0] == 1 else table.shape[1]


def _generated() -> Callable[..., tuple[Tensor, Tensor]]:
    namespace: dict[str, Callable[..., tuple[Tensor, Tensor]]] = {}
    exec(compile(call_source(), "<market_envs.native.call_source()>", "exec"), globals(), namespace)
    return namespace["fill_with_costs"]


fill_with_costs = _generated()


# `fill_with_costs` as an operator that torch.compile calls from its kernel as it is. Defined with
# torch.library's lower-level API, a CPU kernel and a fake one for tracing, rather than with
# `torch.library.custom_op`, whose autograd layers a step never needs and which cost about twice as
# much per call (benchmarks/RESULTS.md, "Costs in the env step", fifth pass).
_LIBRARY = torch.library.Library("market_envs", "DEF")
_LIBRARY.define(schema())
_LIBRARY.impl("fill_with_costs", fill_with_costs, "CPU")


@torch.library.register_fake("market_envs::fill_with_costs", lib=_LIBRARY)
def _(*arguments):
    holdings = arguments[_HOLDINGS]
    return torch.empty_like(holdings), holdings.new_empty((len(OUTPUTS), holdings.shape[0]))


fill_with_costs_op = torch.ops.market_envs.fill_with_costs.default
