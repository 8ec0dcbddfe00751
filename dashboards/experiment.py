"""The seed paper's experiment view: an experiment's files in, a DataFrame or a Plotly figure out.

Like `dashboards.figures`, plain functions with no Streamlit and no file reading (the page
arranges them), showing what `podracer.experiment` wrote (docs/contracts.md, "Experiment run
directory"), never a number recomputed another way:

- `settings_frame`: the experiment's settings (``experiment.toml``) and its split (the
  data set recipe it wrote, ``dataset.toml``);
- `table_frame` and `table_formats`: Table 2 (``experiment.json``'s ``table``), one row per
  strategy in the file's order, its ``source`` ("ours" or the paper's) first, then Table 2's
  columns, our evidence columns (the Sharpe ratio's interval, PSR, DSR, trials) and a Sharpe
  column per extra cost model;
- `figure7`: Figure 7 (``figure7.parquet``): each learner's snapshots' test-period return
  against training wall-clock, one line per learner.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from dashboards.figures import MARGIN, heading
from trader.rundir import EXPERIMENT_COLUMNS as COLUMNS
from trader.metrics import METRIC_LABELS, PERCENT_METRICS

LAYOUT = {"margin": MARGIN, "legend": {"orientation": "h", "y": -0.15}}

EVIDENCE = {
    "sharpe_low": "Sharpe 95% interval, low",
    "sharpe_high": "Sharpe 95% interval, high",
    "psr": "PSR",
    "dsr": "DSR",
    "trials": "Trials",
}
"""``experiment.json``'s evidence keys -> the table's labels (as `podracer.experiment.table2` names them)."""

SPLIT = (
    ("Training", "start", "train_end"),
    ("Validation (every learner selects on it)", "train_end", "val_end"),
    ("Test (Table 2 and Figure 7)", "val_end", "end"),
)
"""(label, first day's key, the next period's first day's key) in the data set recipe."""


def extra_cost_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ``sharpe_<model>`` keys of the rows (one per extra cost model), in the file's order."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            if key.startswith("sharpe_") and key not in ("sharpe_ratio", "sharpe_low", "sharpe_high"):
                seen[key] = None
    return list(seen)


def table_labels(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``experiment.json``'s keys -> the table's column labels, in the table's order."""
    extra = {key: f"Sharpe ({key.removeprefix('sharpe_')})" for key in extra_cost_columns(rows)}
    return {"source": "Source", **{c: METRIC_LABELS[c] for c in COLUMNS}, **EVIDENCE, **extra}


def table_frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Table 2 as ``experiment.json`` holds it: indexed by strategy in the file's order, the
    ``Source`` column saying whose row it is ("ours", or the paper's published figures),
    the values the file's own (a missing or null figure is NaN)."""
    labels = table_labels(rows)
    numbers = [key for key in labels if key != "source"]
    data = {"Source": [str(row["source"]) for row in rows]}
    for key in numbers:
        data[labels[key]] = [_number(row.get(key)) for row in rows]
    return pd.DataFrame(data, index=pd.Index([str(row["strategy"]) for row in rows], name="Strategy"))


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def table_formats(frame: pd.DataFrame) -> dict[str, str]:
    """Display format per numeric column of `table_frame` (as ``st.column_config`` takes):
    Table 2's return columns as percentages, trials as a count, the rest to two decimals."""
    percent = {METRIC_LABELS[c] for c in COLUMNS if c in PERCENT_METRICS}
    return {
        label: "percent" if label in percent else "%.0f" if label == EVIDENCE["trials"] else "%.2f"
        for label in frame.columns
        if label != "Source"
    }


def paper_rows(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The strategies of the rows that are not ours (the paper's published figures)."""
    return [str(row["strategy"]) for row in rows if row["source"] != "ours"]


def settings_frame(config: Mapping[str, Any], dataset: Mapping[str, Any]) -> pd.DataFrame:
    """The experiment's settings, one row each (``Setting`` -> ``Value``, as text).

    :param config: ``experiment.toml`` (`podracer.experiment.ExperimentConfig`'s fields).
    :param dataset: the data set recipe the experiment wrote (``dataset.toml``): its window
        and split; {} before the experiment wrote it.
    """
    data = str(config["dataset"])
    if config.get("tickers") is not None:
        data += f", {config['tickers']} tickers"
    if config.get("years") is not None:
        data += f", its last {config['years']:g} years"
    rows = [("Data set", data)]
    for label, first, following in SPLIT:
        if first in dataset and following in dataset:
            rows.append((label, f"{dataset[first]} until {dataset[following]} (exclusive)"))
    rows += [
        ("Budget of each learner", budget_text(config)),
        ("Commission per side", f"{float(config['cost']):.2%}"),
        ("Env rules (preset)", str(config["preset"])),
        ("Capital", f"${float(config.get('initial_cash', math.nan)):,.0f}"),
        ("Extra cost models", ", ".join(config.get("extra_costs") or ()) or "none"),
        ("Baseline libraries", ", ".join(config.get("libraries") or ()) or "none"),
        (
            "Figure 7's snapshots",
            "every {:g} s".format(config["snapshot_every"])
            if config.get("snapshot_every")
            else "every tenth of the wall-clock budget (the default; 60 s at equal work)",
        ),
        ("Seed, device", f"{config.get('seed', 0)}, {config.get('device', 'cpu')}"),
    ]
    return pd.DataFrame(rows, columns=["Setting", "Value"]).set_index("Setting")


def budget_text(config: Mapping[str, Any]) -> str:
    """Equal wall-clock (``minutes``) or equal work (``pods`` x ``pod_steps``), in words."""
    workers = config.get("workers", 1)
    if config.get("minutes") is not None:
        return f"{config['minutes']:g} minutes of wall-clock (the tournament on {workers} processes, the others on one)"
    pods, steps = int(config["pods"]), int(config.get("pod_steps", 0))
    return f"{pods * steps:,} transitions (the tournament's {pods} pods of {steps:,}; on {workers} processes)"


def figure7(points: pd.DataFrame) -> go.Figure:
    """Figure 7: each snapshot's test-period cumulative return against the training
    wall-clock at which it was taken, one line per learner (``figure7.parquet``'s rows)."""
    figure = go.Figure()
    for learner, rows in points.groupby("learner", sort=True):
        rows = rows.sort_values("seconds")
        figure.add_trace(
            go.Scatter(
                x=rows["seconds"],
                y=rows["cum_return"],
                mode="lines+markers",
                name=str(learner),
                hovertemplate="%{x:.0f} s: %{y:.2%}<extra>" + str(learner) + "</extra>",
            )
        )
    figure.update_layout(
        title=heading("Test-period return of training snapshots (the paper's Figure 7)"),
        xaxis_title="training wall-clock (s)",
        yaxis_title="test-period cumulative return",
        **LAYOUT,
    )
    figure.update_yaxes(tickformat=".0%")
    return figure


__all__ = [
    "budget_text",
    "extra_cost_columns",
    "figure7",
    "paper_rows",
    "settings_frame",
    "table_formats",
    "table_frame",
    "table_labels",
]
