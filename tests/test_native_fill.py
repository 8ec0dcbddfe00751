"""market_envs.fill: the CPU kernel of the fill with costs equals the torch kernels (which CUDA
runs), both equal the reference env, its C signature equals the interface declared in Python, and
a machine that cannot build it falls back to torch.

Where a compiler is expected these tests fail rather than skip: the tests that run the kernel
skip only where ``MARKET_ENVS_NATIVE=0`` turns it off; with it on, a kernel that cannot be built
(no ``cc``, a broken ``$CC``) fails them. The tests of the declaration read the C file's text and
never skip."""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import re
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from market_fixtures import random_panel
from test_env import COST_KEYS, EVERY_COST, ODD_ACTIONS, PANEL, random_actions, run_against_reference

from market_envs import EnvConfig, StockTradingVecEnv, fill, fill_inputs, native_fill
from market_envs.costs import CostModel, Terms

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
    "commission-impact-cap": CostModel(
        commission_per_share=0.005,
        commission_min=1.0,
        commission_max_rate=0.01,
        impact_eta=1.0,
        impact_window_days=1,
        participation=0.05,
    ),
    "every-term": EVERY_COST,
}


@pytest.fixture
def torch_kernel(monkeypatch):
    """Envs made in the test take the torch kernels on the CPU, as CUDA does."""
    monkeypatch.setattr(native_fill, "native_available", lambda: False)


def _steps(config: EnvConfig, use_native: bool, monkeypatch, compile: bool = False, num_envs: int = 5):
    """The info entries of 30 steps of random orders (fixed starts), native kernel or torch."""
    with monkeypatch.context() as patch:
        if not use_native:
            patch.setattr(native_fill, "native_available", lambda: False)
        env = StockTradingVecEnv(VOLUME_PANEL, num_envs, "cpu", replace(config, random_start=False), compile=compile)
    assert env.rules.fill.native == use_native
    env.reset(seed=0)
    infos = []
    for actions in random_actions(30, num_envs, VOLUME_PANEL.num_tickers, seed=2):
        _, reward, _, _, info = env.step(actions)
        infos.append(
            {"reward": reward, **{key: info[key].clone() for key in ("value", "cash", "holdings", *COST_KEYS)}}
        )
    return infos


@pytest.mark.parametrize("terms", list(TERMS))
@pytest.mark.parametrize(("mode", "short_selling"), [("shares", False), ("shares", True), ("weights", True)])
def test_the_native_fill_equals_the_torch_fill_for_each_combination_of_terms(
    terms, mode, short_selling, monkeypatch, native_kernel
):
    config = EnvConfig(
        action_mode=mode,
        short_selling=short_selling,
        costs=TERMS[terms],
        initial_cash=3_000.0,
        episode_length=12,
        buy_cost=0.001,
        sell_cost=0.002,
    )
    torch_infos = _steps(config, False, monkeypatch)
    native_infos = _steps(config, True, monkeypatch)
    for k, (expected, got) in enumerate(zip(torch_infos, native_infos, strict=True)):
        for key in expected:
            torch.testing.assert_close(got[key], expected[key], rtol=1e-9, atol=1e-6, msg=f"step {k}, {key}")
    traded = sum(float(info["ordered_value"].sum()) for info in torch_infos)
    costs = sum(float(info["costs"].sum()) for info in torch_infos)
    assert traded > 0 and costs > 0  # orders filled and paid


def test_the_compiled_step_calls_the_native_fill_and_equals_the_torch_fill(monkeypatch, native_kernel):
    config = EnvConfig(
        action_mode="shares",
        short_selling=True,
        costs=EVERY_COST,
        initial_cash=3_000.0,
        episode_length=12,
        features=("close",),
    )
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
        action_mode=mode,
        short_selling=short_selling,
        max_leverage=leverage,
        buy_cost=0.001,
        sell_cost=0.002,
        costs=EVERY_COST,
        initial_cash=20_000.0,
        episode_length=25,
        features=("close", "volume"),
    )
    assert not StockTradingVecEnv(PANEL, 1, "cpu", config).rules.fill.native
    run_against_reference(PANEL, 4, config, steps=40, seed=12)


def test_only_the_cpu_with_costs_takes_the_native_fill(native_kernel):
    assert StockTradingVecEnv(PANEL, 2, "cpu", EnvConfig(costs=EVERY_COST)).rules.fill.native
    assert not StockTradingVecEnv(PANEL, 2, "cpu", EnvConfig()).rules.fill.native  # the flat rate keeps its kernel


