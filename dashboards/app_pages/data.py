"""Data: the data set of a run: tickers, period, split, tradable fraction, benchmark."""

from __future__ import annotations

import streamlit as st

from dashboards import figures, state
from trader import rundir

st.title("Data")
runs = [run for run in state.all_runs() if (run.path / rundir.DATASET).exists()]
if not runs:
    st.info(f"No dataset.json in {state.runs_dir()}'s runs: `trader train` and `trader backtest` write one.")
    st.stop()

run = {r.name: r for r in runs}[st.sidebar.selectbox("Run", [r.name for r in runs], key="data_run")]
try:
    card = state.dataset_card(run)
except state.RunFileError as err:
    state.problem(err)
    st.stop()

st.subheader(card["name"])
facts = st.columns(5)
facts[0].metric("Tickers", len(card["tickers"]))
facts[1].metric("Interval", str(card.get("interval", "?")))
facts[2].metric("Trading days", card.get("trading_days", "?"))
facts[3].metric("Tradable", f"{card.get('tradable_fraction', float('nan')):.1%}")
facts[4].metric("Benchmark", card.get("benchmark") or "none")
st.caption(f"{card.get('start')} to {card.get('end')}, {card.get('bars')} bars")
if card.get("periods"):
    st.plotly_chart(figures.periods_figure(card), key="periods_chart")
    st.dataframe(figures.periods_table(card), key="periods", width="stretch")
else:
    st.info("This data set has no train / validation / test split.")
st.subheader("Tickers")
st.write(", ".join(card["tickers"]))
