"""`trader paper RUN_DIR`: trade a run's selected strategy on a broker's paper account, or replay it.

A thin layer over `podracer.paper.paper`: the options become a `PaperConfig` (bad values:
one line, exit 2, before anything is written), SIGINT and SIGTERM end the loop after the
bar in hand. Each journaled bar prints one line on a broker (a bar a minute); a replay, which
journals the whole period at once, prints every `REPLAY_EVERY`-th (``--quiet``: none, only the
last line). A reconciliation mismatch or a risk
limit that flattened the book ends it with one line and exit code 1.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from podracer.cli.options import DatasetOption, DeviceOption
from podracer.cli.root import app
from trader.names import counted

REPLAY_EVERY = 50
"""A replay prints the line of its first bar and of every 50th: it journals a test period in seconds."""


@app.command("paper")
def paper_command(
    run_dir: Annotated[
        Path,
        typer.Argument(help="Run directory (a training run or a tournament); the journal goes into RUN_DIR/paper/."),
    ],
    broker: Annotated[
        str,
        typer.Option(
            "--broker",
            help="alpaca (a paper account through alpaca-py; keys from APCA_API_KEY_ID and APCA_API_SECRET_KEY) or replay (the run's own data, replayed faster than real time, filled as the backtest fills).",
        ),
    ] = "replay",
    broker_url: Annotated[
        str | None,
        typer.Option(
            "--broker-url",
            help="alpaca: the trading API's base URL (default Alpaca's paper endpoint; the live endpoint is refused).",
        ),
    ] = None,
    data_url: Annotated[
        str | None, typer.Option("--data-url", help="alpaca: the market data API's base URL (default alpaca-py's).")
    ] = None,
    feed: Annotated[
        str | None,
        typer.Option("--feed", help="alpaca: data feed, iex (real time on a free account; the default) or sip."),
    ] = None,
    period: Annotated[
        str | None,
        typer.Option("--period", help="replay: the period replayed (test, validation, START:END); default test."),
    ] = None,
    max_bars: Annotated[int | None, typer.Option("--max-bars", help="Stop after N bars journaled by this run.")] = None,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet", help=f"No line per bar (default: one per bar on a broker, every {REPLAY_EVERY}th in a replay)."
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="alpaca: the same loop, but no order is sent; the orders are filled by the backtest's rules on a simulated book.",
        ),
    ] = False,
    max_order_value: Annotated[
        float | None, typer.Option("--max-order-value", help="Largest value of one order (a larger one is cut to it).")
    ] = None,
    max_gross_exposure: Annotated[
        float | None,
        typer.Option(
            "--max-gross-exposure",
            help="Largest gross exposure after a bar's orders, as a multiple of the book's value.",
        ),
    ] = None,
    daily_loss_limit: Annotated[
        float | None,
        typer.Option(
            "--daily-loss-limit",
            help="Largest loss in a session, a fraction of the previous close's value; reaching it flattens the book and stops.",
        ),
    ] = None,
    max_drawdown: Annotated[
        float | None,
        typer.Option(
            "--max-drawdown",
            help="Kill switch: largest fall from the highest value, a fraction; reaching it flattens the book and stops.",
        ),
    ] = None,
    flatten_before_close: Annotated[
        bool,
        typer.Option("--flatten-before-close", help="Intraday bars: close every position at each session's last bar."),
    ] = False,
    fill_timeout: Annotated[
        float | None,
        typer.Option(
            "--fill-timeout",
            help="alpaca: seconds (the broker's clock) to wait for fills before cancelling the rest; default 60.",
        ),
    ] = None,
    send_window: Annotated[
        float | None,
        typer.Option(
            "--send-window", help="alpaca: seconds after the open a bar's orders may still go out; default 30."
        ),
    ] = None,
    poll: Annotated[
        float | None,
        typer.Option("--poll", help="alpaca: seconds between two looks at the broker's clock or orders; default 1."),
    ] = None,
    backoff: Annotated[
        float | None,
        typer.Option(
            "--backoff",
            help="alpaca: seconds of the first wait after a 429 or 5xx (doubled, at most 5 retries); default 1.",
        ),
    ] = None,
    cash_tolerance: Annotated[
        float,
        typer.Option(
            "--cash-tolerance",
            help="Largest difference of cash between the journal and the broker before the loop stops.",
        ),
    ] = 0.01,
    dataset: DatasetOption = None,
    device: DeviceOption = None,
) -> None:
    """Forward-test the run's selected strategy: decide every bar, trade at the next open, journal, reconcile."""
    from podracer.paper.config import PaperConfig, RiskLimits
    from trader.errors import UserError

    if period is not None and broker != "replay":
        raise UserError("--period does not apply to --broker alpaca (it trades from now on)")
    alpaca_only = {
        "--feed": feed,
        "--fill-timeout": fill_timeout,
        "--send-window": send_window,
        "--poll": poll,
        "--backoff": backoff,
    }
    given = [flag for flag, value in alpaca_only.items() if value is not None]
    if broker == "replay" and given:
        raise UserError(
            f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to --broker replay "
            "(its simulated broker fills at once, on its own clock)"
        )
    limits = RiskLimits(max_order_value, max_gross_exposure, daily_loss_limit, max_drawdown)
    defaults = PaperConfig()
    config = PaperConfig(
        broker=broker,
        broker_url=broker_url,
        data_url=data_url,
        feed=feed or defaults.feed,
        period=period or defaults.period,
        max_bars=max_bars,
        dry_run=dry_run,
        limits=limits,
        flatten_before_close=flatten_before_close,
        fill_timeout_s=defaults.fill_timeout_s if fill_timeout is None else fill_timeout,
        send_window_s=defaults.send_window_s if send_window is None else send_window,
        poll_s=defaults.poll_s if poll is None else poll,
        backoff_s=defaults.backoff_s if backoff is None else backoff,
        cash_tolerance=cash_tolerance,
        device=device or defaults.device,
    )
    from podracer.paper import paper
    from podracer.paper.loop import PaperStop

    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda number, frame: stop.set())
    try:
        shown = bar_lines(0 if quiet else REPLAY_EVERY if broker == "replay" else 1)
        result = paper(run_dir, config, dataset=dataset, stop=stop, progress=shown)
    except PaperStop as err:
        print(f"stopped: {err}", file=sys.stderr)
        raise typer.Exit(1) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"{counted(result.bars, 'bar')} journaled in {Path(run_dir) / 'paper'}; {result.reason}")


def bar_lines(every: int) -> Callable[[str], None]:
    """The paper loop's progress: its first line and every ``every``-th printed (0: none)."""
    count = 0

    def show(line: str) -> None:
        nonlocal count
        count += 1
        if every and (count == 1 or count % every == 0):
            print(line, flush=True)

    return show
