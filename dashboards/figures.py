"""The dashboard's figures and tables: run data in, a Plotly figure or a DataFrame out.

Plain functions with no Streamlit in them, so each is unit-tested on its own and the
pages only arrange them. Minute series are reduced to one point per exchange session
(`daily_frame`) before anything is drawn, so a year of 100 strategies draws quickly.

Every figure of performance comes from `trader.metrics` (the one place the numbers
are defined): daily returns by `trader.metrics.daily_returns`, the metrics table by
`trader.metrics.summary` or read as report.json holds it, and the rolling Sharpe
window by window with `trader.metrics.sharpe_ratio`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from trader import metrics

TRADING_DAYS = metrics.TRADING_DAYS_PER_YEAR

METRIC_COLUMNS = metrics.METRIC_LABELS
"""`trader.metrics.summary` columns, in the order and with the labels every table shows."""

ALGO_COLORS = {"ppo": "#1f77b4", "sac": "#ff7f0e", "td3": "#2ca02c"}
"""One colour per algorithm on every tournament chart."""

TOOLBAR_PX = 32
"""The band at a chart's top that Plotly's toolbar (its mode bar, top right, about 26 px) and
Streamlit's own element toolbar are drawn over; no title may sit in it."""

TITLE = {
    "x": 0.0,
    "xref": "paper",
    "xanchor": "left",
    "y": 1.0,
    "yref": "paper",
    "yanchor": "bottom",
    "pad": {"b": 12},
    "font": {"size": 16},
}
"""Where every chart's title sits (`heading`): at the left, on the plot's top edge, so that the
top margin above it (`MARGIN`) is left to the toolbar."""

MARGIN = {"l": 10, "r": 10, "t": TOOLBAR_PX + TITLE["font"]["size"] + TITLE["pad"]["b"] + 16, "b": 10}
"""Every chart's margins: the top one holds the toolbar's band and, below it, the title."""

LAYOUT = {"margin": MARGIN, "legend": {"orientation": "h", "y": -0.15}, "hovermode": "x unified"}


def heading(text: str) -> dict[str, object]:
    """A chart's title, clear of the toolbar (`TITLE`): pass it as ``update_layout(title=...)``."""
    return {**TITLE, "text": text}


# --------------------------------------------------------------------- bar series -> daily


def session_dates(index: pd.DatetimeIndex) -> pd.DatetimeIndex:
    """The exchange date of each bar (the timestamps' own time zone), as naive midnight."""
    local = index.tz_localize(None) if index.tz is not None else index
    return pd.DatetimeIndex(local).normalize()


def daily_frame(series: pd.DataFrame) -> pd.DataFrame:
    """One strategy's bar series reduced to one row per session.

    Columns: ``value`` and ``cash`` at the session's last bar, ``return`` compounded
    over the session (`trader.metrics.daily_returns`), ``traded_value`` and
    ``costs`` summed, ``turnover`` = traded value over the closing value (as
    `trader.metrics.summary` defines daily turnover), ``exposure`` = 1 - cash / value
    (the invested share of the portfolio, net of shorts) and, where the series records
    ``gross_value`` (sum of |shares| x close), ``gross_exposure`` = gross value / value
    (longs and shorts alike), both at the session's last bar.
    """
    dates = session_dates(pd.DatetimeIndex(series.index))
    grouped = series.groupby(dates)
    daily = pd.DataFrame(
        {
            "value": grouped["value"].last(),
            "cash": grouped["cash"].last(),
            "traded_value": grouped["traded_value"].sum(),
            "costs": grouped["costs"].sum(),
        }
    )
    daily["return"] = metrics.daily_returns(series["return"].to_numpy(), series.index).to_numpy()
    daily["turnover"] = metrics.turnover(daily["traded_value"].to_numpy(), daily["value"].to_numpy())
    with np.errstate(divide="ignore", invalid="ignore"):
        daily["exposure"] = np.where(daily["value"] != 0, 1.0 - daily["cash"] / daily["value"], np.nan)
        if "gross_value" in series.columns:
            gross = grouped["gross_value"].last()
            daily["gross_exposure"] = np.where(daily["value"] != 0, gross / daily["value"], np.nan)
    daily.index.name = "date"
    return daily


