"""`market_envs.rollout`: many bars per call, held equal to the bar-by-bar path.

The chunked path runs here with ``torch.compile`` replaced by the identity (the same
Python, traced or not: fast enough for the default suite); `test_compiled_*` (slow) runs
the real compiler once. What is equal and why:

- strategies traced as they are (the golden case's callables, the baselines, schedules):
  bit for bit, the same operations on the same numbers;
- agents and populations of flat MLPs, whose first layer the program splits into the
  features' product (per block of bars) and the account's (per bar): the actions differ
  from one product by float32 rounding (a relative 1e-6 at most here) and the book by what
  that moves: values and cash agree to 1e-7 relative in a pass of one agent and to 1e-6 in
  a backtest of three random MLPs with short books (cash of 1.8 times the capital), the flows (value traded, costs,
  positions, differences of large books) to 1e-5 relative, Sharpe ratios to 1e-6.
"""

from __future__ import annotations

import inspect
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from golden.case import golden_inputs, golden_report
from market_fixtures import random_panel
from torch.utils._python_dispatch import TorchDispatchMode

from market_envs.costs import CostModel
from market_envs.config import EnvConfig
from market_envs.env import StockTradingVecEnv
from market_envs.rollout import DEFAULT_BLOCK, Rollout, chunk_options
from trader.agents import make_agent, make_config
from trader.agents.evaluator import market_evaluator
from trader.agents.program import agents_program, rational_tanh
from trader.backtesting import BacktestConfig, PolicyPopulation, run_backtest
from trader.backtesting.report import report_dict

GOLDEN = Path(__file__).parent / "golden" / "backtest_report.json"
EVERY_COST = CostModel(
    commission_per_share=0.005,
    commission_min=1.0,
    commission_max_rate=0.01,
    spread_model="high_low",
    spread_window=20,
    impact_eta=1.0,
    impact_window_days=1,
    participation=0.05,
    borrow_rate=0.05,
)
RULES = EnvConfig(
    action_mode="weights",
    short_selling=True,
    costs=EVERY_COST,
    random_start=False,
    episode_length=None,
    return_windows=(5,),
    initial_cash=100_000.0,
)
PANEL = random_panel(n_tickers=5, n_bars=1001, seed=11)


@pytest.fixture
def traced(monkeypatch):
    """torch.compile as the identity: the chunked path's Python, run eagerly."""
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)


def _agent(algo: str, network: str, seed: int = 0):
    env = StockTradingVecEnv(PANEL, 1, "cpu", RULES)
    hidden = {"hidden_sizes": (16, 16)}
    agent = make_agent(algo, env.obs_dim, env.act_dim, make_config(algo, {"network": network, **hidden}), seed=seed)
    obs = torch.randn(64, env.obs_dim) * 3.0
    agent.normalizer.update(obs)  # statistics of its own, so normalising is not the identity
    return agent


def _by_bar(env: StockTradingVecEnv, agent, keys: tuple[str, ...]) -> dict[str, torch.Tensor]:
    obs, _ = env.reset()
    rows: dict[str, list] = {key: [] for key in keys}
    for _ in range(env.num_bars - 1):
        obs, _, _, _, info = env.step(agent.act(obs, deterministic=True))
        for key in keys:
            rows[key].append(info[key])
    return {key: torch.stack(values) for key, values in rows.items()}


@pytest.mark.parametrize(
    ("algo", "network"), [("ppo", "mlp"), ("ppo", "per_stock"), ("sac", "mlp"), ("td3", "per_stock")]
)
def test_agent_program_acts_as_the_agent(algo: str, network: str) -> None:
    _assert_program_acts_as(_agent(algo, network), RULES)


def test_per_stock_program_of_one_feature_acts_as_the_agent() -> None:
    """The market preset's layout, one feature per stock (the encoder's features part a product of
    inner size 1, which the compiler turns into a broadcast product fused with the activation)."""
    rules = replace(RULES, features=(), return_windows=(5,))
    env = StockTradingVecEnv(PANEL, 1, "cpu", rules)
    assert env.obs_dim == 1 + 2 * env.num_stocks
    config = make_config("ppo", {"network": "per_stock", "hidden_sizes": (16, 16)})
    agent = make_agent("ppo", env.obs_dim, env.act_dim, config, seed=1)
    agent.normalizer.update(torch.randn(64, env.obs_dim) * 3.0)
    _assert_program_acts_as(agent, rules)