@pytest.mark.slow
def test_the_library_is_built_once_per_source_and_reused(tmp_path, native_kernel):
    first = native_fill.build_native(tmp_path)
    stamp = first.stat().st_mtime_ns
    assert native_fill.build_native(tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no scratch left behind


def test_builds_at_once_into_one_folder_run_the_compiler_once(tmp_path, monkeypatch, native_kernel):
    """Two builds of one source into one folder at once (test workers or dask workers on a cold
    cache): one compiles, the other waits for its library. Threads hold the lock as processes do
    (flock belongs to each opened descriptor)."""
    runs = tmp_path / "compiler-runs"
    compiler = tmp_path / "cc-logged"
    compiler.write_text(f'#!/bin/sh\necho run >> "{runs}"\nsleep 1\nexec cc "$@"\n')  # slow: the builds overlap
    compiler.chmod(0o755)
    source = tmp_path / "answer.c"
    source.write_text("int answer(void) { return 42; }\n")
    monkeypatch.setenv("CC", str(compiler))
    together = threading.Barrier(2)

    def build(_: int):
        together.wait()
        return native_fill.build_native(tmp_path / "lib", source)

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(build, range(2))
    assert first == second and runs.read_text().split() == ["run"]
    assert [p.name for p in (tmp_path / "lib").iterdir()] == [first.name]  # no scratch or lock file left
    assert ctypes.CDLL(str(first)).answer() == 42  # a whole library


def test_a_machine_that_cannot_build_it_warns_once_and_keeps_the_torch_fill(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "false")  # a compiler that always fails
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    native_fill.native_library.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="could not be built"):
            env = StockTradingVecEnv(PANEL, 2, "cpu", EnvConfig(costs=EVERY_COST))
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # once
            StockTradingVecEnv(PANEL, 2, "cpu", EnvConfig(costs=EVERY_COST))
        assert not env.rules.fill.native
        env.reset(seed=0)
        env.step(random_actions(1, 2, PANEL.num_tickers, seed=0)[0])
    finally:
        native_fill.native_library.cache_clear()


def test_market_envs_native_0_turns_it_off(monkeypatch):
    monkeypatch.setenv("MARKET_ENVS_NATIVE", "0")
    native_fill.native_library.cache_clear()
    try:
        assert not native_fill.native_available()
        assert not StockTradingVecEnv(PANEL, 2, "cpu", EnvConfig(costs=EVERY_COST)).rules.fill.native
    finally:
        monkeypatch.delenv("MARKET_ENVS_NATIVE")
        native_fill.native_library.cache_clear()


# --------------------------------------------------------------------- the interface, declared once

SOURCE_TEXT = native_fill.C_SOURCE.read_text()


def c_signatures(text: str) -> dict[str, list[tuple[str, str]]]:
    """The exported (not static) functions defined in C source `text`: name -> [(type, name)],
    types spelled with single spaces and ``*`` after a space (``const double *``)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)  # comments
    found = {}
    for match in re.finditer(r"^(?!static)[A-Za-z_][\w \t*]*?\b(\w+)\s*\(([^)]*)\)\s*\{", text, flags=re.M):
        parameters = []
        for parameter in match.group(2).split(","):
            spelled = " ".join(parameter.replace("*", " * ").split())
            kind, _, name = spelled.rpartition(" ")
            parameters.append((kind, name))
        found[match.group(1)] = parameters
    return found


def test_the_c_signature_equals_the_declared_interface():
    """Names, types and order of fill_costs.c's exported functions = `native_fill.INTERFACE` and `native_fill.READ_INTERFACES`."""
    readers = {name: native_fill.c_parameters(interface) for name, interface in native_fill.READ_INTERFACES.items()}
    assert c_signatures(SOURCE_TEXT) == {"fill_with_costs": native_fill.c_parameters(), **readers}
    assert readers["read_rate_actions"] == [
        ("int64_t", "num_envs"),
        ("int64_t", "n"),
        ("const float *", "actions"),
        ("double *", "aims"),
        ("double *", "rates"),
    ]
    assert (
        native_fill.argtypes(native_fill.READ_INTERFACES["read_actions"])
        == [ctypes.c_int64] * 2 + [ctypes.c_void_p] * 2
    )


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int64)