def in_range(series: pd.DataFrame, start: object = None, end: object = None) -> pd.DataFrame:
    """Bars whose session date lies in [start, end] (dates, both included; None: open)."""
    dates = session_dates(pd.DatetimeIndex(series.index))
    keep = np.ones(len(series), dtype=bool)
    if start is not None:
        keep &= dates >= pd.Timestamp(start)
    if end is not None:
        keep &= dates <= pd.Timestamp(end)
    return series[keep]


def wide(daily: Mapping[str, pd.DataFrame], column: str) -> pd.DataFrame:
    """One column of several strategies' daily frames side by side (date x strategy)."""
    return pd.DataFrame({name: frame[column] for name, frame in daily.items()})


# --------------------------------------------------------------------- metrics table


def metrics_table(series: Mapping[str, pd.DataFrame], risk_free: float = 0.0) -> pd.DataFrame:
    """`trader.metrics.summary` of bar series (strategy -> frame), as the backtest computes it.

    The backtest engine calls `summary` with the bars' returns, timestamps, traded
    value and portfolio value; so does this, so over a report's whole period the
    figures equal report.json's, and over a sub-range they are the same figures of
    that range.
    """
    if not series:
        return pd.DataFrame(columns=list(METRIC_COLUMNS))
    index = next(iter(series.values())).index
    returns = pd.DataFrame({name: frame["return"].to_numpy() for name, frame in series.items()})
    traded = pd.DataFrame({name: frame["traded_value"].to_numpy() for name, frame in series.items()})
    values = pd.DataFrame({name: frame["value"].to_numpy() for name, frame in series.items()})
    table = metrics.summary(returns, timestamps=index, risk_free=risk_free, traded_value=traded, portfolio_value=values)
    return table.sort_values("sharpe_ratio", ascending=False, na_position="last", kind="stable")


def period_dates(report: Mapping[str, object]) -> tuple[pd.Timestamp, pd.Timestamp]:
    """First and last session date of a report's period (naive dates)."""
    period = report["period"]
    first, last = (pd.Timestamp(period[key]) for key in ("start", "end"))
    return (first.tz_localize(None) if first.tz else first).normalize(), (
        last.tz_localize(None) if last.tz else last
    ).normalize()


def report_metrics(report: Mapping[str, object]) -> pd.DataFrame:
    """report.json's metrics table as a DataFrame, in the report's order (best first)."""
    table = pd.DataFrame.from_dict(report["metrics"], orient="index")
    table = table.loc[[name for name in report["order"] if name in table.index]].astype("float64")
    table.index.name = "strategy"
    return table


def range_metrics(
    report: Mapping[str, object], series: Mapping[str, pd.DataFrame], start: object = None, end: object = None
) -> pd.DataFrame:
    """The metrics of `series`' strategies between the dates `start` and `end`.

    Over the report's whole period: report.json's own rows. Over a shorter range: the
    same `trader.metrics.summary` on the bars of that range (`metrics_table`), with the
    report's risk-free rate.
    """
    first, last = period_dates(report)
    whole = (start is None or pd.Timestamp(start) <= first) and (end is None or pd.Timestamp(end) >= last)
    if whole:
        table = report_metrics(report)
        return table.loc[[name for name in table.index if name in series]]
    risk_free = float((report.get("config") or {}).get("risk_free", 0.0))
    return metrics_table({name: in_range(frame, start, end) for name, frame in series.items()}, risk_free)


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The metrics table with readable column names, in `METRIC_COLUMNS` order (values unchanged)."""
    columns = [c for c in METRIC_COLUMNS if c in table.columns]
    return table[columns].rename(columns=METRIC_COLUMNS)


def column_formats() -> dict[str, str]:
    """Display format per readable column of `display_table` (printf style, as st.column_config takes)."""
    return {
        label: ("percent" if key in metrics.PERCENT_METRICS else "%.0f" if key == "days" else "%.2f")
        for key, label in METRIC_COLUMNS.items()
    }


MARKET_COLUMNS = {
    "beta": "Beta",
    "alpha": "Alpha (a year)",
    "alpha_low": "Alpha, 95% low",
    "alpha_high": "Alpha, 95% high",
    "tracking_error": "Tracking error",
    "information_ratio": "Information ratio",
    "correlation": "Correlation",
}
"""report.json's ``versus_benchmark`` figures, by readable column name (`market_table`)."""


