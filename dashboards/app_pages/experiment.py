"""The paper's experiment: an experiment of `trader experiment podracer`: its settings, its
Table 2 (our rows beside the paper's published ones, with our evidence columns) and its
Figure 7 (the test-period return of training snapshots against wall-clock, one line per
learner): the numbers of experiment.json and figure7.parquet as `podracer.experiment` wrote
them. An experiment still running shows its settings."""

from __future__ import annotations

import streamlit as st

from dashboards import experiment as views
from dashboards import state
from trader import rundir

HINT = "trader experiment podracer RUN_DIR --dataset synthetic-edge-daily --pods 6 --pod-steps 20000"
"""The empty page's command: the seed paper's experiment at a laptop's size."""

st.title("The paper's experiment")
runs = [run for run in state.all_runs() if run.has_experiment]
if not runs:
    st.info(
        f"No experiment in {state.runs_dir()}: run the seed paper's (Table 2 and Figure 7) with "
        f"`{HINT}` (a laptop-sized run; without `--dataset` it is the paper's NASDAQ-100 with Alpaca keys, else the "
        "synthetic minute stand-in)."
    )
    st.stop()

run = {r.name: r for r in runs}[st.sidebar.selectbox("Experiment", [r.name for r in runs], key="experiment_run")]
try:
    config, dataset = state.experiment_settings(run)
except state.RunFileError as err:
    state.problem(err)
    st.stop()

st.subheader("Settings")
st.dataframe(views.settings_frame(config, dataset), key="experiment_settings", width="stretch")

if not (run.path / rundir.EXPERIMENT_JSON).exists():
    st.info(
        f"{run.name} has not finished: no Table 2 yet (run the same `trader experiment podracer` command "
        "again to resume it)."
    )
    st.stop()

st.subheader("Table 2")
try:
    rows = state.experiment(run)["table"]
except state.RunFileError as err:
    state.problem(err)
else:
    table = views.table_frame(rows)
    st.dataframe(
        table,
        key="experiment_table",
        width="stretch",
        column_config={
            label: st.column_config.NumberColumn(format=f) for label, f in views.table_formats(table).items()
        },
    )
    theirs = views.paper_rows(rows)
    if theirs:
        st.caption(
            f'Source "the paper": {", ".join(theirs)} are the seed paper\'s published figures (cumulative '
            "return and Sharpe ratio of its headline rows), not ours; its other cells are not transcribed. "
            "Our rows are the test-period backtest of each learner's selected strategy, the benchmark and "
            f'equal weight: its report is {run.name}\'s, on the Strategies and "Is the edge real?" pages.'
        )

st.subheader("Figure 7")
try:
    points = state.experiment_figure(run)
except state.RunFileError as err:
    state.problem(err)
else:
    if points.empty:
        st.info(
            "No snapshot was backtested (neither learner left a snapshot: the budget was shorter than "
            "the snapshot interval)."
        )
    else:
        st.plotly_chart(views.figure7(points), key="experiment_figure7")