@pytest.mark.parametrize("contiguous", [True, False])
def test_the_native_read_of_the_actions_is_torchs_bit_for_bit(native_kernel, contiguous):
    """`read_actions_c` against the torch forms it replaces eagerly (`clean_actions`, `policy_rates`): the
    aims and the rates float64, the same float bits, NaN as 0 and the special values included."""
    from market_envs.kernel import clean_actions, policy_rates

    generator = torch.Generator().manual_seed(5)
    actions = torch.randn(37, 2 * 13, generator=generator) * 2.0
    actions.view(-1)[: len(ODD_ACTIONS)] = torch.tensor(ODD_ACTIONS)
    actions.view(-1)[-len(ODD_ACTIONS) :] = torch.tensor(ODD_ACTIONS)
    if not contiguous:  # a view with a row stride of 3N: read as a copy
        actions = torch.cat([actions, actions[:, :13]], dim=1)[:, : 2 * 13]
        assert not actions.is_contiguous()
    assert native_fill.reads_actions_natively(actions, torch.float64)
    aims, rates = native_fill.read_actions_c(actions, rate_action=True)
    torch_aims, torch_rates = clean_actions(actions, actions.dtype).chunk(2, dim=-1)
    assert torch.equal(_bits(aims), _bits(torch_aims.to(torch.float64)))
    assert torch.equal(_bits(rates), _bits(policy_rates(torch_rates, torch.float64)))
    one_block = actions[:, :13]
    only, none = native_fill.read_actions_c(one_block, rate_action=False)
    assert none is None and torch.equal(_bits(only), _bits(clean_actions(one_block, torch.float64)))
    assert aims[0, 0] == 0.0 and aims[0, 1] == 1.0 and aims[0, 2] == -1.0 and math.copysign(1.0, aims[0, 6]) == -1.0


def test_the_native_read_takes_only_float32_actions_read_into_float64_on_the_cpu(native_kernel):
    actions = torch.zeros(4, 6)
    assert native_fill.reads_actions_natively(actions, torch.float64)
    assert not native_fill.reads_actions_natively(actions.double(), torch.float64)  # the torch forms read any dtype
    assert not native_fill.reads_actions_natively(actions, torch.float32)
    assert not native_fill.reads_actions_natively(actions[0], torch.float64)  # one row: the torch forms


def test_a_c_signature_that_differs_from_the_declaration_is_seen():
    swapped = SOURCE_TEXT.replace("double buy_cost, double sell_cost", "double sell_cost, double buy_cost")
    retyped = SOURCE_TEXT.replace("const int64_t *bars", "const double *bars")
    widened = SOURCE_TEXT.replace("const float *open_prices", "const double *open_prices")
    assert swapped != SOURCE_TEXT and retyped != SOURCE_TEXT and widened != SOURCE_TEXT
    for text in (swapped, retyped, widened):
        assert c_signatures(text)["fill_with_costs"] != native_fill.c_parameters()


def test_the_generated_ctypes_and_schema_follow_the_declaration():
    parameters = native_fill.c_parameters()
    assert len(native_fill.argtypes()) == len(parameters) == 22
    assert [t for t, (c, _) in zip(native_fill.argtypes(), parameters, strict=True) if c.endswith("*")] == [
        native_fill.ctypes.c_void_p
    ] * 10
    registered = torch.ops.market_envs.fill_with_costs.default._schema
    assert [a.name for a in registered.arguments] == [a.name for a in native_fill.OPERATOR_ARGS]
    assert [a.name for a in registered.arguments[:5]] == ["orders", "holdings", "cash", "bars", "open_prices"]
    assert str(registered.arguments[4].type) == "Tensor"  # the open prices: always read
    assert str(registered.arguments[5].type) == "Optional[Tensor]" and str(registered.arguments[-1].type) == "int"
    assert ("const float *", "open_prices") in parameters and native_fill.PRICES_DTYPE == torch.float32
    for table in ("half_spread", "impact"):  # half the bytes of float64 (`fill_inputs.market_tables`)
        assert ("const float *", table) in parameters


def test_the_term_bits_are_the_c_files():
    bits = dict(re.findall(r"\bTERM_(\w+)\s*=\s*(\d+)", SOURCE_TEXT))
    assert {name: int(bit) for name, bit in bits.items()} == {
        name.upper(): 1 << k for k, name in enumerate(native_fill.TERM_FLAGS)
    }


