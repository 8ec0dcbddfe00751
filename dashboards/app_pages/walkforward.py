"""Walk-forward: the folds' windows, the stitched out-of-sample equity against the
benchmark and equal-weight, each fold's winner with its validation and test Sharpe,
and the stitched metrics and evidence: the numbers of walkforward.json and
stitched.parquet as `podracer.walkforward` wrote them. A walk-forward still running
shows its finished folds (their fold.json)."""

from __future__ import annotations

import streamlit as st

from dashboards import significance, state
from dashboards import walkforward as views
from dashboards.figures import column_formats
from trader import rundir

HINT = (
    "trader walkforward RUN_DIR --dataset synthetic-edge-daily --train 3y --validation 1y --test 1y "
    "--learner ppo --preset market --steps 50000 --num-envs 512"
)
"""The empty page's command: PPO with the market preset retrained on each fold at 50,000 steps (the
training hint's learner, which learns the planted edge in fewer), a few minutes on a laptop's CPU in all."""

st.title("Walk-forward")
runs = [run for run in state.all_runs() if run.has_walkforward]
if not runs:
    st.info(
        f"No walk-forward in {state.runs_dir()}: start one with `{HINT}` (the market preset's PPO retrained "
        "on each fold, then the stitched out-of-sample record of its test years; a few minutes on a laptop's CPU)."
    )
    st.stop()

run = {r.name: r for r in runs}[st.sidebar.selectbox("Walk-forward", [r.name for r in runs], key="walkforward_run")]
summary = None
try:
    if (run.path / rundir.WF_REPORT_JSON).exists():
        summary = state.walkforward(run)
        folds = summary["folds"]
    else:
        folds = state.finished_folds(run)
except state.RunFileError as err:
    state.problem(err)
    st.stop()

if summary is None:
    st.info(
        f"{run.name} has not finished: {len(folds)} fold(s) done, nothing stitched yet "
        "(run the same `trader walkforward` command again to resume it)."
    )
    if not folds:
        st.stop()
else:
    spec = summary["config"]["folds"]
    st.caption(
        f"{summary['config']['learner']} on {summary['config']['dataset']}: train {spec['train']}, "
        f"validation {spec['validation']}, test {spec['test']}, step {spec['step']}, "
        f"{'expanding' if spec['expanding'] else 'rolling'}, embargo {spec['embargo']} bars."
    )

st.plotly_chart(views.timeline_figure(views.window_frame(folds)), key="wf_timeline")

if summary is not None:
    try:
        stitched = state.stitched(run)
    except state.RunFileError as err:
        state.problem(err)
    else:
        st.plotly_chart(
            views.stitched_equity_figure(views.stitched_values(stitched), views.fold_starts(stitched)), key="wf_equity"
        )

st.subheader("Each fold's winner")
st.dataframe(views.winners_frame(folds), key="wf_winners", width="stretch")

if summary is not None:
    record = summary["stitched"]
    st.subheader(
        f"The stitched out-of-sample record ({record['start'][:10]} .. {record['end'][:10]}, {record['days']} days)"
    )
    st.dataframe(
        views.stitched_metrics(record),
        key="wf_metrics",
        width="stretch",
        column_config={label: st.column_config.NumberColumn(format=f) for label, f in column_formats().items()},
    )
    share = record["share_of_folds_beating_reference"]
    trials = ", ".join(f"{name} {count}" for name, count in record["n_trials"].items())
    st.markdown(
        f"The learner's test Sharpe beat the {record['reference']}'s in {share:.0%} of the folds. "
        f"Trials counted for each deflated Sharpe ratio (every validation pass of every fold): {trials}."
    )
    for name, evidence in record["evidence"].items():
        st.markdown(f"- {name}: {evidence['sentence']}")
    st.plotly_chart(significance.interval_figure(record["evidence"]), key="wf_intervals")
