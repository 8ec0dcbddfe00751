"""The walk-forward view's figures and tables: a walk-forward's files in, a Plotly figure
or a DataFrame out.

Like `dashboards.figures`, plain functions with no Streamlit and no file reading, so
each is tested on its own and the page only arranges them. They draw what
`podracer.walkforward` wrote (docs/contracts.md, "Walk-forward run directory"), never a
figure recomputed another way:

- `window_frame` and `timeline_figure`: each fold's train, validation and test
  windows (``walkforward.json``'s ``folds[*].windows``, or each finished
  ``fold.json``'s) as horizontal bars;
- `stitched_values` and `stitched_equity_figure`: each strategy's portfolio value
  over the stitched record (``stitched.parquet``), one point per session, with the
  folds' test starts marked;
- `winners_frame`: each fold's winner (algorithm, pod, hyperparameters) with its
  validation and test Sharpe ratios and the yardsticks' and baselines' test Sharpe;
- `stitched_metrics`: ``walkforward.json``'s stitched metrics table, in the
  dashboard's column order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from dashboards import figures

WINDOW_COLORS = {"train": "#1f77b4", "validation": "#ff7f0e", "test": "#2ca02c"}
"""One colour per window, in the order the windows come (`trader.folds.WINDOWS`)."""

LAYOUT = {"margin": figures.MARGIN, "legend": {"orientation": "h", "y": -0.15}}


def window_frame(folds: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per (fold, window): ``fold``, ``window``, ``start``, ``end`` (the first and
    last bar of the window, both included, as the fold's ``windows`` give them, in the
    exchange's wall-clock time without a zone, as a Plotly date axis draws them).

    :param folds: ``walkforward.json``'s ``folds`` (or the ``fold.json`` records).
    """
    rows = [
        {
            "fold": int(row["fold"]),
            "window": name,
            "start": _wall_clock(row["windows"][name][0]),
            "end": _wall_clock(row["windows"][name][1]),
        }
        for row in folds
        for name in WINDOW_COLORS
    ]
    return pd.DataFrame(rows, columns=["fold", "window", "start", "end"])


def _wall_clock(text: str) -> pd.Timestamp:
    """An ISO timestamp's wall-clock time in its own zone, without the zone."""
    stamp = pd.Timestamp(text)
    return stamp.tz_localize(None) if stamp.tz is not None else stamp


def timeline_figure(windows: pd.DataFrame) -> go.Figure:
    """The folds' windows as horizontal bars, fold 0 on top: one trace per window kind,
    each bar from the window's first bar to its last (``base`` the start, ``x`` the
    length in milliseconds, as Plotly draws a date bar)."""
    traces = []
    for name, color in WINDOW_COLORS.items():
        part = windows[windows["window"] == name]
        length = (part["end"] - part["start"]).dt.total_seconds() * 1000.0
        traces.append(
            go.Bar(
                base=part["start"],
                x=length,
                y=[f"fold {k}" for k in part["fold"]],
                orientation="h",
                name=name,
                marker_color=color,
                customdata=list(zip(part["start"].astype(str), part["end"].astype(str))),
                hovertemplate="%{y} " + name + ": %{customdata[0]} .. %{customdata[1]}<extra></extra>",
            )
        )
    figure = go.Figure(traces)
    figure.update_layout(
        title=figures.heading("Folds: train, validation and test windows"), barmode="overlay", **LAYOUT
    )
    figure.update_xaxes(type="date")
    figure.update_yaxes(autorange="reversed")
    return figure


def stitched_values(stitched: pd.DataFrame) -> pd.DataFrame:
    """Each strategy's portfolio value at each session's last bar (session x strategy),
    in the order the strategies come in ``stitched.parquet``; daily bars are kept as
    they are (`dashboards.figures.daily_frame`)."""
    order = list(dict.fromkeys(stitched["strategy"]))
    daily = {name: figures.daily_frame(stitched[stitched["strategy"] == name].set_index("timestamp")) for name in order}
    return figures.wide(daily, "value")


def fold_starts(stitched: pd.DataFrame) -> list[pd.Timestamp]:
    """The session of each fold's first test bar (where the next fold's policy takes over)."""
    first = stitched.groupby("fold", sort=True)["timestamp"].min()
    return list(figures.session_dates(pd.DatetimeIndex(first)))


def stitched_equity_figure(values: pd.DataFrame, starts: Sequence[pd.Timestamp] = ()) -> go.Figure:
    """The stitched out-of-sample record: each strategy's portfolio value (session x
    strategy, as `stitched_values` gives it), a dotted line where each fold's test begins."""
    figure = go.Figure([go.Scatter(x=values.index, y=values[c], name=str(c), mode="lines") for c in values.columns])
    for k, start in enumerate(starts):
        figure.add_vline(x=start, line_dash="dot", line_color="grey")
        figure.add_annotation(x=start, y=1.0, yref="paper", text=f"fold {k}", showarrow=False, xanchor="left")
    figure.update_layout(
        title=figures.heading("Stitched out-of-sample equity"),
        yaxis_title="portfolio value",
        xaxis_title=None,
        hovermode="x unified",
        **LAYOUT,
    )
    return figure


def winners_frame(folds: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per fold: its test window, the winner (``algo``, ``pod_id`` for a
    tournament, ``hyperparameters`` as compact JSON), its validation and test Sharpe,
    the yardsticks' test Sharpe and each baseline's (``<name> test Sharpe``), as the
    fold's record holds them (None shows as an empty cell)."""
    rows = []
    for row in folds:
        test = row["windows"]["test"]
        out = {
            "fold": int(row["fold"]),
            "test window": f"{str(test[0])[:10]} .. {str(test[1])[:10]}",
            "winner": row.get("algo"),
            "pod": row.get("pod_id"),
            "hyperparameters": json.dumps(row.get("hyperparameters") or {}, sort_keys=True, default=str),
            "validation score": row.get("validation_sharpe"),
            "test Sharpe": row.get("test_sharpe"),
        }
        for yardstick in ("benchmark", "equal_weight"):
            if f"{yardstick}_test_sharpe" in row:
                out[f"{yardstick} test Sharpe"] = row[f"{yardstick}_test_sharpe"]
        for name, baseline in (row.get("baselines") or {}).items():
            out[f"{name} test Sharpe"] = baseline.get("test_sharpe")
        if "trials" in row:
            out["trials"] = row["trials"]
        rows.append(out)
    frame = pd.DataFrame(rows).set_index("fold")
    if frame["pod"].isna().all():
        frame = frame.drop(columns="pod")  # a single learner has no pods
    return frame


def stitched_metrics(stitched: Mapping[str, Any]) -> pd.DataFrame:
    """``walkforward.json``'s ``stitched.metrics`` (strategy x `trader.metrics.summary`
    column), the values as written, with the dashboard's readable column names."""
    table = pd.DataFrame.from_dict(stitched["metrics"], orient="index").astype("float64")
    table.index.name = "strategy"
    return figures.display_table(table)


__all__ = [
    "WINDOW_COLORS",
    "stitched_equity_figure",
    "stitched_metrics",
    "stitched_values",
    "fold_starts",
    "timeline_figure",
    "winners_frame",
    "window_frame",
]
