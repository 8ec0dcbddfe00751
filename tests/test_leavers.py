"""A stock that leaves the index can be sold: known answers for the rule of `MarketData.reducible`.

On a bar where a stock has a price but is not a member, the env trades it only toward zero
(`market_envs.kernel.toward_zero`): a long is sold and a short covered, down to zero at most;
it is never bought, sold short, or turned through zero; a stock not held is not traded.
The orders a live trader sends (`StockTradingVecEnv.requested_orders`) follow the same rule.
Equivalence with the scalar reference under random masks is in tests/test_env.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from market_fixtures import random_panel, with_leavers

from market_envs import EnvConfig, StockTradingVecEnv
from market_envs.costs import CostModel
from market_envs.kernel import toward_zero, tradable_orders

PANEL = random_panel(n_tickers=3, n_bars=40, seed=3)
LEFT = 10
"""Stock 0 leaves the index at this bar (reducible from it on); stock 2 is out from the start
(never held); stock 1 stays a member."""


def leaver_panel(gap_at: int | None = None):
    """PANEL with stock 0 out of the index from bar LEFT and stock 2 out all along; `gap_at`: a bar
    of stock 0 filled over a gap (no price of its own: neither tradable nor reducible)."""
    priced = torch.ones_like(PANEL.tradable)
    if gap_at is not None:
        priced[gap_at, 0] = False
    member = torch.ones_like(priced)
    member[LEFT:, 0] = False
    member[:, 2] = False
    return replace(PANEL, tradable=priced & member, reducible=priced & ~member)


def step_from(data, config: EnvConfig, held: list[float], action: list[float], bar: int = LEFT - 1, compile=False):
    """Holdings after one step from bar `bar` (the fill at bar + 1) holding `held` and cash."""
    env = StockTradingVecEnv(data, 1, "cpu", config, compile=compile)
    holdings = torch.tensor([held], dtype=torch.float64)
    env.reset(options={"start": bar, "cash": torch.tensor([50_000.0], dtype=torch.float64), "holdings": holdings})
    _, _, _, _, info = env.step(torch.tensor([action], dtype=torch.float32))
    return info["holdings"][0].tolist()


SHARES = EnvConfig(action_mode="shares", max_shares=100, buy_cost=0.0, sell_cost=0.0)
WEIGHTS = EnvConfig(action_mode="weights", buy_cost=0.0, sell_cost=0.0)


@pytest.mark.parametrize("short_selling", [False, True])
def test_a_long_in_a_leaver_is_sold_to_zero_never_bought_nor_turned_short(short_selling):
    data = leaver_panel()
    shares = replace(SHARES, short_selling=short_selling)
    assert step_from(data, shares, [60, 0, 0], [-0.25, 0, 0])[0] == 35  # a sale of 25 of 60
    assert step_from(data, shares, [60, 0, 0], [-1.0, 0, 0])[0] == 0  # 100 asked, the 60 held sold
    assert step_from(data, shares, [60, 0, 0], [0.5, 0, 0])[0] == 60  # no purchase
    weights = replace(WEIGHTS, short_selling=short_selling)
    for wants in (0.0, -0.5, -1.0):  # out, or short: sold to zero, not beyond
        assert step_from(data, weights, [60, 0, 0], [wants, 0.5, 0])[0] == 0
    assert step_from(data, weights, [60, 0, 0], [1.0, 0, 0])[0] <= 60  # more wanted: nothing bought
    # the bar before it leaves, the same orders fill in full
    assert step_from(data, shares, [60, 0, 0], [0.5, 0, 0], bar=LEFT - 2)[0] == 110
    if short_selling:
        assert step_from(data, shares, [60, 0, 0], [-1.0, 0, 0], bar=LEFT - 2)[0] == -40


@pytest.mark.parametrize("config", [SHARES, WEIGHTS], ids=["shares", "weights"])
def test_a_short_in_a_leaver_is_covered_to_zero_never_increased_nor_turned_long(config):
    data = leaver_panel()
    config = replace(config, short_selling=True)
    if config.action_mode == "shares":
        assert step_from(data, config, [-60, 0, 0], [0.25, 0, 0])[0] == -35  # a cover of 25
        assert step_from(data, config, [-60, 0, 0], [1.0, 0, 0])[0] == 0  # 100 asked, 60 covered
    else:
        assert step_from(data, config, [-60, 0, 0], [0.8, 0.2, 0])[0] == 0  # long wanted: covered to zero
        assert step_from(data, config, [-60, 0, 0], [0.0, 0.5, 0])[0] == 0  # out wanted: covered
    assert step_from(data, config, [-60, 0, 0], [-1.0, 0, 0])[0] == -60  # a larger short: refused


@pytest.mark.parametrize(
    "config", [SHARES, WEIGHTS, replace(WEIGHTS, short_selling=True)], ids=["shares", "weights", "weights-short"]
)
def test_a_non_member_never_held_is_never_traded_and_a_gap_bar_trades_nothing(config):
    data = leaver_panel(gap_at=LEFT)
    for action in ([0, 0, 1.0], [0, 0, -1.0], [0.5, 0.5, 0.5]):
        assert step_from(data, config, [0, 0, 0], action)[2] == 0
    # a leaver's bar without a price of its own (filled over a gap): not even a sale
    assert step_from(data, config, [60, 0, 0], [-1.0, 0, 0])[0] == 60
    assert step_from(data, config, [60, 0, 0], [-1.0, 0, 0], bar=LEFT)[0] == 0  # the next bar sells it


def test_the_rule_is_one_function_of_the_masks():
    sells = torch.tensor([[50.0, 0.0, 10.0, 5.0, 7.0]])
    buys = torch.tensor([[0.0, 30.0, 0.0, 9.0, 3.0]])
    holdings = torch.tensor([[20.0, -10.0, -4.0, 0.0, 0.0]])
    reducible = torch.tensor([[True, True, True, True, False]])
    tradable = torch.tensor([[False, False, False, False, True]])
    cut_sells, cut_buys = toward_zero(sells, buys, holdings, reducible)
    assert cut_sells.tolist() == [[20.0, 0.0, 0.0, 0.0, 7.0]] and cut_buys.tolist() == [[0.0, 10.0, 0.0, 0.0, 3.0]]
    assert [t.tolist() for t in tradable_orders(sells, buys, holdings, tradable, reducible)] == [
        [[20.0, 0.0, 0.0, 0.0, 7.0]],
        [[0.0, 10.0, 0.0, 0.0, 3.0]],
    ]
    nothing = torch.zeros_like(tradable)
    assert all(x.abs().sum() == 0 for x in tradable_orders(sells, buys, holdings, nothing, nothing))
    assert [t.tolist() for t in tradable_orders(sells, buys, holdings, ~nothing, None)] == [
        sells.tolist(),
        buys.tolist(),
    ]


def test_requested_orders_at_a_leaver_only_reduce():
    """The orders a live trader sends (`trader act` at the latest bar, `trader paper`) for a stock
    out of the index at the decision bar: toward zero only; members are ordered as the mapping says."""
    data = leaver_panel()
    env = StockTradingVecEnv(data, 1, "cpu", replace(WEIGHTS, short_selling=True))
    held = torch.tensor([[60.0, 0.0, 0.0]], dtype=torch.float64)
    env.reset(options={"start": LEFT, "cash": torch.tensor([50_000.0], dtype=torch.float64), "holdings": held})
    price = data.close[LEFT].double()
    sells, buys = env.requested_orders(torch.tensor([[-1.0, 0.5, 1.0]]), price)
    assert sells[0, 0] == 60 and buys[0, 0] == 0  # sold to zero, not short
    assert buys[0, 2] == 0 and sells[0, 2] == 0  # a non-member not held: nothing
    assert buys[0, 1] > 0  # a member is bought
    sells, buys = env.requested_orders(torch.tensor([[1.0, 0.0, 0.0]]), price)
    assert buys[0, 0] == 0 and sells[0, 0] == 0


def test_a_panel_without_leavers_keeps_the_step_as_it_was():
    """No reducible mask (or one without a True bar): no table, and the kernel is built without the rule."""
    for data in (PANEL, replace(PANEL, reducible=torch.zeros_like(PANEL.tradable))):
        env = StockTradingVecEnv(data, 2, "cpu", SHARES)
        assert not env.rules.leavers and env.tables.reducible is None
    env = StockTradingVecEnv(leaver_panel(), 2, "cpu", SHARES)
    assert env.rules.leavers and env.tables.reducible is not None


def test_the_panel_carries_the_mask_through_its_cuts():
    data = replace(leaver_panel(), meta={"train_end": PANEL.timestamps[15], "val_end": PANEL.timestamps[25]})
    part = data.take(slice(5, 20))
    assert torch.equal(part.reducible, data.reducible[5:20]) and torch.equal(part.priced, data.priced[5:20])
    train, validation, test = data.split(data.meta["train_end"], data.meta["val_end"])
    assert torch.equal(torch.cat([train.reducible, validation.reducible, test.reducible]), data.reducible)
    assert torch.equal(data.period("test").reducible, test.reducible)
    assert data.to("cpu").reducible is not None and "reducible" in data.to_frame()
    with pytest.raises(Exception, match="reducible has shape"):
        replace(data, reducible=data.reducible[1:])


def _trajectory(data, config, compile: bool, device: str = "cpu") -> list[torch.Tensor]:
    env = StockTradingVecEnv(data, 6, device, config, compile=compile)
    env.reset(seed=3)
    generator = torch.Generator().manual_seed(4)
    out = []
    for _ in range(20):
        actions = torch.rand((6, data.num_tickers), generator=generator) * 2 - 1
        _, reward, _, _, info = env.step(actions.to(env.device))
        out += [reward, info["value"], info["holdings"], info["costs"]]
    return [x.cpu() for x in out]


EVERY_COST = CostModel(
    commission_per_share=0.005,
    commission_min=1.0,
    spread_model="high_low",
    spread_window=10,
    impact_eta=1.0,
    impact_window_days=1,
    participation=0.05,
    borrow_rate=0.05,
)


@pytest.mark.parametrize("costs", [CostModel(), EVERY_COST], ids=["flat", "every-cost"])
def test_the_compiled_step_applies_the_rule_as_the_eager_one(costs):
    data = with_leavers(
        random_panel(n_tickers=4, n_bars=60, seed=8, gap_prob=0.05), seed=8, switches=6, member_first=0.5
    )
    config = EnvConfig(action_mode="weights", short_selling=True, episode_length=12, initial_cash=30_000.0, costs=costs)
    eager, compiled = _trajectory(data, config, False), _trajectory(data, config, True)
    for a, b in zip(eager, compiled, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("mode", ["shares", "weights"])
def test_cuda_applies_the_rule_as_the_cpu(mode):
    data = with_leavers(
        random_panel(n_tickers=4, n_bars=60, seed=8, gap_prob=0.05), seed=8, switches=6, member_first=0.5
    )
    config = EnvConfig(
        action_mode=mode,
        short_selling=True,
        episode_length=12,
        initial_cash=30_000.0,
        random_start=False,
        costs=EVERY_COST,
    )
    for a, b in zip(_trajectory(data, config, False), _trajectory(data, config, False, "cuda"), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)
