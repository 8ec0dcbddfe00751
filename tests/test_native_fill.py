"""market_envs.native: the CPU kernel of the fill with costs equals the torch kernels (which CUDA
runs), both equal the reference env, and a machine that cannot build it falls back to torch."""

from __future__ import annotations

import warnings
from dataclasses import replace

import pytest
import torch
from market_fixtures import random_panel
from test_env import COST_KEYS, EVERY_COST, PANEL, random_actions, run_against_reference

from market_envs import EnvConfig, StockTradingVecEnv, native
from market_envs.costs import CostModel

pytestmark = pytest.mark.skipif(not native.available(), reason="no C compiler: the native kernel cannot be built")

VOLUME_PANEL = random_panel(n_tickers=6, n_bars=80, seed=3, gap_prob=0.05)
TERMS = {
    "participation": CostModel(participation=0.05),
    "fixed-spread": CostModel(spread_bps=7.5),
    "per-ticker-spread": CostModel(spread_model="per_ticker", spread_bps_per_ticker=(1, 20, 0, 3.5, 2, 9)),
    "high-low-spread": CostModel(spread_model="high_low", spread_window=20),
    "impact": CostModel(impact_eta=2.0, impact_window_days=1),
    "spread-impact": CostModel(spread_bps=5.0, impact_eta=1.0, impact_window_days=1),
    "per-share": CostModel(commission_per_share=0.005),
    "minimum": CostModel(commission_min=2.0),
    "cap": CostModel(commission_max_rate=0.0005),
    "commission-impact-cap": CostModel(commission_per_share=0.005, commission_min=1.0, commission_max_rate=0.01,
                                       impact_eta=1.0, impact_window_days=1, participation=0.05),
    "every-term": EVERY_COST,
}  # fmt: skip


@pytest.fixture
def torch_kernel(monkeypatch):
    """Envs made in the test take the torch kernels on the CPU, as CUDA does."""
    monkeypatch.setattr(native, "available", lambda: False)


def _steps(config: EnvConfig, use_native: bool, monkeypatch, compile: bool = False, num_envs: int = 5):
    """The info entries of 30 steps of random orders (fixed starts), native kernel or torch."""
    with monkeypatch.context() as patch:
        if not use_native:
            patch.setattr(native, "available", lambda: False)
        env = StockTradingVecEnv(VOLUME_PANEL, num_envs, "cpu", replace(config, random_start=False), compile=compile)
    assert env._rules.native == use_native
    env.reset(seed=0)
    infos = []
    for actions in random_actions(30, num_envs, VOLUME_PANEL.num_tickers, seed=2):
        _, reward, _, _, info = env.step(actions)
        infos.append({"reward": reward, **{key: info[key].clone() for key in ("value", "cash", "holdings", *COST_KEYS)}})
    return infos


@pytest.mark.parametrize("terms", list(TERMS))
@pytest.mark.parametrize(("mode", "short_selling"), [("shares", False), ("shares", True), ("weights", True)])
def test_the_native_fill_equals_the_torch_fill_for_each_combination_of_terms(terms, mode, short_selling, monkeypatch):
    config = EnvConfig(action_mode=mode, short_selling=short_selling, costs=TERMS[terms], initial_cash=3_000.0,
                       episode_length=12, buy_cost=0.001, sell_cost=0.002)  # fmt: skip
    torch_infos = _steps(config, False, monkeypatch)
    native_infos = _steps(config, True, monkeypatch)
    for k, (expected, got) in enumerate(zip(torch_infos, native_infos, strict=True)):
        for key in expected:
            torch.testing.assert_close(got[key], expected[key], rtol=1e-9, atol=1e-6, msg=f"step {k}, {key}")
    traded = sum(float(info["ordered_value"].sum()) for info in torch_infos)
    costs = sum(float(info["costs"].sum()) for info in torch_infos)
    assert traded > 0 and costs > 0  # orders filled and paid


def test_the_compiled_step_calls_the_native_fill_and_equals_the_torch_fill(monkeypatch):
    config = EnvConfig(action_mode="shares", short_selling=True, costs=EVERY_COST, initial_cash=3_000.0,
                       episode_length=12, features=("close",))  # fmt: skip
    expected = _steps(config, False, monkeypatch)
    got = _steps(config, True, monkeypatch, compile=True)
    for k, (want, have) in enumerate(zip(expected, got, strict=True)):
        for key in want:
            torch.testing.assert_close(have[key], want[key], rtol=1e-9, atol=1e-6, msg=f"step {k}, {key}")


@pytest.mark.parametrize("mode", ["shares", "weights"])
@pytest.mark.parametrize("short_selling", [False, True])
def test_the_torch_fill_still_equals_the_reference_env(mode, short_selling, torch_kernel):
    """The reference tests of tests/test_env.py run the native kernel on the CPU; CUDA runs this one."""
    leverage = 2.0 if (mode == "weights" and short_selling) else 1.0
    config = EnvConfig(
        action_mode=mode, short_selling=short_selling, max_leverage=leverage, buy_cost=0.001, sell_cost=0.002,
        costs=EVERY_COST, initial_cash=20_000.0, episode_length=25, features=("close", "volume"),
    )  # fmt: skip
    assert not StockTradingVecEnv(PANEL, 1, "cpu", config)._rules.native
    run_against_reference(PANEL, 4, config, steps=40, seed=12)


def test_only_the_cpu_with_costs_takes_the_native_fill():
    assert StockTradingVecEnv(PANEL, 2, "cpu", EnvConfig(costs=EVERY_COST))._rules.native
    assert not StockTradingVecEnv(PANEL, 2, "cpu", EnvConfig())._rules.native  # the flat rate keeps its kernel


def test_the_library_is_built_once_per_source_and_reused(tmp_path):
    first = native.build(tmp_path)
    stamp = first.stat().st_mtime_ns
    assert native.build(tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no scratch left behind


def test_a_machine_that_cannot_build_it_warns_once_and_keeps_the_torch_fill(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "false")  # a compiler that always fails
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    native.library.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="could not be built"):
            env = StockTradingVecEnv(PANEL, 2, "cpu", EnvConfig(costs=EVERY_COST))
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # once
            StockTradingVecEnv(PANEL, 2, "cpu", EnvConfig(costs=EVERY_COST))
        assert not env._rules.native
        env.reset(seed=0)
        env.step(random_actions(1, 2, PANEL.num_tickers, seed=0)[0])
    finally:
        native.library.cache_clear()


def test_market_envs_native_0_turns_it_off(monkeypatch):
    monkeypatch.setenv("MARKET_ENVS_NATIVE", "0")
    native.library.cache_clear()
    try:
        assert not native.available()
        assert not StockTradingVecEnv(PANEL, 2, "cpu", EnvConfig(costs=EVERY_COST))._rules.native
    finally:
        monkeypatch.delenv("MARKET_ENVS_NATIVE")
        native.library.cache_clear()
