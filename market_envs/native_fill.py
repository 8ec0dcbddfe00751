"""The fill's C kernel on the CPU (`market_envs.fill` calls it): its interface, declared once, its
build and its binding.

**The C kernel.** It exists for speed: the exact rules need about 14 sums per
sub-environment, which torch's kernels pay for with many passes over memory (eager) or with
sums ended lane by lane (inductor), while the C kernel takes a row in two passes with one
register per sum, in a version specialised for the terms that are on. With it the step with
every term costs about what the flat-rate step costs (benchmarks/RESULTS.md, "Costs in the env
step", fifth pass). CUDA, and a CPU where it cannot be built, keep the torch kernels.

The library is built with ``$CC`` (default ``cc``) into ``$XDG_CACHE_HOME/market_envs/native``
(default ``~/.cache/...``), one file per source, flags and CPU, so that a shared home directory
serves hosts of different CPUs (it is built for the CPU it runs on). Set
``MARKET_ENVS_NATIVE=0`` to use the torch kernels on the CPU too; a machine without a compiler
falls back to them with one warning (and fails tests/test_native_fill.py, which skips its tests of
the kernel only under ``MARKET_ENVS_NATIVE=0``).

The kernel's interface is declared once, in `INTERFACE`: the ctypes types (`argtypes`), the
operator's schema (`schema`) and the C call (`call_source`) are generated from it, and the tests
read fill_costs.c's signature and its ``TERM_*`` bits and fail when they differ from `INTERFACE`
and `TERM_FLAGS`. Which terms are on comes from `CostModel.terms` (`term_flags`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import platform
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from market_envs.costs import Terms


C_SOURCE = Path(__file__).with_name("fill_costs.c")
C_FLAGS = (
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
(benchmarks/fill_layouts.py --native, a one-off last at 582a8d6; docs/notebook/)."""
OUTPUTS = ("cash", "traded", "commission", "spread", "impact", "ordered", "unfilled_value", "unfilled_shares")
"""The rows of the kernel's [8, E] result, in `Fill`'s order after the holdings."""
BUILD_SECONDS = 120


class Arg(NamedTuple):
    """One parameter of the kernel's interface (`INTERFACE`)."""

    name: str  # in fill_costs.c's signature, and in the operator's schema where it is an operator argument
    kind: Literal["rows", "columns", "array", "table", "real", "flags", "output"]
    element: str = "double"  # the C type of an array's or a table's elements
    term: str = ""  # a table: the term of `TERM_FLAGS` whose table it is (given exactly when the term is on)


INTERFACE: tuple[Arg, ...] = (
    Arg("num_envs", "rows"),
    Arg("n", "columns"),
    Arg("orders", "array"),
    Arg("holdings", "array"),
    Arg("cash", "array"),
    Arg("bars", "array", "int64_t"),
    Arg("open_prices", "table", "float"),
    Arg("half_spread", "table", "float", term="spread"),
    Arg("impact", "table", "float", term="impact"),
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
read whole (``const element *``, made contiguous; ``Tensor`` in the schema); ``table``, a table
[T, N] or [1, N] read at the fill bars (``const element *`` and its row stride ``<name>_stride``,
0 for a [1, N] row): the open prices, always given (``Tensor``), and the market tables, None
where their term is off (``Tensor?``); ``real``, a rule (``double``; ``float``);
``flags``, the bits of `TERM_FLAGS` (``int64_t``; ``int``); ``output``, the results, made by
the call (``double *``): the new holdings [E, N] and the [8, E] rows of `OUTPUTS`. The call checks
each array's and table's dtype against its element (`C_DTYPES`): a float64 open table would be
read as floats otherwise."""

TERM_FLAGS = ("spread", "impact", "participation", "per_order_commission", "weights_mode")
"""Bit k of the kernel's ``terms`` is on when ``CostModel.terms()`` has this term on (the last
one: the env runs in weights mode); fill_costs.c names bit k ``TERM_<NAME>`` (tests hold them
equal). The tables' bits are set exactly when the table is given (`fill_with_costs_c` checks it)."""

