"""Training: learning curves from metrics.parquet against steps and wall-clock,
several runs overlaid, and samples per second."""

from __future__ import annotations

import streamlit as st

from dashboards import figures, state
from trader import rundir

HINT = "trader train RUN_DIR --algo ppo --dataset synthetic-edge-daily --preset market --steps 100000 --num-envs 512"
"""The empty page's command: PPO with the market preset, which learns synthetic-edge-daily's planted
edge (0.9x the oracle's validation Sharpe) well inside its 100,000 steps, about a minute on a laptop's CPU
(benchmarks/RESULTS.md, "Time to learn")."""

st.title("Training")
runs = state.all_runs()
sources = {run.name: run.path for run in runs if run.has_training}
tournaments = [run for run in runs if run.has_tournament]
if tournaments and st.sidebar.checkbox("Include tournament pods", value=not sources, key="include_pods"):
    for run in tournaments:
        pods_dir = run.path / "pods"
        for pod in sorted(pods_dir.iterdir()) if pods_dir.is_dir() else []:
            if (pod / rundir.METRICS).exists():
                sources[f"{run.name}/{pod.name}"] = pod
if not sources:
    st.info(
        f"No training run in {state.runs_dir()}: train one with `{HINT}` (the market preset's PPO learns "
        "the data set's planted 5-day mean reversion in about a minute on a laptop's CPU)."
    )
    st.stop()

chosen = st.sidebar.multiselect("Runs", list(sources), default=list(sources)[:5], key="training_runs")
frames = {}
for name in chosen:
    try:
        frames[name] = state.training(sources[name])
    except state.RunFileError as err:
        state.problem(err)
if not frames:
    st.info("Pick a run in the sidebar.")
    st.stop()

columns = figures.curve_columns(frames)
metric = st.selectbox("Metric", columns, key="metric")
left, right = st.columns(2)
left.plotly_chart(figures.learning_curve_figure(frames, metric, x="step"), key="curve_steps")
right.plotly_chart(figures.learning_curve_figure(frames, metric, x="wall_time"), key="curve_seconds")
if "samples_per_s" in columns:
    st.plotly_chart(figures.learning_curve_figure(frames, "samples_per_s", x="step"), key="throughput")
st.subheader("Runs")
st.caption(
    "Best validation score: the score that chose each run's best checkpoint (the annualised "
    "Sharpe ratio on a market, the mean episodic return on a gymnasium env)."
)
st.dataframe(figures.throughput_table(frames), key="runs_table", width="stretch")
