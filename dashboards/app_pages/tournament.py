"""Tournament: the leaderboard with lineage, the result and where it stands against its own pods,
best score against wall-clock per algorithm, pods per worker over time, and hyperparameters
against score."""

from __future__ import annotations

import streamlit as st

from dashboards import figures, state

HINT = (
    "trader tournament RUN_DIR --dataset synthetic-edge-daily --preset market --pod-steps 16384 "
    "--time-budget 3m --workers 2"
)
"""The empty page's command: a tournament that learns synthetic-edge-daily's planted edge in 3 minutes
of pods on a laptop's two cores (as `trader demo`'s does), then backtests its result."""

st.title("Tournament")
runs = [run for run in state.all_runs() if run.has_tournament]
if not runs:
    st.info(
        f"No tournament in {state.runs_dir()}: start one with `{HINT}` (the market preset's pods learn "
        "the data set's planted 5-day mean reversion; 3 minutes of pods, then the backtest of the result)."
    )
    st.stop()

run = {r.name: r for r in runs}[st.sidebar.selectbox("Tournament", [r.name for r in runs], key="tournament")]

try:
    board = state.leaderboard(run)
except state.RunFileError as err:
    state.problem(err)
    board = None
if board is not None:
    st.subheader(f"Leaderboard ({len(board['entries'])} of {board.get('capacity', '?')})")
    st.dataframe(figures.leaderboard_table(board), key="leaderboard", hide_index=True, width="stretch")

try:
    chosen = state.selection(run)
except state.RunFileError as err:
    state.problem(err)
    chosen = None
if chosen is not None:
    st.subheader("Result")
    st.info(chosen["sentence"])
    st.dataframe(figures.selection_table(chosen), key="selection", width="stretch")

report = None
if run.has_report:
    try:
        report = state.report(run)
    except state.RunFileError as err:
        state.problem(err)
spread = figures.spread_record(report, chosen)
if spread is not None:
    st.subheader("The result against its own pods")
    period = figures.spread_period(spread)
    if period is not None:
        st.plotly_chart(figures.spread_figure(spread, period), key="spread")
    for line in spread["sentences"]:
        st.caption(line)
elif chosen is None:
    st.caption(
        "No result yet, and no spread of pods to place it in: a tournament chooses its result when it stops "
        "with a finished pod."
    )

try:
    pods = state.pods(run)
except state.RunFileError as err:
    state.problem(err)
    st.stop()

counts = pods["status"].value_counts()
st.caption(" · ".join(f"{status}: {count}" for status, count in counts.items()))
left, right = st.columns(2)
left.plotly_chart(figures.best_score_figure(pods), key="best_score")
right.plotly_chart(figures.pod_timeline_figure(pods), key="timeline")

params = figures.hyperparameter_frame(pods)
names = figures.hyperparameter_names(params)
if names:
    name = st.selectbox("Hyperparameter", names, key="hyperparameter")
    st.plotly_chart(figures.hyperparameter_figure(params, name), key="hyperparameters")
else:
    st.info("No finished pod with a score yet.")