def market_table(report: Mapping[str, object], names: list[str] | None = None) -> pd.DataFrame:
    """Each strategy against the benchmark (report.json's ``versus_benchmark``), in the report's
    order, with readable columns (`MARKET_COLUMNS`); NaN where a figure is missing. Empty for a
    report without a benchmark or written before these figures."""
    versus = report.get("versus_benchmark") or {}
    rows = {}
    for name in report["order"]:
        row = versus.get(name)
        if row is None or (names is not None and name not in names):
            continue
        low, high = row.get("alpha_interval") or (None, None)
        values = {**row, "alpha_low": low, "alpha_high": high}
        rows[name] = {label: values.get(key) for key, label in MARKET_COLUMNS.items()}
    table = pd.DataFrame.from_dict(rows, orient="index", columns=list(MARKET_COLUMNS.values())).astype("float64")
    table.index.name = "strategy"
    return table


def market_formats() -> dict[str, str]:
    """Display format per column of `market_table` (percentages for the alpha and tracking error)."""
    return {
        label: "percent" if key.startswith("alpha") or key == "tracking_error" else "%.2f"
        for key, label in MARKET_COLUMNS.items()
    }


def yardstick_sentences(report: Mapping[str, object]) -> list[str]:
    """Each agent's verdict against the yardstick of its kind (report.json's ``versus_yardsticks``)."""
    labels = {s["name"]: s["label"] for s in report.get("strategies", [])}
    return [
        f"{labels.get(name, name)}: {row['sentence']}" for name, row in (report.get("versus_yardsticks") or {}).items()
    ]


# --------------------------------------------------------------------- strategy figures


def _styled(figure: go.Figure, title: str, y_title: str, percent: bool = False) -> go.Figure:
    figure.update_layout(title=heading(title), yaxis_title=y_title, xaxis_title=None, **LAYOUT)
    if percent:
        figure.update_yaxes(tickformat=".1%")
    return figure


def equity_figure(values: pd.DataFrame, log_scale: bool = False) -> go.Figure:
    """Equity curves rebased to 1 at the first session (date x strategy closing values)."""
    rebased = values / values.ffill().bfill().iloc[0]
    figure = go.Figure([go.Scatter(x=rebased.index, y=rebased[c], name=str(c), mode="lines") for c in rebased.columns])
    if log_scale:
        figure.update_yaxes(type="log")
    return _styled(figure, "Equity (rebased to 1)", "growth of 1")


def drawdowns(values: pd.DataFrame) -> pd.DataFrame:
    """Drawdown below the running peak at each session: value / peak - 1 (<= 0)."""
    return values / values.cummax() - 1.0


def drawdown_figure(values: pd.DataFrame) -> go.Figure:
    """Underwater chart: the drawdown of each strategy below its running peak."""
    under = drawdowns(values)
    figure = go.Figure(
        [go.Scatter(x=under.index, y=under[c], name=str(c), mode="lines", fill="tozeroy") for c in under.columns]
    )
    return _styled(figure, "Drawdown", "below peak", percent=True)


def rolling_sharpe(returns: pd.DataFrame, window: int) -> pd.DataFrame:
    """Annualised Sharpe ratio over the trailing `window` sessions (`trader.metrics.sharpe_ratio`).

    NaN for the first ``window - 1`` sessions.
    """
    out = pd.DataFrame(np.nan, index=returns.index, columns=returns.columns)
    values = returns.to_numpy(dtype=np.float64)
    for end in range(window, len(returns) + 1):
        out.iloc[end - 1] = metrics.sharpe_ratio(values[end - window : end])
    return out


