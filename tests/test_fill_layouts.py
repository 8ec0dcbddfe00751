"""benchmarks/fill_layouts.py compares equal work: every layout computes the same fill, and its
perf summary counts what it says."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _fill_layouts():
    if "fill_layouts" in sys.modules:
        return sys.modules["fill_layouts"]
    spec = importlib.util.spec_from_file_location("fill_layouts", ROOT / "benchmarks" / "fill_layouts.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fill_layouts"] = module
    spec.loader.exec_module(module)
    return module


def _as_rows(value: torch.Tensor, layout: str, num_envs: int, n: int) -> torch.Tensor:
    """An output of the stand-in in `layout` back as [E, N] (holdings) or [E] (a row sum)."""
    if value.numel() == num_envs:
        return value.reshape(num_envs)
    if layout == "stocks":
        return value.t()
    if layout == "blocked":
        return value.permute(0, 2, 1).reshape(num_envs, n)
    return value


@pytest.mark.parametrize("flat", [False, True])
def test_every_layout_computes_the_same_fill(flat: bool) -> None:
    fl = _fill_layouts()
    num_envs, n = 3 * fl.LANES, 7
    x = fl.inputs(num_envs, n)
    x["cash"][::4] = 2_000.0  # some envs' buys exceed their cash: the cash limit binds there
    reference = None
    for layout in ("rows", "stocks", "blocked"):
        kernel = (fl.flat_fill if flat else fl.fill)(0 if layout == "stocks" else 1)
        for gathered in (False, True):
            step, arguments = fl.as_step(kernel, layout, gathered, x, compile=False)
            outputs = [_as_rows(v, layout, num_envs, n) for v in step(*arguments)]
            if reference is None:
                reference = outputs
                continue
            for got, expected in zip(outputs, reference, strict=True):
                torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-9)
    bought = reference[0] - x["holdings"]
    assert (bought > 0).any() and (bought < 0).any()  # the fill traded both ways


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on this machine")
@pytest.mark.parametrize("flat", [False, True])
def test_the_stand_in_written_in_c_computes_the_same_fill(flat: bool, tmp_path: Path) -> None:
    fl = _fill_layouts()
    num_envs, n = 24, 7
    x = fl.inputs(num_envs, n)
    x["cash"][::4] = 2_000.0  # the cash limit binds there
    step, arguments = fl.as_step(fl.flat_fill(1) if flat else fl.fill(1), "rows", True, x, compile=False)
    expected = step(*arguments)
    got = fl.native_kernels(tmp_path)["flat" if flat else "costly"](x, *arguments)
    assert len(got) == len(expected)
    for value, reference in zip(got, expected, strict=True):
        torch.testing.assert_close(value, reference, rtol=1e-12, atol=1e-9)


def test_lane_share_sums_the_lane_by_lane_instructions_of_a_listing() -> None:
    listing = """
    Percent |      Source code & Disassembly of kernel
     10.00 :   3a16:   vmulpd (%rax,%r10,8),%ymm8,%ymm8
     20.00 :   40b2:   vextractf64x2 $0x1,%ymm13,%xmm2
      5.00 :   33a1:   vmovsd %xmm9,-0x50(%rbp)
     15.00 :   320d:   vmovsd %xmm7,(%rbx,%r10,8)
     50.00 :   33ab:   vaddsd %xmm12,%xmm0,%xmm0
    """
    total, lanes = _fill_layouts().lane_share(listing)
    assert total == pytest.approx(100.0)
    assert lanes == pytest.approx(75.0)  # the extract, the store to the stack and the scalar add
