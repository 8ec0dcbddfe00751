"""benchmarks/fill_call.py times the C kernel "alone" on inputs it copies out of the env's step: the
copies must be the step's inputs, or the figure is of some other call. Replayed, each captured call
gives the holdings and sums that the step got from the kernel."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch
from market_fixtures import random_panel
from test_env import EVERY_COST, random_actions

from market_envs import EnvConfig, StockTradingVecEnv, native_fill

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_the_captured_calls_replay_the_steps_fill(monkeypatch):
    if not native_fill.native_available():
        pytest.skip("the C kernel is off or cannot be built (tests/test_native_fill.py says which)")
    panel = random_panel(n_tickers=6, n_bars=80, seed=3, gap_prob=0.05)
    config = EnvConfig(
        costs=EVERY_COST, short_selling=True, initial_cash=3_000.0, episode_length=12, random_start=False
    )
    env = StockTradingVecEnv(panel, 5, "cpu", config)
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports its neighbours by module name
    fill_call = importlib.import_module("fill_call")
    native = native_fill.native_library()
    timer = fill_call.KernelTimer(native.fill_with_costs)
    monkeypatch.setattr(native, "fill_with_costs", timer)
    env.reset(seed=0)
    timer.capture()
    holdings = []
    for actions in random_actions(6, 5, panel.num_tickers, seed=2):
        holdings.append(env.step(actions)[4]["holdings"].clone())
    assert len(timer.captured) == len(holdings) == len(timer.times) == 6
    for (arguments, kept), expected in zip(timer.captured, holdings, strict=True):
        timer.kernel(*arguments)
        holdings_out = kept[-2].view_as(expected)
        torch.testing.assert_close(holdings_out, expected, rtol=0, atol=0)
    traded = torch.stack(holdings).diff(dim=0).abs().sum()
    assert traded > 0  # the orders filled: the comparison is of real fills
