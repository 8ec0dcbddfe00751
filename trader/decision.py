"""A run's decision at one bar: the selected strategy's target book and its orders.

`act(run_dir, at=..., book=...)` (``trader.act`` in the Python API, `trader act` on
the command line) answers what a quant asks of a trained run before
trading it: "given what I hold now, what does the agent want, and what must I
trade?" It uses the run's own rules, read from its folder as `trader backtest` reads
them (`trader.backtesting.runs`): the data set and its period, the checkpoint's env
rules, the run's capital and cost model. Nothing is typed by hand.

- **A bar with a next bar in the data** (``at`` in the past): the decision is filled
  by the env's own step at the next bar's open, with every rule of the fill (the
  tradable mask, the turbulence guard, the participation cap, the cash limit and
  each cost term). The result is what a backtest in the same state trades there,
  to the cent: the orders, the holdings after them, the cash and the costs by term.
- **The latest bar of the data** (``at`` omitted): its next open is not known yet.
  The targets are the env's action mapping priced at the bar's close, and the
  orders are those targets less the book, *before* the fill's limits (masks, cap,
  cash limit) and with no costs; the decision says it is an estimate. A stock out of
  a point-in-time index at the bar is only ordered toward zero, as the fill would
  (`StockTradingVecEnv.requested_orders`): a position in a leaver is sold, never added to.

The observation is built as a backtest over the same period builds it (features
from the period's bars up to ``at``), with the book's cash and positions in its
account columns. A book worth zero or less at the bar's close is refused with one line
(`check_book_value`): target weights are fractions of the book's value. Checkpoint
strategies only (``best``, ``final``, a tournament's ``best``); an ensemble or a
baseline library's model is refused with one line.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from trader.errors import UserError


@dataclass(frozen=True)
class Decision:
    """What `act` decided, per ticker and for the account.

    :param strategy: the run's strategy that decided (``best``, ...).
    :param bar: the bar whose close the policy saw.
    :param fills_at: the next bar, where the orders fill; None at the data's latest bar.
    :param estimated: True at the latest bar: prices are the bar's close and the orders
        are before the fill's limits and costs.
    :param price: the fill price per ticker (the next open), or the close when estimated.
    :param held: the book's shares per ticker before the decision.
    :param orders: shares to trade per ticker (positive buys, negative sells).
    :param shares: the shares held after the orders.
    :param weights: the book after the orders, as a fraction of its value at ``price``.
    :param cash_before: the book's cash.
    :param cash_after: cash after the orders and their costs (estimated: before costs).
    :param costs: the fill's costs by term (commission, spread, impact), 0 when estimated.
    """

    strategy: str
    bar: pd.Timestamp
    fills_at: pd.Timestamp | None
    estimated: bool
    price: pd.Series
    held: pd.Series
    orders: pd.Series
    shares: pd.Series
    weights: pd.Series
    cash_before: float
    cash_after: float
    costs: dict[str, float]

    def table(self) -> pd.DataFrame:
        """One row per ticker: held, order, shares after, price, target weight."""
        return pd.DataFrame(
            {
                "held": self.held,
                "order": self.orders,
                "shares": self.shares,
                "price": self.price,
                "weight": self.weights,
            }
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the account, and per ticker the non-zero rows of `table`."""
        rows = self.table()
        rows = rows[(rows["held"] != 0) | (rows["order"] != 0) | (rows["shares"] != 0)]
        return {
            "strategy": self.strategy,
            "bar": str(self.bar),
            "fills_at": None if self.fills_at is None else str(self.fills_at),
            "estimated": self.estimated,
            "cash_before": self.cash_before,
            "cash_after": self.cash_after,
            "costs": self.costs,
            "tickers": {ticker: {k: float(v) for k, v in row.items()} for ticker, row in rows.iterrows()},
        }