def test_rational_tanh_is_tanh_within_4e_7() -> None:
    """The per-stock programs' activation: within 4e-7 of tanh everywhere on a fine grid in float32,
    odd, 0 at 0, +-1 far out and at the infinities, NaN kept; and its coefficients are the fitting
    tool's (tools/fit_tanh.py), refitted here. The refit agrees to about 1e-7, not to the last bits: its 60
    rounds of least squares amplify the BLAS's rounding, which differs by CPU (a Zen 4 host with AVX-512
    refits 1.0e-7 away from the Zen 3 fit in the code, and up to 7e-7 with OpenBLAS's Haswell kernels); 1e-5
    still tells the tool's coefficients from any others, and the fit in the code must be as good as the
    refit on this machine's arithmetic."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))  # a developer's tool
    from fit_tanh import fit

    x = torch.linspace(-20.0, 20.0, 400_001)
    got = rational_tanh(x)
    assert float((got.double() - torch.tanh(x.double())).abs().max()) < 4e-7
    assert torch.equal(got, -rational_tanh(-x))
    special = rational_tanh(torch.tensor([0.0, 9.0, 50.0, -50.0, math.inf, -math.inf, math.nan]))
    assert special[:6].tolist() == [0.0, 1.0, 1.0, -1.0, 1.0, -1.0] and math.isnan(special[6])
    defaults = inspect.signature(rational_tanh).parameters
    numerator, denominator, refit_error = fit()
    for fitted, name in zip((numerator, denominator), ("numerator", "denominator"), strict=True):
        assert np.allclose(fitted, defaults[name].default, rtol=1e-5, atol=0), name
    # and the coefficients in the code are as near minimax here as the refit (float64, the tool's grid)
    grid = np.linspace(1e-6, 9.0, 20_001)

    def rational(p: Sequence[float], q: Sequence[float]) -> np.ndarray:
        t = grid * grid
        return grid * sum(c * t**k for k, c in enumerate(p)) / sum(c * t**k for k, c in enumerate(q))

    coded = rational(defaults["numerator"].default, defaults["denominator"].default)
    assert float(np.abs(coded - np.tanh(grid)).max()) <= 1.001 * refit_error


def _assert_program_acts_as(agent, rules: EnvConfig) -> None:
    program, params = agents_program([agent])
    env = StockTradingVecEnv(PANEL, 1, "cpu", rules)
    obs = torch.randn(300, env.obs_dim)
    rows = obs.clone()
    rows[:, : program.width] = 0.0
    prepared = program.prepare(params, rows)
    for k in range(0, 300, 37):

        class Bar:  # the fields a policy program reads
            pass

        bar = Bar()
        bar.obs = obs[k : k + 1]
        bar.account = obs[k : k + 1, : program.width]
        got = program.decide(params, prepared[k], bar)
        want = agent.act(obs[k : k + 1], deterministic=True)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("network", ["mlp", "per_stock"])
def test_rollout_equals_the_step_by_step_pass_with_every_cost_term(traced, network: str) -> None:
    """1,000 bars, every cost term on, a trained-looking agent (normalised observations)."""
    agent = _agent("ppo", network, seed=3)
    keys = ("value", "cash", "holdings", "costs", "cost_impact", "unfilled_value")
    env = StockTradingVecEnv(PANEL, 1, "cpu", RULES)
    want = _by_bar(env, agent, keys)
    program, params = agents_program([agent])
    got = Rollout(env, program, record=keys, chunk=8, block=64).run(params)
    assert got["value"].shape == (1000, 1)
    # float32 actions that differ by rounding trade amounts that differ by about 1e-7 of the
    # book: values and cash agree to 1e-7 of the 1e5 book, each term of the costs and each
    # position (in shares, of stocks priced about 100) to about as many units of currency
    for key in keys:
        torch.testing.assert_close(got[key], want[key], rtol=1e-7, atol=1e-3, msg=key)


def test_compile_here_runs_one_chunk_once_and_leaves_the_env_as_it_was(traced, monkeypatch) -> None:
    """`Rollout.compile_here` (before a forked worker runs the pass): the first chunk runs, the env's
    state is untouched, the pass after it is the pass without it, and a second call runs nothing."""
    import market_envs.rollout as rollout

    agent = _agent("ppo", "mlp", seed=2)
    program, params = agents_program([agent])
    want = Rollout(StockTradingVecEnv(PANEL, 1, "cpu", RULES), program, record=("value", "holdings")).run(params)
    monkeypatch.setattr(rollout, "_CALLED", set())  # as in a process where no pass has run
    env = StockTradingVecEnv(PANEL, 1, "cpu", RULES)
    obs, _ = env.reset()
    before = [t.clone() for t in env.require_reset()]
    chunks = []
    probe = Rollout(env, program, record=("value", "holdings"))
    call = probe._run_chunk
    monkeypatch.setattr(probe, "_run_chunk", lambda *args: chunks.append(1) or call(*args))
    assert not probe.has_run_here
    probe.compile_here(params, obs)
    probe.compile_here(params, obs)
    assert len(chunks) == 1 and probe.has_run_here
    assert Rollout(env, program, record=("value", "holdings")).has_run_here  # the same chunk, another pass
    assert not Rollout(env, program, record=("value",)).has_run_here  # another record: another chunk
    assert all(torch.equal(a, b) for a, b in zip(env.require_reset(), before, strict=True))
    got = Rollout(env, program, record=("value", "holdings")).run(params, obs)
    assert all(torch.equal(got[key], want[key]) for key in want)


@pytest.mark.slow
def test_snapshots_in_one_pass_equal_their_passes_one_by_one(traced) -> None:
    """S agents of one architecture stacked: row s of one pass is agent s's own pass."""
    agents = [_agent("ppo", "mlp", seed=s) for s in range(3)]
    program, params = agents_program(agents)
    together = Rollout(StockTradingVecEnv(PANEL, 3, "cpu", RULES), program, record=("value",)).run(params)
    for s, agent in enumerate(agents):
        alone, one = agents_program([agent])
        single = Rollout(StockTradingVecEnv(PANEL, 1, "cpu", RULES), alone, record=("value",)).run(one)
        torch.testing.assert_close(together["value"][:, s], single["value"][:, 0], rtol=1e-12, atol=0.0)


