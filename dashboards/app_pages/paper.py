"""Paper trading: the journal of `trader paper` (a paper account, a dry run or a replay):
equity against the backtest's expectation and the benchmark, the orders and their fills,
the slippage against the backtest's price, and the risk limits with how close the book
came to each."""

from __future__ import annotations

import streamlit as st

from dashboards import paper as views
from dashboards import state

HINT = "trader paper RUN_DIR --broker replay"
"""The empty page's command; RUN_DIR is a trained run (the Training page's hint makes one)."""

st.title("Paper trading")
runs = [run for run in state.all_runs() if run.has_paper]
if not runs:
    st.info(
        f"No paper trading in {state.runs_dir()}: start one with `{HINT}` (or `--broker alpaca` on a paper account)."
    )
    st.stop()

run = {r.name: r for r in runs}[st.sidebar.selectbox("Run", [r.name for r in runs], key="paper_run")]
try:
    journal = state.paper(run)
except state.RunFileError as err:
    state.problem(err)
    st.stop()

session, records = journal["session"], journal["records"]
config = session["config"]
broker = session["broker"] + (" (dry run: no order sent)" if session.get("dry_run") else "")
st.caption(
    f"{session['strategy']} of {run.name} on {broker}, {len(session['tickers'])} tickers, "
    f"{session.get('interval')} bars; started {session.get('start', {}).get('time', '?')}."
)
if not records:
    st.info("The journal holds no bar yet.")
    st.stop()

facts = views.summary(records)
left, middle, right = st.columns(3)
left.metric("Value", f"{facts['value']:,.2f}", f"{facts['bars']} bars")
middle.metric("Backtest's expectation", f"{facts['expected']:,.2f}")
right.metric("Tracking difference", f"{facts['tracking']:.4%}", f"{facts['filled']}/{facts['orders']} orders filled")
if facts["stop"]:
    st.warning(f"The loop stopped: {facts['stop']}")

st.plotly_chart(views.equity_figure(views.equity_frame(records)), key="paper_equity")

st.subheader("Orders and fills")
orders = views.orders_frame(records, session["tickers"])
st.dataframe(orders, key="paper_orders", width="stretch", hide_index=True)
st.plotly_chart(views.slippage_figure(orders), key="paper_slippage")

st.subheader("Risk limits")
limits = config.get("limits") or {}
st.dataframe(views.risk_frame(records, limits), key="paper_limits", width="stretch")
st.plotly_chart(views.risk_figure(records, limits), key="paper_risk")
