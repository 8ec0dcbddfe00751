"""Forward testing: a run's selected strategy on a broker's paper account, or a replay.

`paper(run_dir, config)` is ``trader paper RUN_DIR``. One module per role:

- `podracer.paper.config`: the settings (`PaperConfig`) and the risk limits (`RiskLimits`);
- `podracer.paper.loop`: the loop over bars (its docstring states the rules);
- `podracer.paper.feed`: bars and prices (a replayed period, or Alpaca's data API);
- `podracer.paper.alpaca`: Alpaca's paper trading API through alpaca-py;
- `podracer.paper.simulated`: the broker that fills as the backtest does (replay, dry run);
- `podracer.paper.hours`: sessions and bars on the exchange calendar;
- `podracer.paper.risk`: the order limits and the kill switch;
- `podracer.paper.journal`: ``RUN_DIR/paper/``;
- `podracer.paper.orders`: the values they exchange.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from trader.errors import UserError
from podracer.paper.config import PaperConfig, RiskLimits

__all__ = ["PaperConfig", "RiskLimits", "paper"]


def paper(
    run_dir: str | os.PathLike[str],
    config: PaperConfig | None = None,
    *,
    dataset: str | None = None,
    stop: threading.Event | None = None,
    progress: Callable[[str], None] | None = None,
) -> Any:
    """Trade ``run_dir``'s selected strategy bar by bar (see `podracer.paper.loop`).

    Everything that can be refused is checked before the run directory is touched: the
    run and its strategy, the broker's keys and account (a paper account), the universe
    the data API serves, the features the run observes, and a journal started under
    other settings. Then ``RUN_DIR/paper/`` is opened (or resumed) and the loop runs until
    ``config.max_bars``, the end of a replayed period, ``stop`` (set it from a signal
    handler), or a risk limit.

    :returns: a `podracer.paper.loop.PaperResult` (bars journaled, why it stopped).
    :raises trader.errors.UserError: bad input, one line; nothing written.
    :raises podracer.paper.loop.PaperStop: a reconciliation mismatch or a risk limit stopped it.
    """
    import numpy as np

    from podracer.paper.hours import MarketHours
    from podracer.paper.journal import Journal
    from podracer.paper.loop import PaperLoop, load_strategy
    from podracer.paper.simulated import SimulatedBroker

    config = config or PaperConfig()
    strategy = load_strategy(run_dir, dataset, config.device)
    hours = MarketHours(strategy.data.interval)
    if config.flatten_before_close and hours.minutes is None:
        raise UserError("--flatten-before-close needs intraday bars; the run trades daily bars (one bar a session)")
    journal = Journal(run_dir)
    session = {
        "strategy": strategy.name,
        "broker": config.broker,
        "dry_run": config.dry_run,
        "tickers": list(strategy.tickers),
        "benchmark": strategy.data.benchmark_name,
        "interval": strategy.data.interval,
        "dataset": strategy.dataset,
        "config": config.as_dict(),
    }
    journal.check(session)  # a restart under other settings: refused before anything is written
    resume = _resume_book(journal)
    if config.broker == "replay":
        from trader.backtesting.periods import select_period
        from podracer.paper.feed import ReplayFeed

        panel = select_period(strategy.data, config.period)[0]
        feed = ReplayFeed(panel, hours)
        cash, held = (strategy.initial_cash, np.zeros(len(strategy.tickers))) if resume is None else resume[:2]
        now = feed.start if resume is None else max(feed.start, resume[2])
        broker = SimulatedBroker(
            panel, strategy.rules, strategy.tickers, cash, held, hours, now=now, device=config.device
        )
        start_book = {"cash": cash, "positions": list(map(float, held))}
    else:
        from podracer.paper.alpaca import AlpacaBroker
        from podracer.paper.feed import AlpacaFeed

        from market_envs.data.vendors import Backoff

        backoff = Backoff(retries=5, base_s=config.backoff_s, cap_s=max(30.0, config.backoff_s))
        alpaca = AlpacaBroker(
            config.broker_url, fill_timeout_s=config.fill_timeout_s, poll_s=config.poll_s, backoff=backoff
        )
        alpaca.check_account()
        feed = AlpacaFeed(
            strategy.tickers,
            strategy.data.benchmark_name,
            strategy.data.interval,
            (strategy.data.feature_mean, strategy.data.feature_std),
            strategy.data.feature_names,
            hours,
            history_bars(strategy.rules),
            url=config.data_url,
            feed=config.feed,
            backoff=backoff,
        )
        now = alpaca.clock().now
        panel, _ = feed.panel_at(now)  # the universe and features the data API serves, checked before any write
        book = alpaca.book()
        outside = book.outside(strategy.tickers)
        if outside:
            raise UserError(
                f"the paper account holds positions the run does not trade: {outside[:10]}; close them first"
            )
        start_book = {"cash": book.cash, "positions": book.vector(strategy.tickers).tolist()}
        broker = alpaca
        if config.dry_run:
            cash, held = (book.cash, book.vector(strategy.tickers)) if resume is None else resume[:2]
            broker = SimulatedBroker(
                panel,
                strategy.rules,
                strategy.tickers,
                cash,
                held,
                hours,
                clock=alpaca.clock,
                wait=alpaca.wait_until,
                device=config.device,
            )
    _check_dims(strategy, panel, config.device)
    session["start"] = {"time": str(broker.clock().now), **start_book}
    journal.open(session)
    loop = PaperLoop(strategy, config, broker, feed, journal, hours, stop=stop, progress=progress)
    return loop.run()


def history_bars(rules: Any) -> int:
    """Bars of history the features and cost estimates of ``rules`` need before a decision."""
    from market_envs.data.indicators import WARMUP_BARS

    needed = [WARMUP_BARS, *(w + 1 for w in rules.return_windows)]
    if rules.turbulence_threshold is not None:
        needed.append(rules.turbulence_window + 1)
    costs = rules.costs
    if costs.spread_model == "high_low":
        needed.append(costs.spread_window + 1)
    return max(needed) + 10


def _resume_book(journal: Any) -> tuple[float, Any, Any] | None:
    """(cash, shares, time) a simulated broker restarts from: the journal's last book (the
    book before a bar left pending), or None for a fresh journal."""
    import numpy as np
    import pandas as pd

    if journal.existing_session() is None:
        return None
    pending = journal.pending()
    records = journal.records()
    if pending is not None and not (records and records[-1]["bar"] == pending["bar"]):
        book, when = pending["before"], pd.Timestamp(pending["bar"])
        return float(book["cash"]), np.asarray(book["positions"], dtype=np.float64), when
    if not records:
        start = journal.existing_session().get("start") or {}
        if "cash" not in start:
            return None
        return float(start["cash"]), np.asarray(start["positions"], dtype=np.float64), pd.Timestamp(start["time"])
    last = records[-1]["after"]
    return float(last["cash"]), np.asarray(last["positions"], dtype=np.float64), pd.Timestamp(records[-1]["time"])


def _check_dims(strategy: Any, panel: Any, device: str) -> None:
    """The observation the data gives must be the one the policy was trained on."""
    from market_envs.env import StockTradingVecEnv

    env = StockTradingVecEnv(panel, num_envs=1, device=device, config=strategy.rules)
    want = getattr(strategy.policy, "obs_dim", None)
    if want is not None and int(want) != env.obs_dim:
        raise UserError(
            f"the {strategy.name} strategy observes {want} numbers, the data gives {env.obs_dim} "
            f"(features {list(panel.feature_names)}); it cannot trade on this data"
        )