@pytest.mark.parametrize(("network", "normalize"), [("mlp", True), ("mlp", False), ("per_stock", False)])
def test_agents_given_one_by_one_are_stacked_into_one_program(network: str, normalize: bool) -> None:
    """`stack_params` of agents' programs built one by one is `agents_program` of them all."""
    from trader.agents.program import stack_params

    agents = [_agent("ppo", network, seed=s) for s in range(3)]
    if not normalize:
        for agent in agents:
            agent.normalizer.enabled = False
    program, params = agents_program(agents)
    alone = [agents_program([agent]) for agent in agents]
    assert all(one == program for one, _ in alone)
    stacked = stack_params(program, [p for _, p in alone])
    flat, want = torch.utils._pytree.tree_flatten(stacked)[0], torch.utils._pytree.tree_flatten(params)[0]
    assert len(flat) == len(want) and all(torch.equal(a, b) for a, b in zip(flat, want, strict=True))


@pytest.mark.slow
def test_a_backtest_decides_agents_of_one_architecture_in_one_program(traced, monkeypatch) -> None:
    """Agents given as separate strategies (checkpoints of one run, say) are one program in the
    chunked backtest, and each one's series is its own backtest's."""
    import trader.backtesting.simulation as simulation

    merged = []
    stacked = simulation._stacked
    monkeypatch.setattr(
        simulation, "_stacked", lambda parts, params: merged.append(stacked(parts, params)[0]) or stacked(parts, params)
    )
    agents = {f"a{s}": _agent("ppo", "mlp", seed=s) for s in range(3)}
    config = BacktestConfig(tear_sheet=False, compile=True, policy_env=RULES)
    together = run_backtest(PANEL, agents, baselines=[], config=config)
    assert len(merged[0]) == 1 and merged[0][0][1:] == (0, 3)  # one part deciding rows 0..2
    for name, agent in agents.items():
        alone = run_backtest(PANEL, {name: agent}, baselines=[], config=config)
        np.testing.assert_allclose(together.series[name]["value"], alone.series[name]["value"], rtol=1e-12)