def rolling_sharpe_figure(returns: pd.DataFrame, window: int) -> go.Figure:
    """Rolling Sharpe ratio of each strategy (daily returns, `window` sessions)."""
    rolled = rolling_sharpe(returns, window)
    figure = go.Figure([go.Scatter(x=rolled.index, y=rolled[c], name=str(c), mode="lines") for c in rolled.columns])
    return _styled(figure, f"Rolling Sharpe ratio ({window} sessions)", "Sharpe (annualised)")


def monthly_returns(returns: pd.Series) -> pd.DataFrame:
    """Compounded return of each calendar month: year (rows) x month 1-12 (columns)."""
    index = pd.DatetimeIndex(returns.index)
    grouped = (1.0 + returns).groupby([index.year, index.month]).prod() - 1.0
    table = grouped.unstack()
    table.index.name, table.columns.name = "year", "month"
    return table.reindex(columns=range(1, 13))


MONTHLY_FORMAT = ".1%"
"""The monthly heatmap's one number format (d3's, as Plotly takes it): its cells, colour bar and hover."""


def monthly_heatmap(returns: pd.Series, name: str) -> go.Figure:
    """Heatmap of one strategy's monthly returns (green up, red down, 0 white): cells, colour bar and
    hover in the one unit, percent (`MONTHLY_FORMAT`)."""
    table = monthly_returns(returns)
    text = table.map(lambda v: "" if pd.isna(v) else format(v, MONTHLY_FORMAT))
    months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    bound = float(np.nanmax(np.abs(table.to_numpy()))) if table.notna().any().any() else 1.0
    figure = go.Figure(
        go.Heatmap(
            z=table.to_numpy(),
            x=months,
            y=[str(y) for y in table.index],
            text=text.to_numpy(),
            texttemplate="%{text}",
            colorscale="RdYlGn",
            zmid=0.0,
            zmin=-bound,
            zmax=bound,
            colorbar={"tickformat": MONTHLY_FORMAT, "title": {"text": "return"}},
            hovertemplate="%{y} %{x}: %{z:" + MONTHLY_FORMAT + "}<extra></extra>",
        )
    )
    figure.update_layout(
        title=heading(f"Monthly returns: {name}"), **{k: v for k, v in LAYOUT.items() if k != "hovermode"}
    )
    figure.update_yaxes(type="category", autorange="reversed")
    return figure


def return_distribution_figure(returns: pd.DataFrame) -> go.Figure:
    """Overlaid histograms of the strategies' daily returns."""
    figure = go.Figure([go.Histogram(x=returns[c], name=str(c), opacity=0.6, nbinsx=50) for c in returns.columns])
    figure.update_layout(barmode="overlay")
    figure.update_xaxes(tickformat=".1%")
    _styled(figure, "Daily return distribution", "sessions")
    figure.update_layout(hovermode="closest")
    return figure


def line_figure(frame: pd.DataFrame, title: str, y_title: str, percent: bool = False) -> go.Figure:
    """One line per column (exposure, turnover, ...)."""
    figure = go.Figure([go.Scatter(x=frame.index, y=frame[c], name=str(c), mode="lines") for c in frame.columns])
    return _styled(figure, title, y_title, percent=percent)


def exposure_figure(net: pd.DataFrame, gross: pd.DataFrame) -> go.Figure:
    """Net exposure (solid) and gross exposure (dashed, same colour) of each strategy.

    `net` and `gross` are date x strategy (`daily_frame`'s ``exposure`` and
    ``gross_exposure``); a strategy missing from `gross` (a series written before
    ``gross_value`` was recorded) draws its net line only.
    """
    colors = px.colors.qualitative.Plotly
    traces = []
    for k, name in enumerate(net.columns):
        color = colors[k % len(colors)]
        traces.append(
            go.Scatter(
                x=net.index, y=net[name], name=f"{name}: net", mode="lines", line_color=color, legendgroup=str(name)
            )
        )
        if name in gross.columns:
            traces.append(
                go.Scatter(
                    x=gross.index,
                    y=gross[name],
                    name=f"{name}: gross",
                    mode="lines",
                    line={"color": color, "dash": "dash"},
                    legendgroup=str(name),
                )
            )
    return _styled(
        go.Figure(traces),
        "Exposure: net (longs - shorts) and gross (longs + shorts), of value",
        "share of value",
        percent=True,
    )