def act(
    run_dir: str | os.PathLike[str],
    *,
    at: str | pd.Timestamp | None = None,
    book: Any = None,
    strategy: str = "best",
    period: str = "test",
    dataset: str | None = None,
    device: str = "cpu",
) -> Decision:
    """The run's decision at bar ``at`` from ``book`` (see the module docstring).

    :param run_dir: a training run or a tournament (its folder).
    :param at: the bar to decide at: a timestamp (the last bar at or before it) or None
        for the period's latest bar.
    :param book: what is held: a `trader.backtesting.config.Book`, a mapping ``{"cash": x,
        "holdings": {ticker: shares}}`` (tickers left out hold 0), a path to a JSON file
        of that mapping, or None for all cash (the run's capital).
    :param strategy: the run's checkpoint strategy (``best``, ``final``).
    :param period: the period whose bars the observation is built from, as for `trader
        backtest` ("test", "validation", "train", "START:END" or "all").
    :param dataset: the data set, when the run records none.
    :param device: where the env and the policy run.
    """
    from trader.backtesting.groups import load_checkpoint_strategy
    from trader.backtesting.periods import select_period
    from trader.backtesting.runs import backtest_config, read_run

    if not Path(run_dir).is_dir():
        raise UserError(f"no such run directory: {run_dir}")
    contents = read_run(run_dir)
    recipe = dataset or contents.dataset
    if not recipe:
        raise UserError(f"no data set given: pass --dataset RECIPE ({Path(run_dir)} records none)")
    if strategy not in contents.checkpoints:
        offered = ", ".join(sorted(contents.checkpoints)) or "none"
        raise UserError(f"--strategy {strategy}: {run_dir} has no checkpoint of that name (its checkpoints: {offered})")
    checkpoint = contents.checkpoints[strategy]
    panel, _ = select_period(contents.data(recipe), period)
    bar = _bar_at(panel.timestamps, at)
    config = backtest_config(contents, tear_sheet=False)
    policy, rules, _, _ = load_checkpoint_strategy(strategy, checkpoint, panel, config, device)
    cash, held = _book(book, panel.tickers, config.initial_cash)
    check_book_value(cash, held, panel.close[bar], panel.timestamps[bar])
    return _decide(panel, rules, policy, strategy, bar, cash, held, device)


def check_book_value(cash: float, held: pd.Series, close: torch.Tensor, bar: pd.Timestamp) -> float:
    """The book's value at ``bar``'s close (cash + shares x close); one `UserError` line when it
    is not above zero. Target weights are fractions of that value: on a book worth zero or less
    there is no portfolio to aim at (each target would have the opposite sign of its weight)."""
    holdings = float((held.to_numpy() * close.double().cpu().numpy()).sum())
    value = cash + holdings
    if not value > 0:
        raise UserError(
            f"--book is worth {value:,.2f} at the close of {bar} (cash {cash:,.2f}, holdings {holdings:,.2f}): "
            "target weights are fractions of a book's value, so it must be worth more than 0"
        )
    return value


def _decide(
    panel: Any, rules: Any, policy: Any, strategy: str, bar: int, cash: float, held: pd.Series, device: str
) -> Decision:
    """One decision of `policy` at `bar` from (cash, held) on an env of one sub-environment."""
    from market_envs.env import StockTradingVecEnv

    env = StockTradingVecEnv(panel, num_envs=1, device=device, config=rules)
    holdings = torch.tensor(held.to_numpy(), dtype=torch.float64).unsqueeze(0)
    obs = reset_at(env, bar, cash, held.to_numpy())
    with torch.no_grad():
        actions = policy.act(obs, deterministic=True)
    tickers = list(panel.tickers)
    if bar + 1 < panel.num_bars:
        _, _, _, _, info = env.step(actions)
        price = panel.open[bar + 1].double()
        shares = info["holdings"][0].cpu()
        cash_after = float(info["cash"][0] + info["cost_borrow"][0])  # the fill's cash: the borrow fee is the close's
        costs = {term: float(info[f"cost_{term}"][0]) for term in ("commission", "spread", "impact")}
        fills_at, estimated = panel.timestamps[bar + 1], False
    else:
        price = panel.close[bar].double()
        sells, buys = env.requested_orders(actions, price)
        shares = (holdings - sells.cpu() + buys.cpu())[0]
        cash_after = cash + float(((sells - buys).cpu()[0] * price).sum())
        costs = {term: 0.0 for term in ("commission", "spread", "impact")}
        fills_at, estimated = None, True
    value = cash_after + float((shares * price).sum())
    return Decision(
        strategy=strategy,
        bar=panel.timestamps[bar],
        fills_at=fills_at,
        estimated=estimated,
        price=pd.Series(price.numpy(), index=tickers),
        held=held,
        orders=pd.Series((shares - holdings[0]).numpy(), index=tickers),
        shares=pd.Series(shares.numpy(), index=tickers),
        weights=pd.Series((shares * price).numpy() / value if value else math.nan, index=tickers),
        cash_before=cash,
        cash_after=cash_after,
        costs=costs,
    )


