"""The significance view's figures: is the edge real? Plain data in, a Plotly figure out.

Like `dashboards.figures`, plain functions with no Streamlit and no file reading, so
each is tested on its own and the page only arranges them. They draw what
`trader.stats` computes (the numbers are defined there, never here):

- `interval_figure`: each strategy's annualised Sharpe ratio with its intervals as
  error bars, from `trader.backtesting.evidence.series_evidence` dicts (as report.json holds them);
- `trial_sharpe_figure`: the tournament's trial Sharpe ratios beside the expected
  maximum of as many edge-free trials (`trader.stats.expected_max_sharpe`, as the
  report's selection holds it);
- `pbo_figure`: the histogram of CSCV's logits (`trader.stats.pbo_cscv`), with PBO the
  share at or left of 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboards.figures import MARGIN, heading

LAYOUT = {"margin": MARGIN, "legend": {"orientation": "h", "y": -0.15}}

INTERVALS = {"interval_analytic": "analytic (Lo/Mertens)", "interval_bootstrap": "stationary bootstrap"}
"""The interval keys of a `strategy_evidence` dict and the legend name of each."""


def _number(value: object) -> float:
    """A JSON number, or NaN for None (a statistic `trader.stats` could not give)."""
    return math.nan if value is None else float(value)  # type: ignore[arg-type]


def _shown(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


def interval_frame(evidence: Mapping[str, Mapping[str, object]]) -> pd.DataFrame:
    """One row per strategy: Sharpe, both intervals' ends, PSR, DSR and the sentence.

    :param evidence: strategy name -> its `trader.backtesting.evidence.series_evidence` dict.
    :return: columns ``sharpe``, ``<key>_low`` / ``<key>_high`` for each of
        `INTERVALS`, ``psr``, ``dsr_null``, ``dsr``, ``sentence``; NaN where the dict holds None.
    """
    rows = {}
    for name, entry in evidence.items():
        row = {"sharpe": _number(entry.get("sharpe"))}
        for key in INTERVALS:
            low, high = entry.get(key) or (None, None)  # type: ignore[misc]
            row[f"{key}_low"], row[f"{key}_high"] = _number(low), _number(high)
        row["psr"], row["dsr_null"], row["dsr"] = (_number(entry.get(key)) for key in ("psr", "dsr_null", "dsr"))
        row["sentence"] = str(entry.get("sentence", ""))
        rows[name] = row
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index.name = "strategy"
    return frame


COLUMNS = {
    "sharpe": "Sharpe ratio",
    **{f"{key}_{end}": f"{label}: {end}" for key, label in INTERVALS.items() for end in ("low", "high")},
    "psr": "PSR: P[Sharpe > 0]",
    "dsr_null": "DSR: against zero-Sharpe trials",
    "dsr": "DSR: against the trials' spread",
    "sentence": "verdict",
}
"""`interval_frame`'s columns and their readable names, in the table's order."""

FORMATS = {
    **{COLUMNS[key]: "%.2f" for key in COLUMNS if key == "sharpe" or key.startswith("interval_")},
    **{COLUMNS[key]: "percent" for key in ("psr", "dsr_null", "dsr")},
}
"""Display format per numeric readable column (as ``st.column_config.NumberColumn`` takes it):
annualised Sharpe ratios to two decimals, the probabilities as percentages."""


def display_intervals(frame: pd.DataFrame) -> pd.DataFrame:
    """`interval_frame` with readable column names (values unchanged; `FORMATS` says how each reads)."""
    return frame[[key for key in COLUMNS if key in frame.columns]].rename(columns=COLUMNS)


def interval_figure(evidence: Mapping[str, Mapping[str, object]]) -> go.Figure:
    """Each strategy's annualised Sharpe ratio with both intervals as horizontal error bars.

    A strategy whose interval could not be computed is drawn without a bar; one
    without a Sharpe ratio is not drawn (its sentence says why, in the hover).
    """
    frame = interval_frame(evidence)
    names = [str(name) for name in frame.index]
    hover = [f"PSR {_shown(row.psr)}, DSR {_shown(row.dsr_null)}: {row.sentence}" for row in frame.itertuples()]
    traces = []
    for offset, (key, label) in zip((-0.12, 0.12), INTERVALS.items()):
        traces.append(
            go.Scatter(
                x=frame["sharpe"],
                y=np.arange(len(frame)) + offset,
                name=label,
                mode="markers",
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": frame[f"{key}_high"] - frame["sharpe"],
                    "arrayminus": frame["sharpe"] - frame[f"{key}_low"],
                },
                text=hover,
                hovertemplate="%{x:.2f}  %{text}<extra>" + label + "</extra>",
            )
        )
    figure = go.Figure(traces)
    figure.add_vline(x=0.0, line_dash="dot", line_color="grey")
    confidence = next((entry.get("confidence") for entry in evidence.values() if entry.get("confidence")), 0.95)
    figure.update_layout(title=heading(f"Sharpe ratio with its {100 * float(confidence):g}% intervals"), **LAYOUT)
    figure.update_xaxes(title="Sharpe ratio (annualised)")
    figure.update_yaxes(tickvals=list(range(len(names))), ticktext=names, autorange="reversed")
    return figure


def trial_sharpe_figure(
    trial_sharpes: Sequence[float],
    labels: Sequence[str] | None = None,
    luck: Mapping[str, float | None] | None = None,
    selected: Mapping[str, float] | None = None,
) -> go.Figure:
    """The trials' Sharpe ratios, best first, beside what the best of as many null trials shows.

    :param trial_sharpes: each trial's annualised Sharpe ratio on the selection period.
    :param labels: a name per trial (pod id) for the hover; default the trial's index.
    :param luck: label -> an expected best annualised Sharpe of edge-free trials, as the
        report's selection holds it (``expected_max_sharpe_null``, ``expected_max_sharpe``),
        drawn as dashed lines; None and NaN values are left out.
    :param selected: name -> Sharpe of the selected strategies (best pod, ensemble),
        drawn as horizontal lines.
    """
    sharpes = np.asarray(trial_sharpes, dtype=float)
    names = np.asarray([str(i) for i in range(len(sharpes))] if labels is None else [str(x) for x in labels])
    order = np.argsort(-np.nan_to_num(sharpes, nan=-np.inf), kind="stable")
    figure = go.Figure(
        go.Scatter(
            x=np.arange(1, len(sharpes) + 1),
            y=sharpes[order],
            text=names[order],
            mode="markers",
            name="trials",
            hovertemplate="%{text}: %{y:.2f}<extra></extra>",
        )
    )
    for (label, value), color in zip((luck or {}).items(), ("firebrick", "darkorange")):
        if value is not None and math.isfinite(value):
            figure.add_hline(y=value, line_dash="dash", line_color=color, annotation_text=f"{label}: {value:.2f}")
    for name, value in (selected or {}).items():
        figure.add_hline(
            y=value, line_dash="dot", annotation_text=f"{name}: {value:.2f}", annotation_position="bottom right"
        )
    figure.update_layout(title=heading("Trial Sharpe ratios against luck"), **LAYOUT)
    figure.update_xaxes(title="trial, by rank")
    figure.update_yaxes(title="Sharpe ratio (annualised)")
    return figure


def pbo_figure(logits: Sequence[float], pbo: float | None = None) -> go.Figure:
    """Histogram of CSCV's logits; PBO is the share at or left of the line at 0.

    :param logits: `trader.stats.PBOResult.logits` (or report.json's list).
    :param pbo: the PBO to print; default the share of logits <= 0, its definition.
    """
    values = np.asarray(logits, dtype=float)
    share = float(np.mean(values <= 0)) if pbo is None and len(values) else pbo
    figure = go.Figure(go.Histogram(x=values, nbinsx=40, name="logits"))
    figure.add_vline(x=0.0, line_dash="dash", line_color="firebrick")
    title = "Probability of backtest overfitting" + ("" if share is None else f": PBO = {share:.2f}")
    figure.update_layout(title=heading(title), showlegend=False, **LAYOUT)
    figure.update_xaxes(title="logit of the in-sample winner's out-of-sample rank (left of 0: below the median)")
    figure.update_yaxes(title="splits")
    return figure