def test_the_kernels_version_is_read_from_costmodel_terms():
    every = native_fill.term_flags(EVERY_COST.terms(), weights_mode=False)
    assert every == 0b1111  # spread, impact, participation, commission per order (borrow is charged at the close)
    assert native_fill.term_flags(CostModel().terms(), weights_mode=True) == 0b10000
    assert native_fill.term_flags(CostModel(spread_bps=1.0).terms(), weights_mode=False) == 0b1
    assert not CostModel(borrow_rate=0.01).terms().in_fill and CostModel(borrow_rate=0.01).terms().borrow
    env = StockTradingVecEnv(PANEL, 2, "cpu", EnvConfig(costs=EVERY_COST))
    assert env.rules.fill.native_terms == every and env.rules.fill.has_costs


def test_terms_that_disagree_with_the_tables_are_refused(native_kernel):
    e, n = 2, 3
    orders = torch.zeros((e, n), dtype=torch.float64)
    arguments = dict(
        orders=orders,
        holdings=orders,
        cash=torch.ones(e, dtype=torch.float64),
        bars=torch.zeros(e, dtype=torch.int64),
        open_prices=torch.ones((1, n), dtype=torch.float32),
        half_spread=None,
        impact=None,
        fill_cap=None,
        buy_cost=0.001,
        sell_cost=0.001,
        per_share=0.0,
        minimum=0.0,
        max_rate=0.0,
    )
    holdings, sums = native_fill.fill_with_costs_c(**arguments, terms=0)
    assert torch.equal(holdings, orders) and torch.equal(sums[0], torch.ones(e, dtype=torch.float64))
    with pytest.raises(ValueError, match="do not match the tables"):
        native_fill.fill_with_costs_c(**arguments, terms=0b1)  # a half-spread without its table
    with pytest.raises(TypeError, match="unexpected keyword argument .per_order."):
        native_fill.fill_with_costs_c(**arguments, terms=0, per_order=True)
    with pytest.raises(TypeError, match="open_prices float32"):  # float64 prices would be read as floats
        native_fill.fill_with_costs_c(**{**arguments, "open_prices": torch.ones((1, n), dtype=torch.float64)}, terms=0)
    with pytest.raises(TypeError, match="half_spread float32"):  # and a float64 table of a term
        native_fill.fill_with_costs_c(
            **{**arguments, "half_spread": torch.ones((1, n), dtype=torch.float64)}, terms=0b1
        )


def test_every_term_in_the_fill_has_its_bit_in_the_c_kernels_version():
    """A term of `Terms` that the fill charges (`Terms.in_fill`) without a bit in `TERM_FLAGS` would
    leave the C kernel's version blind to it; a term charged elsewhere (the borrow fee, at the
    close) has none."""
    for name in Terms._fields:
        alone = Terms(**{field: field == name for field in Terms._fields})
        assert (name in native_fill.TERM_FLAGS) == alone.in_fill, name
        if alone.in_fill:
            assert native_fill.term_flags(alone, weights_mode=False) == 1 << native_fill.TERM_FLAGS.index(name)


# --------------------------------------------------------------------- signed orders, prices in place

GOLDEN = json.loads((Path(__file__).parent / "golden" / "native_fill_6e399b9.json").read_text())
GOLDEN_E, GOLDEN_N, GOLDEN_T = 9, 7, 12  # E and N not multiples of 4: the last row group and the last lanes


def golden_inputs(terms: int) -> dict:
    """The kernel's inputs for version `terms` (bits of `native_fill.TERM_FLAGS`), from a fixed seed: the
    sides of the orders, their prices as rows and the open table they come from, and every other
    argument (the golden file's hashes were computed on exactly these, the half-spread and impact
    tables widened to float64; do not change them)."""
    g = torch.Generator().manual_seed(41)
    e, n, t = GOLDEN_E, GOLDEN_N, GOLDEN_T
    weights = bool(terms & 16)
    open_prices = (torch.rand((t, n), generator=g, dtype=torch.float64) * 90.0 + 5.0).float()
    bars = torch.randint(0, t, (e,), generator=g)
    delta = torch.randn((e, n), generator=g, dtype=torch.float64) * 40.0
    delta = delta.where(torch.rand((e, n), generator=g) > 0.2, torch.zeros(()))
    if not weights:
        delta = torch.trunc(delta)
    holdings = torch.randint(-50, 100, (e, n), generator=g).double()
    cash = torch.rand(e, generator=g, dtype=torch.float64) * 4_000.0
    cash[0], cash[1] = 50.0, -20.0  # a row the cash binds hard, and a debt
    half_spread = (torch.rand((t, n), generator=g, dtype=torch.float64) * 2e-3).float()  # the tables' float32
    impact = (torch.rand((t, n), generator=g, dtype=torch.float64) * 2e-3).float()
    fill_cap = torch.rand((t, n), generator=g, dtype=torch.float64) * 50.0
    if not weights:
        fill_cap = torch.floor(fill_cap)
    return {
        "sells": (-delta).clamp_min(0.0),
        "buys": delta.clamp_min(0.0),
        "price": open_prices.index_select(0, bars).double(),
        "open_prices": open_prices,
        "holdings": holdings,
        "cash": cash,
        "bars": bars,
        "half_spread": half_spread if terms & 1 else None,
        "impact": impact if terms & 2 else None,
        "fill_cap": fill_cap if terms & 4 else None,
        "buy_cost": 0.001,
        "sell_cost": 0.002,
        "per_share": 0.005 if terms & 8 else 0.0,
        "minimum": 1.0 if terms & 8 else 0.0,
        "max_rate": 0.01 if terms & 8 else 0.0,
        "terms": terms,
    }