_C_TYPES = {"int64_t": ctypes.c_int64, "double": ctypes.c_double}
C_DTYPES = {"double": torch.float64, "float": torch.float32, "int64_t": torch.int64}
"""The torch dtype of each C element type of `INTERFACE`."""
PRICES_DTYPE = C_DTYPES[next(arg.element for arg in INTERFACE if arg.name == "open_prices")]
"""The dtype of the open table that the C kernel reads (`fill_rules` takes the torch kernels for another)."""
_SCHEMA_TYPES = {"array": "Tensor", "table": "Tensor?", "real": "float", "flags": "int"}
OPERATOR_ARGS = tuple(arg for arg in INTERFACE if arg.kind in _SCHEMA_TYPES)
"""The operator's arguments, in order: the parameters of `fill_with_costs_c` and of its schema."""
_OUTPUTS = tuple(arg.name for arg in INTERFACE if arg.kind == "output")
_HOLDINGS = [arg.name for arg in OPERATOR_ARGS].index("holdings")


READ_INTERFACES: dict[str, tuple[Arg, ...]] = {
    "read_actions": (
        Arg("num_envs", "rows"),
        Arg("n", "columns"),
        Arg("actions", "array", "float"),
        Arg("aims", "output"),
    ),
    "read_rate_actions": (
        Arg("num_envs", "rows"),
        Arg("n", "columns"),
        Arg("actions", "array", "float"),
        Arg("aims", "output"),
        Arg("rates", "output"),
    ),
}
"""The interfaces of fill_costs.c's two readers of the actions (`read_actions_c`), declared as
`INTERFACE` is: ``n`` is N, the stocks (the rate actions' rows are 2N wide), the outputs [E, N]."""


def c_parameters(interface: tuple[Arg, ...] = INTERFACE) -> list[tuple[str, str]]:
    """The C signature that `interface` (default `INTERFACE`) declares: (type, name) per parameter,
    types spelled as in fill_costs.c (``const double *``, ``int64_t``)."""
    spelled = {"rows": "int64_t", "columns": "int64_t", "real": "double", "flags": "int64_t", "output": "double *"}
    parameters = []
    for arg in interface:
        if arg.kind == "array":
            parameters.append((f"const {arg.element} *", arg.name))
        elif arg.kind == "table":
            parameters += [(f"const {arg.element} *", arg.name), ("int64_t", f"{arg.name}_stride")]
        else:
            parameters.append((spelled[arg.kind], arg.name))
    return parameters


def argtypes(interface: tuple[Arg, ...] = INTERFACE) -> list[type]:
    """The ctypes types of `c_parameters`: a pointer is a ``c_void_p`` (the call passes addresses)."""
    return [ctypes.c_void_p if c_type.endswith("*") else _C_TYPES[c_type] for c_type, _ in c_parameters(interface)]


def schema() -> str:
    """The torch operator's schema of `fill_with_costs`, from `INTERFACE`."""
    arguments = ", ".join(f"{_schema_type(arg)} {arg.name}" for arg in OPERATOR_ARGS)
    return f"fill_with_costs({arguments}) -> ({', '.join('Tensor' for _ in _OUTPUTS)})"


def _schema_type(arg: Arg) -> str:
    """An operator argument's type in the schema: a table without a term is always given."""
    return "Tensor" if arg.kind == "table" and not arg.term else _SCHEMA_TYPES[arg.kind]


def term_flags(terms: Terms, weights_mode: bool) -> int:
    """The kernel's ``terms`` argument: the bits of `TERM_FLAGS` for the terms on (`CostModel.terms`)."""
    on = {**terms._asdict(), "weights_mode": weights_mode}
    return sum(1 << bit for bit, name in enumerate(TERM_FLAGS) if on[name])


def native_enabled() -> bool:
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


def build_native(directory: Path | None = None, source: Path = C_SOURCE) -> Path:
    """Compile `source` into a shared library in `directory` (default: the cache), once: an
    existing library of the same source, flags and CPU is reused.

    Written under a temporary name and renamed, so that processes building at once (dask
    workers, test workers) never load a half-written file; and one at a time (a lock on
    `directory`), so that they wait for one build (about 30 s of a core) instead of each
    compiling the same file. Raises OSError or CalledProcessError.
    """
    compiler = os.environ.get("CC", "cc")
    text = source.read_bytes()
    key = hashlib.sha256(b"\0".join([text, " ".join((compiler, *C_FLAGS)).encode(), _cpu_identity().encode()]))
    directory = directory or _cache_dir()
    library = directory / f"{source.stem}-{key.hexdigest()[:16]}.so"
    if library.exists():
        return library
    directory.mkdir(parents=True, exist_ok=True)
    with _building(directory):
        if library.exists():  # built by the process that held the lock
            return library
        with tempfile.TemporaryDirectory(dir=directory) as scratch:
            partial = Path(scratch) / library.name
            subprocess.run(
                [compiler, *C_FLAGS, "-o", str(partial), str(source), "-lm"],
                check=True,
                capture_output=True,
                timeout=BUILD_SECONDS,
            )
            os.replace(partial, library)
    return library