def test_validation_pass_scores_as_before(traced) -> None:
    """The validation pass, by rollout compiled and eager (in inference mode), scores as the bar-by-bar
    loop of before."""
    agent = _agent("ppo", "mlp", seed=5)
    fast = market_evaluator(PANEL, RULES, compile=True)
    eager = market_evaluator(PANEL, RULES, compile=False)
    assert fast._rollout_episode(agent) is not None and eager._rollout_episode(agent) is not None
    with torch.inference_mode():  # as `run_episodes` runs it
        want = eager.score_fn(eager._step_episodes(agent))  # bar by bar
    for got in (fast.evaluate(agent), eager.evaluate(agent)):
        assert got["score"] == pytest.approx(want["score"], rel=1e-6)
        assert got["return"] == pytest.approx(want["return"], abs=1e-7)  # the value, to 1e-7 of the book


def _series_equal(a, b, rtol: float, atol: float = 1e-9, flows: float | None = None) -> None:
    """Every series and position of every strategy within `rtol`; the flows (traded value,
    gross value, costs, positions: differences of large books) within `flows` when given."""
    assert list(a.series) == list(b.series)
    for name in a.series:
        for column in a.series[name].columns:
            tolerance = rtol if flows is None or column in ("value", "return", "cash") else flows
            np.testing.assert_allclose(
                b.series[name][column], a.series[name][column], rtol=tolerance, atol=atol, err_msg=f"{name} {column}"
            )
        held = a.positions[name].to_numpy()
        scale = 0.0 if flows is None else 1e-6 * np.abs(held).max()  # a small position: 1e-6 of the largest
        np.testing.assert_allclose(
            b.positions[name].to_numpy(), held, rtol=rtol if flows is None else flows, atol=max(atol, scale)
        )


def test_chunked_backtest_equals_the_golden_report_bit_for_bit(traced) -> None:
    data, policies = golden_inputs()
    config = BacktestConfig(tear_sheet=False)
    eager = run_backtest(data, policies, period="test", config=config)
    chunked = run_backtest(data, policies, period="test", config=replace(config, compile=True))
    for name in eager.series:
        assert eager.series[name].equals(chunked.series[name]), name
        assert eager.positions[name].equals(chunked.positions[name]), name
    expected = json.loads(GOLDEN.read_text())
    actual = json.loads(json.dumps(golden_report(report_dict(chunked))))
    assert actual["metrics"].keys() == expected["metrics"].keys()


def test_chunked_backtest_of_a_random_population_with_every_cost_term(traced) -> None:
    """A population of random MLPs (split first layer), the baselines and a schedule, 600
    bars (two blocks of `DEFAULT_BLOCK` and a part of one), every cost term on, the breakeven
    multiples too."""
    panel = PANEL.take(slice(0, 2 * DEFAULT_BLOCK + 89))
    env = StockTradingVecEnv(panel, 1, "cpu", RULES)
    torch.manual_seed(0)
    nets = {
        f"p{k}": torch.nn.Sequential(
            torch.nn.Linear(env.obs_dim, 16), torch.nn.Tanh(), torch.nn.Linear(16, env.act_dim), torch.nn.Tanh()
        )
        for k in range(3)
    }
    population = PolicyPopulation.from_modules(nets)
    assert population.program is not None
    config = BacktestConfig(
        tear_sheet=False, policy_env=RULES, costs=EVERY_COST, cost_multiples=(0.0, 2.0), record_positions="day"
    )
    eager = run_backtest(panel, {"mlp": population}, config=config)
    chunked = run_backtest(panel, {"mlp": population}, config=replace(config, compile=True))
    _series_equal(eager, chunked, rtol=1e-6, atol=1e-3, flows=1e-5)
    np.testing.assert_allclose(chunked.metrics["sharpe_ratio"], eager.metrics["sharpe_ratio"], rtol=1e-6)
    assert chunked.breakeven.keys() == eager.breakeven.keys()


class SyncCount(TorchDispatchMode):
    """Counts host syncs: `aten._local_scalar_dense`, the op behind ``.item()``, ``bool(t)``, ``int(t)``."""

    def __init__(self) -> None:
        super().__init__()
        self.syncs = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.syncs += 1
        return func(*args, **(kwargs or {}))


def _syncs(run) -> int:
    with SyncCount() as counter:
        run()
    return counter.syncs