def _signed(inputs: dict) -> dict:
    """`golden_inputs` as the kernel takes them now: one signed array, the prices in their table."""
    inputs = dict(inputs)
    inputs["orders"] = inputs.pop("buys") - inputs.pop("sells")
    del inputs["price"]
    return inputs


def test_signed_orders_and_prices_in_place_give_the_old_kernels_results_bit_for_bit(native_kernel):
    """Each of the 32 versions on random orders, sides and binding cash: the same bits as the kernel
    of e526f67 gave from the sells, the buys and the price rows as three arrays, and as 6e399b9's gave
    from the half-spread and impact tables in float64 (tests/golden: 6e399b9's hashes on the float32
    tables widened, 6e399b9 having given e526f67's bits on the tables of float64 draws)."""
    differ = []
    for terms in range(1 << len(native_fill.TERM_FLAGS)):
        holdings, sums = native_fill.fill_with_costs_c(**_signed(golden_inputs(terms)))
        digest = hashlib.sha256(holdings.numpy().tobytes() + sums.numpy().tobytes()).hexdigest()
        if digest != GOLDEN["sha256"][str(terms)]:
            differ.append(terms)
    assert differ == []
    holdings, sums = native_fill.fill_with_costs_c(**_signed(golden_inputs(0b11111)))
    assert sums[0, 0] >= 0 and float(sums[1].sum()) > 0  # the cash bound a row and orders filled


def _rules(terms: int, kernel: str) -> fill_inputs.FillRules:
    """The `FillRules` of `golden_inputs(terms)` for `kernel` ("native", "eager", "fused")."""
    costs = CostModel(
        commission_per_share=0.005 if terms & 8 else 0.0,
        commission_min=1.0 if terms & 8 else 0.0,
        commission_max_rate=0.01 if terms & 8 else None,
        spread_bps=1.0 if terms & 1 else 0.0,
        impact_eta=1.0 if terms & 2 else 0.0,
        participation=0.05 if terms & 4 else None,
    )
    rules = fill_inputs.fill_rules(costs, 0.001, 0.002, bool(terms & 16), torch.device("cpu"), fused=kernel == "fused")
    return replace(rules, native=kernel == "native")


def _fill_of(inputs: dict, kernel: str) -> fill_inputs.Fill:
    """`fill.fill_orders` of `golden_inputs` (the sides; the C kernel takes them signed), on `kernel`."""
    terms = inputs["terms"]
    tables = fill_inputs.Market(inputs["half_spread"], inputs["impact"], inputs["fill_cap"])
    return fill.fill_orders(
        inputs["cash"],
        inputs["holdings"],
        inputs["sells"],
        inputs["buys"],
        inputs["price"],
        inputs["open_prices"],
        tables,
        inputs["bars"],
        _rules(terms, kernel),
    )