# --------------------------------------------------------------------- tournament


def leaderboard_table(board: Mapping[str, object]) -> pd.DataFrame:
    """The leaderboard best first: rank, pod, algorithm, score, lineage, budget, hyperparameters."""
    rows = []
    for rank, entry in enumerate(board.get("entries", []), start=1):
        rows.append(
            {
                "rank": rank,
                "pod": entry.get("pod_id"),
                "algo": entry.get("algo"),
                "score": entry.get("score"),
                "generation": entry.get("generation"),
                "parent": entry.get("parent_id") or "-",
                "steps": entry.get("steps"),
                "seconds": entry.get("seconds"),
                "worker": entry.get("worker"),
                "hyperparameters": json.dumps(entry.get("hyperparameters") or {}, sort_keys=True),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "rank",
            "pod",
            "algo",
            "score",
            "generation",
            "parent",
            "steps",
            "seconds",
            "worker",
            "hyperparameters",
        ],
    )


def best_score_curve(pods: pd.DataFrame) -> pd.DataFrame:
    """Best validation score so far, per algorithm, at each finished pod's end.

    Columns: ``algo``, ``minutes`` (since the first pod started), ``best``.
    """
    done = pods[(pods["status"] == "finished") & pods["score"].notna()].copy()
    if done.empty:
        return pd.DataFrame(columns=["algo", "minutes", "best"])
    origin = float(pods["start"].min())
    done["minutes"] = (done["end"].astype(float) - origin) / 60.0
    done = done.sort_values("minutes")
    done["best"] = done.groupby("algo")["score"].cummax()
    return done[["algo", "minutes", "best"]].reset_index(drop=True)


def best_score_figure(pods: pd.DataFrame) -> go.Figure:
    """Best validation score against wall-clock, one step line per algorithm."""
    curve = best_score_curve(pods)
    figure = go.Figure(
        [
            go.Scatter(
                x=part["minutes"],
                y=part["best"],
                name=str(algo),
                mode="lines+markers",
                line_shape="hv",
                line_color=ALGO_COLORS.get(str(algo)),
            )
            for algo, part in curve.groupby("algo")
        ]
    )
    _styled(figure, "Best validation score so far", "validation score")
    figure.update_layout(xaxis_title="minutes since start", hovermode="closest")
    return figure


def pod_timeline_figure(pods: pd.DataFrame) -> go.Figure:
    """Who ran what, when: one bar per pod on its worker's row, coloured by algorithm."""
    frame = pods.dropna(subset=["start"]).copy()
    now = float(pd.Timestamp.now(tz="UTC").timestamp())
    frame["Start"] = pd.to_datetime(frame["start"].astype(float), unit="s")
    frame["Finish"] = pd.to_datetime(frame["end"].astype(float).fillna(now), unit="s")
    frame["worker"] = frame["worker"].fillna("(pending)").astype(str)
    figure = px.timeline(
        frame,
        x_start="Start",
        x_end="Finish",
        y="worker",
        color="algo",
        color_discrete_map=ALGO_COLORS,
        hover_data={"pod_id": True, "status": True, "score": ":.2f"},
    )
    figure.update_layout(title=heading("Pods per worker"), **{k: v for k, v in LAYOUT.items() if k != "hovermode"})
    return figure


def hyperparameter_frame(pods: pd.DataFrame) -> pd.DataFrame:
    """Finished pods with one column per hyperparameter (from the JSON column) and their score."""
    done = pods[pods["score"].notna()].reset_index(drop=True)
    if "hyperparameters" not in done.columns or done.empty:
        return (
            done[["pod_id", "algo", "score"]] if not done.empty else pd.DataFrame(columns=["pod_id", "algo", "score"])
        )
    params = pd.DataFrame(
        [json.loads(text) if isinstance(text, str) and text else {} for text in done["hyperparameters"]]
    )
    return pd.concat([done[["pod_id", "algo", "score"]], params], axis=1)


