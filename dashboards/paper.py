"""The paper trading view's figures and tables: a journal's records in, a Plotly figure or a
DataFrame out.

Plain functions with no Streamlit and no file reading (the page arranges them), drawing
what `podracer.paper` journaled (docs/contracts.md, "Paper trading journal"), never a
number recomputed another way:

- `equity_frame` and `equity_figure`: the book's value at each fill bar's close, the
  backtest's expectation (the value compounded with each bar's expected return: the
  backtest's fill of the same decision from the same book, ``expected.value`` over
  ``before.value``) and the benchmark (its close, scaled to the starting value);
- `orders_frame`: every order with its fill, the backtest's price and the slippage;
- `slippage_figure`: the distribution of the fills' slippage in basis points;
- `risk_frame` and `risk_figure`: each limit, how close the book came to it, and the
  day's loss and the drawdown bar by bar against their limits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboards.figures import MARGIN, heading

LAYOUT = {"margin": MARGIN, "legend": {"orientation": "h", "y": -0.15}}

LIMITS = (
    ("max_order_value", "largest_order_value", "largest order value"),
    ("max_gross_exposure", "gross_exposure", "gross exposure (x value)"),
    ("daily_loss_limit", "day_loss", "day's loss"),
    ("max_drawdown", "drawdown", "drawdown"),
)
"""(limit key in the session's config, the record's ``risk`` key, label)."""


def _wall_clock(text: str) -> pd.Timestamp:
    stamp = pd.Timestamp(text)
    return stamp.tz_localize(None) if stamp.tz is not None else stamp


def equity_frame(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per bar (the decision bar's close first, then each fill bar's close, in the
    exchange's wall-clock time): ``paper`` (the book's value), ``backtest`` (the expectation,
    compounded) and ``benchmark`` (when the journal has one), all starting at the book's value."""
    if not records:
        return pd.DataFrame(columns=["paper", "backtest"])
    start = float(records[0]["before"]["value"])
    index = [_wall_clock(records[0]["bar"])] + [_wall_clock(r["fills_at"]) for r in records]
    paper = [start] + [float(r["after"]["value"]) for r in records]
    growth = np.cumprod([float(r["expected"]["value"]) / float(r["before"]["value"]) for r in records])
    frame = pd.DataFrame(
        {"paper": paper, "backtest": [start, *(start * growth)]}, index=pd.DatetimeIndex(index, name="time")
    )
    benchmark = [r.get("benchmark") for r in records]
    if all(b is not None for b in benchmark):
        first = float(benchmark[0])
        frame["benchmark"] = [start] + [start * float(b) / first for b in benchmark]
        frame.loc[frame.index[0], "benchmark"] = np.nan  # its close at the first decision bar is not journaled
    return frame


def equity_figure(frame: pd.DataFrame) -> go.Figure:
    """The columns of `equity_frame` as lines."""
    figure = go.Figure([go.Scatter(x=frame.index, y=frame[c], name=c, mode="lines") for c in frame.columns])
    figure.update_layout(
        title=heading("Equity: paper account, the backtest's expectation, the benchmark"),
        yaxis_title="value",
        hovermode="x unified",
        **LAYOUT,
    )
    return figure


def orders_frame(records: Sequence[Mapping[str, Any]], tickers: Sequence[str]) -> pd.DataFrame:
    """One row per order: when, what, how much filled at what price, the backtest's price
    (the fill bar's open) and the slippage in basis points (positive: worse than it)."""
    index = {t: i for i, t in enumerate(tickers)}
    rows = []
    for record in records:
        for order in record["orders"]:
            rows.append(
                {
                    "bar": record["bar"],
                    "fills at": record["fills_at"],
                    "kind": record["kind"],
                    "ticker": order["ticker"],
                    "side": order["side"],
                    "qty": order["qty"],
                    "filled": order["filled_qty"],
                    "status": order["status"],
                    "price sent at": order["price"],
                    "fill price": order["filled_avg_price"],
                    "backtest price": record["expected"]["open"][index[order["ticker"]]],
                    "slippage (bp)": record["slippage_bp"].get(order["client_order_id"]),
                    "fees": order.get("fees"),
                    "client order id": order["client_order_id"],
                    "message": order.get("message"),
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "bar",
            "fills at",
            "kind",
            "ticker",
            "side",
            "qty",
            "filled",
            "status",
            "price sent at",
            "fill price",
            "backtest price",
            "slippage (bp)",
            "fees",
            "client order id",
            "message",
        ],
    )


def slippage_figure(orders: pd.DataFrame) -> go.Figure:
    """A histogram of the fills' slippage against the backtest's price, in basis points."""
    values = orders["slippage (bp)"].dropna().astype(float)
    figure = go.Figure([go.Histogram(x=values, nbinsx=40, name="fills")])
    median = float(values.median()) if len(values) else float("nan")
    title = f"Slippage against the backtest's price: {len(values)} fills, median {median:.2f} bp"
    figure.update_layout(title=heading(title), xaxis_title="bp (positive: worse)", yaxis_title="fills", **LAYOUT)
    return figure


def risk_frame(records: Sequence[Mapping[str, Any]], limits: Mapping[str, Any]) -> pd.DataFrame:
    """One row per limit: its setting (None: off), the worst the book came to, and that as a
    share of the limit."""
    rows = []
    for key, measure, label in LIMITS:
        values = [r["risk"].get(measure) for r in records if r["risk"].get(measure) is not None]
        worst = max(values) if values else None
        limit = limits.get(key)
        share = worst / limit if worst is not None and limit else None
        rows.append({"limit": label, "setting": limit, "worst reached": worst, "share of the limit": share})
    return pd.DataFrame(rows).set_index("limit")


def risk_figure(records: Sequence[Mapping[str, Any]], limits: Mapping[str, Any]) -> go.Figure:
    """The day's loss and the drawdown at each fill bar's close, with their limits dashed."""
    index = [_wall_clock(r["fills_at"]) for r in records]
    figure = go.Figure()
    for key, measure, label in LIMITS[2:]:
        figure.add_trace(go.Scatter(x=index, y=[r["risk"][measure] for r in records], name=label, mode="lines"))
        if limits.get(key):
            figure.add_hline(y=limits[key], line_dash="dash", annotation_text=f"{label} limit")
    figure.update_layout(
        title=heading("How close the book came to the loss limits"),
        yaxis_title="fraction of value",
        yaxis_tickformat=".2%",
        **LAYOUT,
    )
    return figure


def summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Bars, orders, fills, the last values and the tracking difference (paper against the
    backtest's expectation, compounded), and why the loop stopped (when it did)."""
    frame = equity_frame(records)
    orders = [o for r in records for o in r["orders"]]
    return {
        "bars": len(records),
        "orders": len(orders),
        "filled": sum(1 for o in orders if o["filled_qty"] > 0),
        "value": float(frame["paper"].iloc[-1]) if len(frame) else None,
        "expected": float(frame["backtest"].iloc[-1]) if len(frame) else None,
        "tracking": float(frame["paper"].iloc[-1] / frame["backtest"].iloc[-1] - 1.0) if len(frame) else None,
        "stop": next((r["stop"] for r in reversed(records) if r.get("stop")), None),
    }


__all__ = ["equity_figure", "equity_frame", "orders_frame", "risk_figure", "risk_frame", "slippage_figure", "summary"]
