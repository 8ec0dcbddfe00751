"""Is the edge real? Each strategy's Sharpe ratio with its intervals, the trials'
Sharpe ratios against the best that luck gives, and the PBO's logits: the numbers of
report.json and trials.parquet as `trader.backtesting.evidence` computed them
(docs/reading-results.md)."""

from __future__ import annotations

import streamlit as st

from dashboards import significance, state
from dashboards.runs import strategy_labels
from trader import rundir

HINT = "trader backtest RUN_DIR"
"""The empty page's command; RUN_DIR is a trained run (the Training page's hint makes one)."""

st.title("Is the edge real?")
runs = state.all_reports()  # each run's own report, then its other reports (reports/<name>)
if not runs:
    st.info(f"No report.json in {state.runs_dir()}: `{HINT}` on a trained run writes one.")
    st.stop()

run = {r.name: r for r in runs}[st.sidebar.selectbox("Run", [r.name for r in runs], key="significance_run")]
try:
    report = state.report(run)
except state.RunFileError as err:
    state.problem(err)
    st.stop()

evidence = report.get("evidence") or {}
if not evidence:
    st.info(
        "This report has no statistics (it was written by an older version): run `trader backtest RUN_DIR --overwrite` on it again."
    )
    st.stop()
labels = strategy_labels(report)
named = {labels.get(name, name): evidence[name] for name in report["order"] if name in evidence}
st.caption(
    f"{report['period']['name']} period, {report['period']['start']} .. {report['period']['end']}. "
    "On the test period the DSR of a selected strategy is conservative; the PSR is the honest figure."
)
st.plotly_chart(significance.interval_figure(named), key="intervals")
st.dataframe(
    significance.display_intervals(significance.interval_frame(named)),
    key="evidence",
    width="stretch",
    column_config={label: st.column_config.NumberColumn(label, format=f) for label, f in significance.FORMATS.items()},
)

selection = report.get("selection")
if selection:
    st.subheader(f"The selection, on the validation period ({selection['n_trials']} trials)")
    winner = selection.get("winner")
    if winner is not None:
        sharpe = winner.get("sharpe")
        st.markdown(
            f"- the winner's validation Sharpe {'n/a' if sharpe is None else f'{sharpe:.2f}'}: {winner['sentence']}"
        )
    for spa in selection.get("spa", {}).values():
        st.markdown(f"- {spa['sentence']}")
    if "pbo" in selection:
        st.markdown(f"- {selection['pbo']['sentence']}")
    left, right = st.columns(2)
    if (run.path / rundir.TRIALS).exists():
        try:
            keys, _ = state.trials(run)
        except state.RunFileError as err:
            state.problem(err)
        else:
            names = (keys["pod_id"] + "@" + keys["step"].astype(str)) if "pod_id" in keys else keys["step"].astype(str)
            chosen = {"winner": winner["sharpe"]} if winner is not None and winner.get("sharpe") is not None else None
            count = selection["n_trials"]
            luck = {
                f"expected best of {count} zero-Sharpe trials": (winner or {}).get("expected_max_sharpe_null"),
                "with the trials' own spread": (winner or {}).get("expected_max_sharpe"),
            }
            left.plotly_chart(
                significance.trial_sharpe_figure(
                    keys["score"].to_numpy(), labels=list(names), luck=luck, selected=chosen
                ),
                key="trials",
            )
    logits = (selection.get("pbo") or {}).get("logits") or []
    if logits:
        right.plotly_chart(significance.pbo_figure(logits, selection["pbo"].get("pbo")), key="pbo")
else:
    st.caption(
        "No selection statistics: the run records no trials (a backtest of given policies, or a run "
        "without a validation period)."
    )