def hyperparameter_names(frame: pd.DataFrame) -> list[str]:
    """The numeric hyperparameter columns of `hyperparameter_frame`: first those that vary among the
    pods (more than one value), then those with the same value for every pod, each in the frame's
    order; the page's picker starts on the first."""
    numeric = [
        c for c in frame.columns if c not in ("pod_id", "algo", "score") and pd.api.types.is_numeric_dtype(frame[c])
    ]
    return sorted(numeric, key=lambda c: frame[c].nunique(dropna=True) < 2)


def hyperparameter_figure(frame: pd.DataFrame, name: str) -> go.Figure:
    """Validation score against one hyperparameter, coloured by algorithm (log x when it spans decades)."""
    values = frame[name].dropna()
    log_x = bool(len(values) and (values > 0).all() and values.max() / values.min() > 20)
    figure = px.scatter(
        frame, x=name, y="score", color="algo", color_discrete_map=ALGO_COLORS, hover_data=["pod_id"], log_x=log_x
    )
    figure.update_layout(
        title=heading(f"Validation score against {name}"), **{k: v for k, v in LAYOUT.items() if k != "hovermode"}
    )
    return figure


SPREAD_PERIODS = {"backtest": "net Sharpe ratio", "validation": "validation score"}
"""The spread's periods (`trader.backtesting.spread`), the one drawn first, with the figure each places."""


def spread_record(report: Mapping[str, object] | None, selection: Mapping[str, object] | None) -> dict | None:
    """A tournament's result against its own pods as its files record it: report.json's ``spread``
    (validation and the backtest's period), else selection.json's (validation only: no backtest ran);
    None where neither records one (a tournament from before the spread was recorded)."""
    for source in (report, selection):
        if source is not None and source.get("spread"):
            return dict(source["spread"])
    return None


def spread_period(record: Mapping[str, object]) -> str | None:
    """The period the spread figure draws: the backtest's where the result has a standing there,
    else validation where it has one there; None where neither (no pod, one pod)."""
    for period in SPREAD_PERIODS:
        part = record.get(period)
        if part and part.get("standing"):
            return period
    return None


def spread_frame(record: Mapping[str, object], period: str) -> pd.DataFrame:
    """The pods placed in one period of the spread: ``pod_id``, ``algo``, ``figure`` (those without a
    finite figure, or not backtested, left out: the record counts them)."""
    rows = [
        {"pod_id": p["pod_id"], "algo": p["algo"], "figure": p[period]}
        for p in record["pods"]
        if p.get(period) is not None
    ]
    return pd.DataFrame(rows, columns=["pod_id", "algo", "figure"])


def spread_figure(record: Mapping[str, object], period: str) -> go.Figure:
    """The pods' figures in one period as a strip, one row per algorithm, with the result's figure
    and the pods' median marked as the record holds them (nothing is recomputed here)."""
    part = record[period]
    found = part["standing"]
    frame = spread_frame(record, period)
    figure = px.strip(frame, x="figure", y="algo", color="algo", color_discrete_map=ALGO_COLORS, hover_data=["pod_id"])
    figure.add_vline(
        x=found["value"],
        line_color="black",
        line_width=2,
        annotation_text=f"result ({record['result']}): rank {found['rank']}, at or above {found['percentile']:.0f}%",
        annotation_position="top",
    )
    figure.add_vline(x=found["median"], line_color="gray", line_dash="dot", annotation_text="pods' median")
    where = part.get("period") or "validation"
    figure.update_layout(
        title=heading(f"The result against its own pods: {SPREAD_PERIODS[period]}, {where}"),
        xaxis_title=SPREAD_PERIODS[period],
        yaxis_title=None,
        showlegend=False,
        **{k: v for k, v in LAYOUT.items() if k not in ("hovermode", "legend")},
    )
    return figure


# --------------------------------------------------------------------- training


def curve_columns(frames: Mapping[str, pd.DataFrame]) -> list[str]:
    """Numeric metrics present in any of the runs' metrics.parquet (validation first)."""
    seen: dict[str, None] = {}
    for frame in frames.values():
        for column in frame.columns:
            if column not in ("step", "wall_time") and pd.api.types.is_numeric_dtype(frame[column]):
                seen[column] = None
    return sorted(seen, key=lambda c: (not c.startswith("val_"), c))