def reset_at(env: Any, bar: int, cash: float, held: Any) -> torch.Tensor:
    """Reset a one-sub-environment `StockTradingVecEnv` at ``bar`` holding ``cash`` and the
    shares ``held`` (one per ticker, the panel's order); returns its observation [1, obs_dim].

    The state equals that of an env which reached ``bar`` with this book (the book is
    marked at the bar's close), so its next `step` fills as a backtest's step there does
    (tests/test_act.py). `podracer.paper` decides and simulates fills through it too."""
    holdings = torch.as_tensor(held, dtype=torch.float64, device=env.device).reshape(1, -1)
    cash_row = torch.tensor([float(cash)], dtype=torch.float64, device=env.device)
    obs, _ = env.reset(options={"start": int(bar), "cash": cash_row, "holdings": holdings})
    return obs


def selected_strategy(contents: Any, panel: Any, config: Any, device: str = "cpu") -> tuple[str, Any, Any]:
    """A run's selected strategy as ``(name, policy, rules)``: a tournament's result
    (``selection.json``: its ``ensemble`` when that was chosen, else ``best``),
    a training run's ``checkpoints/best``. The rules are those a backtest of it trades
    under (`trader.backtesting.groups`: a checkpoint's own, the run's for an ensemble, with
    the backtest's cash and costs).

    :raises UserError: the run has no selected strategy (no ``best`` checkpoint, no ensemble).
    """
    from trader.backtesting.groups import load_checkpoint_strategy

    if contents.result == "ensemble" and contents.ensemble:
        from trader.agents.ensemble import load_ensemble

        policy = load_ensemble(contents.ensemble, device, contents.ensemble_weights or None)
        return "ensemble", policy, config.env_config(config.policy_env)
    if "best" not in contents.checkpoints:
        raise UserError(
            f"{contents.run_dir} has no selected strategy: no checkpoints/best (a training run) "
            "and no leaderboard entry or ensemble (a tournament)"
        )
    policy, rules, _, _ = load_checkpoint_strategy("best", contents.checkpoints["best"], panel, config, device)
    return "best", policy, rules


def _bar_at(timestamps: pd.DatetimeIndex, at: str | pd.Timestamp | None) -> int:
    """Index of the last bar at or before ``at`` (the latest bar when None)."""
    if at is None:
        return len(timestamps) - 1
    try:
        stamp = pd.Timestamp(at)
    except (TypeError, ValueError) as err:
        raise UserError(f"--at {at!r} is not a date or time") from err
    if stamp.tz is None and timestamps.tz is not None:
        stamp = stamp.tz_localize(timestamps.tz)
    position = int(timestamps.searchsorted(stamp, side="right")) - 1
    if position < 0:
        raise UserError(f"--at {at}: before the period's first bar ({timestamps[0]})")
    return position


def _book(book: Any, tickers: list[str], initial_cash: float) -> tuple[float, pd.Series]:
    """(cash, shares per ticker in the panel's order) of a `Book`, mapping, JSON file or None."""
    from trader.backtesting.config import Book

    if book is None:
        return float(initial_cash), pd.Series(0.0, index=list(tickers))
    if isinstance(book, Book):
        if len(book.holdings) != len(tickers):
            raise UserError(f"the book holds {len(book.holdings)} tickers; the run trades {len(tickers)}")
        return float(book.cash), pd.Series(book.holdings, index=list(tickers), dtype=float)
    if isinstance(book, (str, os.PathLike)):
        path = Path(book)
        try:
            book = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise UserError(f"--book {path}: cannot read a JSON book ({err})") from err
    if not isinstance(book, dict) or "cash" not in book:
        raise UserError('--book: expected {"cash": number, "holdings": {ticker: shares}}')
    holdings = book.get("holdings") or {}
    unknown = sorted(set(holdings) - set(tickers))
    if unknown:
        raise UserError(f"--book holds tickers the run does not trade: {unknown[:5]}")
    try:
        cash = float(book["cash"])
        held = pd.Series({t: float(holdings.get(t, 0.0)) for t in tickers})
    except (TypeError, ValueError) as err:
        raise UserError(f"--book: cash and shares must be numbers ({err})") from err
    if not math.isfinite(cash) or not all(map(math.isfinite, held)):
        raise UserError("--book: cash and shares must be finite numbers")
    return cash, held
