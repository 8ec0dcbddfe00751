"""Strategies: equity, drawdown, rolling Sharpe, monthly returns, distribution,
exposure (net and gross) and turnover, the metrics table of the selected runs'
backtests, each strategy against the benchmark (beta, alpha) and each agent against its
yardstick, and their costs: the breakdown and the breakeven cost, as report.json holds them."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboards import costs, figures, state
from dashboards import runs as runs_module

HINT = "trader backtest RUN_DIR"
"""The empty page's command; RUN_DIR is a trained run (the Training page's hint makes one)."""

st.title("Strategies")
runs = state.all_reports()  # each run's own report, then its other reports (reports/<name>)
if not runs:
    st.info(f"No backtest in {state.runs_dir()}: run `{HINT}` on a trained run (a tournament writes one itself).")
    st.stop()

names = [run.name for run in runs]
chosen = st.sidebar.multiselect("Runs", names, default=names[:1], key="runs")
reports = {}
for run in runs:
    if run.name in chosen:
        try:
            reports[run.name] = (run, state.report(run))
        except state.RunFileError as err:
            state.problem(err)
if not reports:
    st.info("Pick a run with a backtest in the sidebar.")
    st.stop()

several = len(reports) > 1
files = {}  # (run name, strategy) -> series file, in each report's order (best first)
labels = {}  # (run name, strategy) -> the name shown (runs.strategy_labels): "run: label" with several runs
offered = {}  # strategy -> its labels in the chosen runs, for the picker (one, unless the runs differ)
for run_name, (run, report) in reports.items():
    paths = {s["name"]: s.get("series", f"backtests/{s['name']}.parquet") for s in report["strategies"]}
    files.update({(run_name, name): paths[name] for name in report["order"] if name in paths})
    for name, label in runs_module.strategy_labels(report).items():
        labels[run_name, name] = f"{run_name}: {label}" if several else label
        offered.setdefault(name, {})[label] = None
names = list(dict.fromkeys(name for _, name in files))
# One widget per run selection, so a new selection starts with all its strategies.
picked = st.sidebar.multiselect(
    "Strategies",
    names,
    default=names,
    format_func=lambda name: " / ".join(offered.get(name) or [name]),
    key="strategies:" + "|".join(reports),
)

first = min(figures.period_dates(report)[0] for _, report in reports.values())
last = max(figures.period_dates(report)[1] for _, report in reports.values())
# Keyed on the runs too: their bounds change with the selection.
dates = st.sidebar.date_input(
    "Dates",
    value=(first.date(), last.date()),
    min_value=first.date(),
    max_value=last.date(),
    key="dates:" + "|".join(reports),
)
start, end = (
    (dates[0], dates[1]) if isinstance(dates, (tuple, list)) and len(dates) == 2 else (first.date(), last.date())
)
log_scale = st.sidebar.checkbox("Log scale", value=False, key="log_scale")
window = st.sidebar.slider("Rolling Sharpe window (sessions)", 5, 126, 21, key="window")

daily, tables = {}, []
for run_name, (run, report) in reports.items():
    bars = {}
    for name in picked:
        if (run_name, name) not in files:
            continue
        label = labels[run_name, name]
        try:
            frame = state.daily(run, files[run_name, name])
            bars[name] = state.series(run, files[run_name, name])
        except state.RunFileError as err:
            state.problem(err)
            continue
        daily[label] = frame[(frame.index >= pd.Timestamp(start)) & (frame.index <= pd.Timestamp(end))]
    if bars:
        table = figures.range_metrics(report, bars, start, end)
        table.index = [labels[run_name, n] for n in table.index]
        tables.append(table)

if not daily:
    st.info("Pick at least one strategy in the sidebar.")
    st.stop()

table = pd.concat(tables) if tables else pd.DataFrame()
table.index.name = "strategy"
st.subheader("Metrics")
st.caption(
    "From `trader.metrics.summary`: over the whole period, report.json's own numbers; over a shorter range, the same "
    "function on that range's bars. Daily figures, annualised with 252 sessions."
)
formats = {label: st.column_config.NumberColumn(label, format=fmt) for label, fmt in figures.column_formats().items()}
st.dataframe(figures.display_table(table), key="metrics", width="stretch", column_config=formats)
st.download_button("Download CSV", table.to_csv().encode("utf-8"), file_name="metrics.csv", mime="text/csv")

market = {run_name: figures.market_table(report, picked) for run_name, (run, report) in reports.items()}
if any(not frame.empty for frame in market.values()):
    st.subheader("Against the benchmark and the yardsticks")
    st.caption(
        "report.json's own numbers, over the report's whole period: daily returns regressed on the benchmark "
        "index's (beta, alpha a year with its 95% interval), tracking error and information ratio of the "
        "returns less the benchmark's, and their correlation; then each agent against the best classical "
        "factor portfolio of its own kind, dollar-neutral or long-only (docs/yardsticks.md)."
    )
    shown = pd.concat(
        [frame.set_axis([f"{name}: {n}" if several else n for n in frame.index]) for name, frame in market.items()]
    )
    market_formats = {
        label: st.column_config.NumberColumn(label, format=fmt) for label, fmt in figures.market_formats().items()
    }
    st.dataframe(shown, key="market", width="stretch", column_config=market_formats)
    for run_name, (run, report) in reports.items():
        for line in figures.yardstick_sentences(report):
            st.markdown(f"- {run_name + ': ' if several else ''}{line}")

trade_lists = {
    (run_name, name): path
    for run_name, (run, report) in reports.items()
    for name, path in runs_module.trade_files(report).items()
    if name in picked
}
if trade_lists:
    with st.expander("Trade lists: every fill, with its price and costs by term"):
        chosen_list = st.selectbox(
            "Strategy",
            list(trade_lists),
            format_func=lambda key: labels.get(key, key[1]),
            key="trade_list:" + "|".join(reports),
        )
        try:
            fills = state.trades(reports[chosen_list[0]][0], trade_lists[chosen_list])
        except state.RunFileError as err:
            state.problem(err)
        else:
            st.caption(
                f"{len(fills):,} fills; value {fills['value'].sum():,.0f}, costs "
                f"{fills[['commission', 'spread', 'impact']].sum().sum():,.2f} (the report's, but the borrow fee)."
            )
            st.dataframe(fills.head(1000), key="trades_table", width="stretch")
            st.download_button(
                "Download the trade list (CSV)",
                fills.to_csv(index=False).encode("utf-8"),
                file_name=f"trades-{chosen_list[1]}.csv",
                mime="text/csv",
                key="trades_download",
            )

values = figures.wide(daily, "value")
returns = figures.wide(daily, "return")
st.plotly_chart(figures.equity_figure(values, log_scale=log_scale), key="equity")
left, right = st.columns(2)
left.plotly_chart(figures.drawdown_figure(values), key="drawdown")
right.plotly_chart(figures.rolling_sharpe_figure(returns, window), key="rolling_sharpe")
left, right = st.columns(2)
heat = left.selectbox("Monthly returns of", list(daily), key="heatmap_strategy")
left.plotly_chart(figures.monthly_heatmap(returns[heat].dropna(), heat), key="monthly")
right.plotly_chart(figures.return_distribution_figure(returns), key="distribution")
left, right = st.columns(2)
gross = figures.wide({label: frame for label, frame in daily.items() if "gross_exposure" in frame}, "gross_exposure")
left.plotly_chart(figures.exposure_figure(figures.wide(daily, "exposure"), gross), key="exposure")
if len(gross.columns) < len(daily):
    left.caption(
        "Net exposure only for series written before gross value was recorded: run `trader backtest RUN_DIR --overwrite`."
    )
right.plotly_chart(
    figures.line_figure(figures.wide(daily, "turnover"), "Daily turnover (traded / value)", "turnover", percent=True),
    key="turnover",
)

st.subheader("Costs")
st.caption(
    "report.json's own numbers, over the report's whole period (the date range above does not apply): each "
    "part in bp of the value traded, and the Sharpe ratio at each multiple of the cost model."
)
cost_rows, curves = [], {}
for run_name, (run, report) in reports.items():
    prefix = f"{run_name}: " if several else ""
    if "costs" not in report:
        st.info(
            f"{prefix}no costs recorded in report.json (written by an older version): "
            "run `trader backtest RUN_DIR --overwrite` on it again."
        )
        continue
    model = report.get("cost_model") or {}
    sources = f" Sources: {model['sources']}" if model.get("sources") else ""
    st.caption(
        f"{prefix}cost model {model.get('name', 'custom')!r}: commission {model.get('buy_cost')} of the value "
        f"bought, {model.get('sell_cost')} of the value sold, and the terms below.{sources}"
    )
    with st.expander(f"{prefix}cost model terms (`CostModel`)"):
        st.json(model.get("costs") or {})
    shown = [name for name in report["order"] if name in picked]
    table = costs.cost_frame({name: report["costs"][name] for name in shown if name in report["costs"]})
    table.index = [labels.get((run_name, name), prefix + name) for name in table.index]
    cost_rows.append(table)
    breakeven = report.get("breakeven") or {}
    if not breakeven:
        st.caption(
            f"{prefix}no breakeven cost: no multiples of the cost model were run (`--no-breakeven`, or a "
            "model that charges nothing)."
        )
    curves.update({labels.get((run_name, name), prefix + name): breakeven[name] for name in shown if name in breakeven})
if cost_rows:
    table = pd.concat(cost_rows)
    table.index.name = "strategy"
    left, right = st.columns(2)
    left.plotly_chart(costs.cost_figure(table), key="costs")
    if curves:
        right.plotly_chart(costs.breakeven_figure(curves), key="breakeven")
    shown = costs.display_costs(table)
    if curves:
        shown = shown.join(costs.breakeven_frame(curves)[["breakeven cost"]])
    st.dataframe(
        shown,
        key="costs_table",
        width="stretch",
        column_config={
            label: st.column_config.NumberColumn(label, format=f) for label, f in costs.cost_formats(shown).items()
        },
    )
