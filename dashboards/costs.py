"""The costs section's tables and figures: report.json's ``costs`` and ``breakeven`` drawn as they are.

Like `dashboards.figures`, plain functions with no Streamlit and no file reading. The
numbers are the backtest's own (`trader.backtesting.assembly.cost_breakdown` and
`trader.backtesting.assembly.breakeven`, written into report.json); nothing here
recomputes them:

- `cost_frame`: per strategy, each part of its costs in bp of the value traded, the
  total, the unfilled share of its orders and the totals in the data's currency;
- `cost_figure`: the parts as stacked bars (bp of the value traded);
- `breakeven_frame` / `breakeven_figure`: the Sharpe ratio at each multiple of the cost
  model, a line per strategy, with 0 and each strategy's breakeven multiple marked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd
import plotly.graph_objects as go

from dashboards.figures import MARGIN, heading

LAYOUT = {"margin": MARGIN, "legend": {"orientation": "h", "y": -0.2}}

PARTS = {"commission": "commission", "spread": "spread", "impact": "impact", "borrow": "borrow"}
"""The parts of a strategy's costs (`trader.backtesting.assembly.COST_PARTS`) and their legend names;
report.json holds ``<part>_bps`` for each."""

COLUMNS = {
    **{f"{part}_bps": f"{label} (bp)" for part, label in PARTS.items()},
    "costs_bps": "total (bp)",
    "unfilled_share": "unfilled share",
    "costs": "costs",
    "traded_value": "value traded",
    "unfilled_value": "value unfilled",
}
"""report.json's ``costs`` keys the table shows, with their column names."""

FORMATS = {
    **{f"{label} (bp)": "%.2f" for label in PARTS.values()},
    "total (bp)": "%.2f",
    "unfilled share": "percent",
    "costs": "accounting",
    "value traded": "accounting",
    "value unfilled": "accounting",
    "breakeven multiple": "%.2f",
}
"""Display format per readable column (as ``st.column_config.NumberColumn`` takes it): bp and
multiples to two decimals, shares as percentages, amounts of the data's currency with thousands
separators and cents (1,234.00)."""


def _number(value: object) -> float:
    """A JSON number, or NaN for None (no trades, no orders, no Sharpe ratio)."""
    return math.nan if value is None else float(value)  # type: ignore[arg-type]


def cost_frame(costs: Mapping[str, Mapping[str, object]]) -> pd.DataFrame:
    """One row per strategy (in `costs`' order) of report.json's ``costs``: the `COLUMNS` keys.

    NaN where report.json holds null (bp without trades, the unfilled share without orders).
    """
    rows = {name: {key: _number(entry.get(key)) for key in COLUMNS} for name, entry in costs.items()}
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=list(COLUMNS)).astype("float64")
    frame.index.name = "strategy"
    return frame


def display_costs(frame: pd.DataFrame) -> pd.DataFrame:
    """`cost_frame` with readable column names (values unchanged; `cost_formats` says how each reads)."""
    return frame.rename(columns=COLUMNS)


def cost_formats(frame: pd.DataFrame) -> dict[str, str]:
    """`FORMATS` of the readable columns in `frame` (`display_costs`, with `breakeven_frame`'s joined or not)."""
    return {label: FORMATS[label] for label in frame.columns if label in FORMATS}


def cost_figure(frame: pd.DataFrame) -> go.Figure:
    """Each strategy's costs as stacked bars, one segment per part, in bp of the value traded."""
    figure = go.Figure(
        [
            go.Bar(
                x=[str(name) for name in frame.index],
                y=frame[f"{part}_bps"],
                name=label,
                hovertemplate="%{x}: %{y:.2f} bp<extra>" + label + "</extra>",
            )
            for part, label in PARTS.items()
        ]
    )
    figure.update_layout(
        title=heading("Costs by part (bp of the value traded)"), barmode="relative", yaxis_title="bp", **LAYOUT
    )
    return figure


def breakeven_frame(breakeven: Mapping[str, Mapping[str, object]]) -> pd.DataFrame:
    """One row per strategy: its breakeven multiple (NaN where none), status and text, as report.json holds them."""
    rows = {
        name: {
            "breakeven multiple": _number(entry.get("multiple")),
            "status": str(entry.get("status", "")),
            "breakeven cost": str(entry.get("text", "")),
        }
        for name, entry in breakeven.items()
    }
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=["breakeven multiple", "status", "breakeven cost"])
    frame.index.name = "strategy"
    return frame


def breakeven_figure(breakeven: Mapping[str, Mapping[str, object]]) -> go.Figure:
    """Sharpe ratio against the multiple of the cost model, one line per strategy.

    A dotted line at Sharpe 0; each strategy whose line crosses it gets a marker at its
    breakeven multiple, named with report.json's ``text``. Legend names carry the text
    too, so a strategy that never crosses ("above 8x") says so.
    """
    figure = go.Figure()
    for name, entry in breakeven.items():
        multiples = [float(k) for k in entry.get("multiples") or []]  # type: ignore[union-attr]
        sharpe = [_number(s) for s in entry.get("sharpe") or []]  # type: ignore[union-attr]
        text = str(entry.get("text", ""))
        line = go.Scatter(
            x=multiples,
            y=sharpe,
            name=f"{name}: {text}",
            mode="lines+markers",
            legendgroup=str(name),
            hovertemplate="%{x:g}x the costs: Sharpe %{y:.2f}<extra>" + str(name) + "</extra>",
        )
        figure.add_trace(line)
        crossing = entry.get("multiple")
        if crossing is not None:
            figure.add_trace(
                go.Scatter(
                    x=[float(crossing)],
                    y=[0.0],
                    name=f"{name} breakeven",
                    mode="markers+text",
                    legendgroup=str(name),
                    text=[text],
                    textposition="top center",
                    showlegend=False,
                    marker={"symbol": "x", "size": 12, "color": "black"},
                    hovertemplate=f"{name}: breakeven at {text}<extra></extra>",
                )
            )
    figure.add_hline(y=0.0, line_dash="dot", line_color="grey")
    figure.update_layout(
        title=heading("Sharpe ratio against the cost multiple"),
        xaxis_title="multiple of the cost model",
        yaxis_title="Sharpe (annualised)",
        hovermode="closest",
        **LAYOUT,
    )
    return figure