@contextlib.contextmanager
def _building(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on `directory` (flock on the folder itself: no lock file is left
    beside the libraries). Waits at most `BUILD_SECONDS` plus a little for a build to end, then
    goes on without the lock (a stuck holder must not stop this process; the rename keeps the
    result whole either way). No lock where the platform has no flock."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        yield
        return
    handle = os.open(directory, os.O_RDONLY)
    try:
        deadline = time.monotonic() + BUILD_SECONDS + 10
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        yield  # the lock, if held, goes with the descriptor
    finally:
        os.close(handle)


@functools.cache
def native_library() -> ctypes.CDLL | None:
    """The loaded kernel, or None (disabled, or it could not be built: warned once)."""
    if not native_enabled():
        return None
    try:
        native = ctypes.CDLL(str(build_native()))
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
    return bind_native(native)


def bind_native(library: ctypes.CDLL) -> ctypes.CDLL:
    """`library`, a build of fill_costs.c, with its functions' types set from `INTERFACE` and
    `READ_INTERFACES` (`native_library` binds the env's own this way; benchmarks/env_throughput.py
    ``--kernel-sources`` binds other versions of the source to time them side by side)."""
    library.fill_with_costs.restype = None
    library.fill_with_costs.argtypes = argtypes()
    for name, interface in READ_INTERFACES.items():
        getattr(library, name).restype = None
        getattr(library, name).argtypes = argtypes(interface)
    return library


def reads_actions_natively(actions: Tensor, dtype: torch.dtype) -> bool:
    """Whether `read_actions_c` takes these actions: float32 [E, width] on the CPU read into float64,
    eagerly (compiled, inductor fuses torch's forms), with the kernel available."""
    return (  # compiling first: traced, the test ends there and guards nothing
        not torch.compiler.is_compiling()
        and actions.dtype == torch.float32
        and dtype == torch.float64
        and actions.dim() == 2
        and actions.device.type == "cpu"
        and native_available()
    )


def read_actions_c(actions: Tensor, rate_action: bool) -> tuple[Tensor, Tensor | None]:
    """The actions [E, N] (with `rate_action`, [E, 2N]: the aims, then the rate actions) read as the
    orders read them, by fill_costs.c in one pass: the aims [E, N] clipped to [-1, 1] with NaN as 0,
    float64, and with `rate_action` each stock's trade rate [E, N] (`market_envs.kernel.policy_rates`
    of its cleaned rate action); the same bits as the torch forms (tests/test_native_fill.py).
    Only where `reads_actions_natively`."""
    native = native_library()
    actions = actions.detach().contiguous()
    rows, width = actions.shape
    n = width // 2 if rate_action else width
    aims = actions.new_empty((rows, n), dtype=torch.float64)
    if not rate_action:
        native.read_actions(rows, n, actions.data_ptr(), aims.data_ptr())
        return aims, None
    rates = torch.empty_like(aims)
    native.read_rate_actions(rows, n, actions.data_ptr(), aims.data_ptr(), rates.data_ptr())
    return aims, rates


def native_available() -> bool:
    """Whether the kernel is on (`native_enabled`) and loaded (building it on first call); the env asks once
    per construction for the fill, and each eager step for the actions' read (`reads_actions_natively`)."""
    return native_enabled() and native_library() is not None


def call_source() -> str:
    """The source of `fill_with_costs_c`, generated from `INTERFACE` (read it with
    ``print(market_envs.native_fill.call_source())``).

    Generated rather than a loop over the declaration at each call: it runs once per step, and
    the loop measured slower (its first version here, one run on a loaded machine: 173 and 181 us
    a call against 55 and 118 us for the hand-written call; this code: 43 to 73 against 50 to 70).
    """
    names = [arg.name for arg in OPERATOR_ARGS]
    body = [
        f"def fill_with_costs_c({', '.join(names)}):",
        '    """The fill of `_fill_with_costs` by the C kernel, on CPU tensors: the',
        "    arguments of `OPERATOR_ARGS`; returns the new holdings [E, N] and the [8, E] rows of",
        '    `OUTPUTS`. Generated from `INTERFACE` (`call_source`)."""',
        "    native = native_library()",
        "    if native is None:",
        '        raise RuntimeError("the native fill is not available (see market_envs.native_fill.native_library)")',
    ]
    tables = [arg for arg in INTERFACE if arg.kind == "table" and arg.term]
    given = " | ".join(f"({arg.name} is not None) * {1 << TERM_FLAGS.index(arg.term)}" for arg in tables)
    mask = sum(1 << TERM_FLAGS.index(arg.term) for arg in tables)
    orders = next(arg.name for arg in INTERFACE if arg.kind == "array")  # [E, N]: the rows and columns
    body += [
        f"    if not 0 <= terms < {1 << len(TERM_FLAGS)} or (terms & {mask}) != ({given}):",
        '        raise ValueError(f"fill_with_costs: terms {terms:#b} do not match the tables given")',
    ]
    typed = [arg for arg in INTERFACE if arg.kind in ("array", "table")]
    wrong = " or ".join(
        f"{arg.name}.dtype != torch.{str(C_DTYPES[arg.element]).removeprefix('torch.')}"
        if arg.kind == "array" or not arg.term
        else f"({arg.name} is not None and {arg.name}.dtype != torch.{str(C_DTYPES[arg.element]).removeprefix('torch.')})"
        for arg in typed
    )
    expected = ", ".join(f"{arg.name} {str(C_DTYPES[arg.element]).removeprefix('torch.')}" for arg in typed)
    body += [
        f"    if {wrong}:",
        f'        raise TypeError("fill_with_costs: the arrays and tables must be {expected}")',
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
            made = f"{arg.name} = {arg.name}.contiguous()"
            stride = f"{arg.name}_stride = 0 if {arg.name}.shape[0] == 1 else {arg.name}.shape[1]"
            if arg.term:
                body += [
                    f"    {arg.name}_stride = 0",
                    f"    if {arg.name} is not None:",
                    f"        {made}",
                    f"        {stride}",
                ]
            else:
                body += [f"    {made}", f"    {stride}"]
            pointer = (
                f"{arg.name}.data_ptr()" if not arg.term else f"None if {arg.name} is None else {arg.name}.data_ptr()"
            )
            call += [pointer, f"{arg.name}_stride"]
        elif arg.kind == "output":  # float64 on the CPU, as the orders (checked above): `new_empty` is the cheaper call
            shape = f"{orders}.shape" if arg.name == "holdings_out" else f"(len(OUTPUTS), {orders}.shape[0])"
            body.append(f"    {arg.name} = {orders}.new_empty({shape})")
            call.append(f"{arg.name}.data_ptr()")
        else:
            call.append(arg.name)
    body.append(f"    native.fill_with_costs({', '.join(call)})")
    body.append(f"    return {', '.join(_OUTPUTS)}")
    return "\n".join(body) + "\n"


def _generated() -> Callable[..., tuple[Tensor, Tensor]]:
    namespace: dict[str, Callable[..., tuple[Tensor, Tensor]]] = {}
    exec(compile(call_source(), "<market_envs.native_fill.call_source()>", "exec"), globals(), namespace)
    return namespace["fill_with_costs_c"]


fill_with_costs_c = _generated()


# `fill_with_costs_c` as an operator that torch.compile calls from its kernel as it is. Defined with
# torch.library's lower-level API, a CPU kernel and a fake one for tracing, rather than with
# `torch.library.custom_op`, whose autograd layers a step never needs and which cost about twice as
# much per call (benchmarks/RESULTS.md, "Costs in the env step", fifth pass).
_LIBRARY = torch.library.Library("market_envs", "DEF")
_LIBRARY.define(schema())
_LIBRARY.impl("fill_with_costs", fill_with_costs_c, "CPU")


@torch.library.register_fake("market_envs::fill_with_costs", lib=_LIBRARY)
def _(*arguments):
    holdings = arguments[_HOLDINGS]
    return torch.empty_like(holdings), holdings.new_empty((len(OUTPUTS), holdings.shape[0]))


fill_with_costs_op = torch.ops.market_envs.fill_with_costs.default