@pytest.mark.parametrize("bars", [200])
def test_no_host_sync_per_bar(traced, bars: int) -> None:
    """A validation pass and a backtest of 200 and of 400 bars make the same number of host
    syncs: none per bar (the ones left are per pass: the records' trip to the host)."""
    agent = _agent("ppo", "mlp")
    counts = {}
    for n in (bars, 2 * bars):
        panel = PANEL.take(slice(0, n + 1))
        evaluator = market_evaluator(panel, RULES, compile=True)
        pass_syncs = _syncs(lambda: evaluator.run_episodes(agent))
        config = BacktestConfig(tear_sheet=False, policy_env=RULES, costs=EVERY_COST, compile=True)
        backtest_syncs = _syncs(
            lambda: run_backtest(panel, {"ppo": agent}, baselines=["equal_weight", "equal_weight_daily"], config=config)
        )
        counts[n] = (pass_syncs, backtest_syncs)
    assert counts[bars][0] == counts[2 * bars][0] == 0
    assert counts[bars][1] == counts[2 * bars][1]


@pytest.mark.slow
def test_compiled_rollout_equals_the_step_by_step_pass() -> None:
    agent = _agent("ppo", "per_stock", seed=3)
    env = StockTradingVecEnv(PANEL, 1, "cpu", RULES, compile=True)
    want = _by_bar(StockTradingVecEnv(PANEL, 1, "cpu", RULES), agent, ("value",))
    program, params = agents_program([agent])
    got = Rollout(env, program, record=("value",)).run(params)
    torch.testing.assert_close(got["value"], want["value"], rtol=1e-7, atol=1e-3)


@pytest.mark.slow
def test_a_chunk_stores_a_value_read_through_a_broadcast() -> None:
    """`STORE_OPTIONS`: a policy's first layer reads the account columns (a cheap function of the float64
    state) once per output unit through a broadcast; compiled with a chunk's options on a CPU, the columns
    are stored once ([S, in] buffer) instead of recomputed inside the product's reduction for every unit."""
    from torch._inductor.utils import run_and_get_code

    def first_layer(holdings: torch.Tensor, value: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        account = (holdings / value.unsqueeze(-1)).clamp(0.0, 1.0).float()  # [S, in], two buffers read
        return (account.unsqueeze(1) * weight).sum(-1)  # [S, out]

    s, inputs, outputs = 4, 7, 5
    args = (torch.rand(s, inputs, dtype=torch.float64), torch.rand(s, dtype=torch.float64) + 1.0)
    args = (*args, torch.randn(s, outputs, inputs))
    compiled = torch.compile(first_layer, dynamic=False, options=chunk_options(torch.device("cpu"), False))
    got, (code,) = run_and_get_code(compiled, *args)
    torch.testing.assert_close(got, first_layer(*args))
    assert f"empty_strided_cpu(({s}, {inputs})" in code
    assert chunk_options(torch.device("cuda"), True) is None  # CUDA keeps inductor's defaults


@pytest.mark.slow
def test_compiled_backtest_equals_the_golden_report() -> None:
    data, policies = golden_inputs()
    config = BacktestConfig(tear_sheet=False)
    eager = run_backtest(data, policies, period="test", config=config)
    compiled = run_backtest(data, policies, period="test", config=replace(config, compile=True))
    _series_equal(eager, compiled, rtol=1e-12)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_per_env_trade_rates_survive_a_pass_with_as_many_envs_as_bars(traced) -> None:
    """The chunked pass cuts the per-bar tables to each chunk's bars; a table with one row per
    sub-environment (each its own trade rate, `set_pace`) stays whole, also when E equals T."""
    panel = random_panel(n_tickers=3, n_bars=40, seed=5)
    rules = EnvConfig(
        action_mode="weights",
        random_start=False,
        episode_length=None,
        return_windows=(5,),
        initial_cash=1e5,
        trade_rate=0.5,
    )

    def paced_env() -> StockTradingVecEnv:
        env = StockTradingVecEnv(panel, panel.num_bars, "cpu", rules)
        env.set_pace(trade_rate=torch.linspace(0.05, 1.0, panel.num_bars))
        return env

    env = paced_env()
    agent = make_agent("ppo", env.obs_dim, env.act_dim, make_config("ppo", {"hidden_sizes": (8,)}), seed=0)
    want = _by_bar(env, agent, ("value",))["value"]
    program, params = agents_program([agent] * panel.num_bars)
    got = Rollout(paced_env(), program, record=("value",), chunk=8, block=16).run(params)["value"]
    assert got.shape == want.shape == (39, 40)
    assert len(set(want[-1].tolist())) > 1  # the rates differ, and so do the books
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-4)