@pytest.mark.parametrize("terms", [0b01111, 0b11111, 0b00101, 0b11010])
@pytest.mark.parametrize("kernel", ["eager", "fused"])
def test_the_torch_kernels_take_the_sides_through_fill_orders_bit_for_bit(terms, kernel):
    """`fill_orders` hands the torch kernels the sides as they are (`order_sides`: exact), and
    writes nothing into the caller's sides (the eager kernels work in place on their own copies)."""
    inputs = golden_inputs(terms)
    sides = inputs["sells"].clone(), inputs["buys"].clone()
    rules = _rules(terms, kernel)
    market = fill_inputs.Market(
        *(
            None if inputs[name] is None else inputs[name].index_select(0, inputs["bars"]).double()
            for name in ("half_spread", "impact", "fill_cap")
        )
    )
    direct = fill._fill_with_costs_fused if kernel == "fused" else fill._fill_with_costs
    expected = direct(
        inputs["cash"],
        inputs["holdings"],
        inputs["sells"].clone(),
        inputs["buys"].clone(),
        inputs["price"],
        market,
        rules,
    )
    got = _fill_of(inputs, kernel)
    for name, want, have in zip(fill_inputs.Fill._fields, expected, got, strict=True):
        assert torch.equal(have.view(torch.int64), want.view(torch.int64)), name
    for before, after in zip(sides, (inputs["sells"], inputs["buys"]), strict=True):
        assert torch.equal(before.view(torch.int64), after.view(torch.int64))


@pytest.mark.parametrize("kernel", ["native", "eager", "fused", "flat"])
def test_a_nan_order_is_no_order_in_every_kernel(kernel, request):
    """A stock is sold or bought, never both: a NaN on its side (the other 0), or on both, is no
    order (as a NaN action is), whether the kernel takes the sides (flat, torch) or ``buys - sells``
    (C). Rows with a NaN order fill as if that order were 0, and the caller's sides are not changed."""
    if kernel == "native":
        request.getfixturevalue("native_kernel")
    terms = 0b11111 if kernel != "flat" else 0b10000
    inputs = golden_inputs(terms)
    if kernel == "flat":
        inputs.update(half_spread=None, impact=None, fill_cap=None)
    nan_buy, nan_sell = (torch.zeros_like(inputs["sells"], dtype=torch.bool) for _ in range(2))
    nan_buy[2, 3] = nan_sell[5, 0] = nan_buy[8, 6] = nan_sell[8, 6] = True
    nan = nan_buy | nan_sell
    zeroed = {**inputs, "sells": inputs["sells"].where(~nan, 0.0), "buys": inputs["buys"].where(~nan, 0.0)}
    with_nan = {
        **zeroed,
        "sells": zeroed["sells"].where(~nan_sell, float("nan")),
        "buys": zeroed["buys"].where(~nan_buy, float("nan")),
    }
    given = with_nan["sells"].clone(), with_nan["buys"].clone()
    if kernel == "flat":
        rules = fill_inputs.fill_rules(CostModel(), 0.001, 0.002, True, torch.device("cpu"), fused=False)
        expected, got = (
            fill.fill_orders(
                x["cash"],
                x["holdings"],
                x["sells"],
                x["buys"],
                x["price"],
                x["open_prices"],
                fill_inputs.Market(None, None, None),
                x["bars"],
                rules,
            )
            for x in (zeroed, with_nan)
        )
    else:
        expected, got = _fill_of(zeroed, kernel), _fill_of(with_nan, kernel)
    for name, want, have in zip(fill_inputs.Fill._fields, expected, got, strict=True):
        assert not have.isnan().any(), name
        assert torch.equal(have, want), name
    assert float(expected.traded.sum()) > 0  # the other orders filled
    for before, after in zip(given, (with_nan["sells"], with_nan["buys"]), strict=True):
        assert torch.equal(before.isnan(), after.isnan()) and torch.equal(before.nan_to_num(), after.nan_to_num())


def test_a_panel_whose_opens_are_not_float32_takes_the_torch_kernels(native_kernel):
    """The C kernel reads the open table as float32 (`native_fill.PRICES_DTYPE`); a float64 panel's env
    takes the torch kernels, and fills as the float32 panel's env does where its prices are the same."""
    wide = replace(VOLUME_PANEL, features=VOLUME_PANEL.features.double())
    config = EnvConfig(costs=EVERY_COST, short_selling=True, initial_cash=3_000.0, random_start=False)
    env64 = StockTradingVecEnv(wide, 3, "cpu", config)
    env32 = StockTradingVecEnv(VOLUME_PANEL, 3, "cpu", config)
    assert env32.rules.fill.native and not env64.rules.fill.native
    env64.reset(seed=0), env32.reset(seed=0)
    for actions in random_actions(8, 3, VOLUME_PANEL.num_tickers, seed=4):
        info64, info32 = env64.step(actions)[4], env32.step(actions)[4]
        for key in ("cash", "holdings", *COST_KEYS):
            torch.testing.assert_close(info64[key], info32[key], rtol=1e-9, atol=1e-6, msg=key)