def learning_curve_figure(frames: Mapping[str, pd.DataFrame], column: str, x: str = "step") -> go.Figure:
    """One metric of several runs against env steps (``x="step"``) or seconds (``"wall_time"``)."""
    traces = []
    for name, frame in frames.items():
        if column not in frame.columns:
            continue
        rows = frame[[x, column]].dropna()
        traces.append(
            go.Scatter(x=rows[x], y=rows[column], name=name, mode="lines+markers" if len(rows) < 50 else "lines")
        )
    figure = go.Figure(traces)
    _styled(figure, column, column)
    figure.update_layout(xaxis_title="env steps" if x == "step" else "seconds", hovermode="closest")
    return figure


VALIDATION_SCORE = "val_score"
"""The evaluator's score on each evaluation row of metrics.parquet: the one that picks
``checkpoints/best`` (the annualised Sharpe ratio on a market, the mean episodic return
on a gymnasium env)."""


NO_REASON = "not recorded (selection.json was written before the reasons were)"
"""`selection_table`'s reason for a candidate whose ``selection.json`` records none."""


def selection_table(selection: Mapping[str, object]) -> pd.DataFrame:
    """A tournament's candidates (``selection.json``): validation score, PSR, whether the
    pod cleared the membership bar, its weight in the ensemble (0: not a member) and the
    reason for that weight, as `tournament.selection` recorded it (`NO_REASON` where it did not)."""
    weights = dict(zip(selection["members"], selection["weights"]))
    rows = [
        {
            "pod": c["pod_id"],
            "validation score": c["score"],
            "PSR": c["psr"],
            "qualified": c["qualified"],
            "ensemble weight": weights.get(c["pod_id"], 0.0),
            "reason": c.get("reason") or NO_REASON,
        }
        for c in selection["candidates"]
    ]
    return pd.DataFrame(rows).set_index("pod") if rows else pd.DataFrame()


def throughput_table(frames: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Per run: env steps, seconds, median samples per second, and the best validation
    score, the score that chose the run's best checkpoint (`VALIDATION_SCORE`)."""
    rows = []
    for name, frame in frames.items():
        best = frame[VALIDATION_SCORE].max() if VALIDATION_SCORE in frame else math.nan
        rows.append(
            {
                "run": name,
                "steps": int(frame["step"].iloc[-1]) if len(frame) else 0,
                "seconds": float(frame["wall_time"].iloc[-1]) if len(frame) else math.nan,
                "samples/s (median)": float(frame["samples_per_s"].median()) if "samples_per_s" in frame else math.nan,
                "best validation score": float(best),
            }
        )
    return pd.DataFrame(rows).set_index("run") if rows else pd.DataFrame()


# --------------------------------------------------------------------- data


def periods_table(card: Mapping[str, object]) -> pd.DataFrame:
    """The data set's train / validation / test split from its card (dataset.json)."""
    periods = card.get("periods") or {}
    rows = [{"period": name, **values} for name, values in periods.items()]
    return pd.DataFrame(rows).set_index("period") if rows else pd.DataFrame()


def _wall_clock(text: str) -> pd.Timestamp:
    """A timestamp as exchange wall-clock time without its offset (periods span DST changes)."""
    stamp = pd.Timestamp(text)
    return stamp.tz_localize(None) if stamp.tz is not None else stamp


def periods_figure(card: Mapping[str, object]) -> go.Figure:
    """The split as bars on a time axis."""
    periods = card.get("periods") or {}
    frame = pd.DataFrame(
        [{"period": n, "Start": _wall_clock(v["start"]), "Finish": _wall_clock(v["end"])} for n, v in periods.items()]
    )
    figure = (
        px.timeline(frame, x_start="Start", x_end="Finish", y="period", color="period") if len(frame) else go.Figure()
    )
    figure.update_layout(title=heading("Train / validation / test"), showlegend=False, height=260, margin=MARGIN)
    return figure
