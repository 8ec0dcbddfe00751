"""The dashboard: its figure functions, its loaders and every page under Streamlit's AppTest.

The run directories are built by the real code: a tiny `trader.train` run backtested
by `trader backtest`, and a tiny tournament (3 pods on an in-process dask cluster)
with its final backtest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dashboards import figures, runs
from trader import metrics
from podracer.cli import main as cli

from dashboard_server import serve_dashboard
from market_fixtures import write_tiny_recipe

APP = Path(__file__).resolve().parents[1] / "dashboards" / "app.py"

TINY_PPO = {"num_steps": 32, "update_epochs": 2, "num_minibatches": 2, "hidden_sizes": [16]}
TINY_OFF = {"hidden_sizes": [16], "learning_starts": 256, "iteration_steps": 256, "batch_size": 64}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A runs folder with ``ppo`` (train + backtest) and ``tour`` (a tournament with its backtest)."""
    from distributed import Client

    import trader
    from tournament import TournamentConfig, run
    from trader.backtesting import runs as backtesting_runs

    root = tmp_path_factory.mktemp("dashboard")
    os.environ["PODRACER_DATA_DIR"] = str(root / "data")
    recipe = write_tiny_recipe(root, interval="5min")  # a fifth of the bars: the backtests are bar by bar
    runs_dir = root / "runs"
    trader.training.train("ppo", str(recipe), TINY_PPO, runs_dir / "ppo", steps=1024, num_envs=8, eval_every=512)
    assert cli(["backtest", str(runs_dir / "ppo"), "--dataset", str(recipe), "--no-tear-sheet"]) == 0
    config = TournamentConfig(
        run_dir=str(runs_dir / "tour"),
        env=str(recipe),
        pod_steps=512,
        num_envs=8,
        pods=3,
        population=3,
        algo_configs={"ppo": TINY_PPO, "sac": TINY_OFF, "td3": TINY_OFF},
    )
    # The tournament's own final backtest, its breakeven pass included, without the tear sheet: no
    # test here reads it, and pyfolio's drawing was most of the fixture's time. The tear sheet is
    # drawn, checked and found documented by tests/test_backtest.py::test_outputs_written_to_run_dir.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backtesting_runs, "backtest_config", partial(backtesting_runs.backtest_config, tear_sheet=False))
        with Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
            run(config, client=client)
    assert not list((runs_dir / "tour").glob("tearsheet_*")) and (runs_dir / "tour" / "report.json").is_file()
    return runs_dir


def test_every_file_a_training_run_a_tournament_and_a_backtest_wrote_is_documented(built: Path) -> None:
    from test_rundir import assert_every_file_is_documented

    for run in ("ppo", "tour"):
        assert_every_file_is_documented(built / run)


def test_a_tournament_gathers_every_pods_validation_passes_as_its_trials(built: Path) -> None:
    from trader import rundir

    keys, returns = rundir.read_trials(built / "tour" / rundir.TRIALS)
    pods = sorted(p.name for p in (built / "tour" / "pods").iterdir() if (p / rundir.TRIALS).is_file())
    per_pod = {pod: rundir.read_trials(built / "tour" / "pods" / pod / rundir.TRIALS) for pod in pods}
    assert len(pods) == 3 and keys["pod_id"].tolist() == [p for p in pods for _ in range(len(per_pod[p][0]))]
    assert keys["step"].tolist() == [s for p in pods for s in per_pod[p][0]["step"]]
    for pod, (pod_keys, pod_returns) in per_pod.items():
        rows = returns[(keys["pod_id"] == pod).to_numpy()]
        assert rows.to_numpy().tolist() == pod_returns.to_numpy().tolist()


@pytest.fixture
def runs_copy(built: Path, tmp_path: Path) -> Path:
    """A private copy of the built runs folder, for tests that damage files."""
    target = tmp_path / "runs"
    shutil.copytree(built, target)
    return target


def app_test(runs_dir: Path):
    from streamlit.testing.v1 import AppTest

    os.environ["PODRACER_RUNS_DIR"] = str(runs_dir)
    return AppTest.from_file(str(APP), default_timeout=60)


def messages(at) -> list[str]:
    return [w.value for w in at.warning] + [i.value for i in at.info]


def strategies(at):
    """The strategies multiselect (its key follows the run selection)."""
    return next(w for w in at.sidebar.multiselect if w.label == "Strategies")


def report_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "report.json").read_text())


# --------------------------------------------------------------------- loaders


def test_find_runs_lists_runs_but_not_pods(built: Path) -> None:
    found = {run.name: run for run in runs.find_runs(built)}
    assert set(found) == {"ppo", "tour"}
    assert found["ppo"].has_report and found["ppo"].has_training and not found["ppo"].has_tournament
    assert found["tour"].has_tournament and found["tour"].has_report
    assert runs.find_runs(built / "missing") == []


def test_a_run_folder_given_as_runs_dir_is_found_itself(built: Path) -> None:
    assert [run.name for run in runs.find_runs(built / "ppo")] == ["ppo"]


def test_loaders_name_the_file_that_is_wrong(runs_copy: Path) -> None:
    (runs_copy / "ppo" / "report.json").write_text('{"strategies": [')
    with pytest.raises(runs.RunFileError, match=r"ppo/report.json: not valid JSON"):
        runs.load_report(runs_copy / "ppo")
    (runs_copy / "ppo" / "report.json").write_text('{"strategies": []}')
    with pytest.raises(runs.RunFileError, match=r"report.json: no 'metrics' entry"):
        runs.load_report(runs_copy / "ppo")
    (runs_copy / "ppo" / "report.json").write_text('{"strategies": [], "metrics": {}, "order": [], "period": {}}')
    with pytest.raises(runs.RunFileError, match=r"report.json: 'period' needs 'start' and 'end'"):
        runs.load_report(runs_copy / "ppo")
    series = runs_copy / "ppo" / "backtests" / "best.parquet"
    series.write_bytes(series.read_bytes()[:100])
    with pytest.raises(runs.RunFileError, match=r"best.parquet: not a readable Parquet file"):
        runs.load_series(runs_copy / "ppo", "backtests/best.parquet")
    with pytest.raises(runs.RunFileError, match=r"leaderboard.json: not found"):
        runs.load_leaderboard(runs_copy / "ppo")


def test_the_dashboard_modules_do_not_import_torch(built: Path) -> None:
    """Drawing every page needs no torch: run them all in a fresh interpreter and look."""
    script = f"""
import os, sys
os.environ["PODRACER_RUNS_DIR"] = {str(built)!r}
from streamlit.testing.v1 import AppTest
at = AppTest.from_file({str(APP)!r}, default_timeout=60).run()
for page in ("tournament", "walkforward", "experiment", "training", "data"):
    at.switch_page(f"app_pages/{{page}}.py").run()
    assert not at.exception, at.exception
print("torch" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


# --------------------------------------------------------------------- figures: known answers


def bar_series(values: list[float], timestamps: list[str]) -> pd.DataFrame:
    index = pd.DatetimeIndex(pd.to_datetime(timestamps)).tz_localize("America/New_York")
    value = np.array(values)
    previous = np.concatenate([[value[0]], value[:-1]])
    return pd.DataFrame(
        {
            "value": value,
            "return": value / previous - 1.0,
            "cash": value * 0.25,
            "turnover": 0.0,
            "traded_value": 10.0,
            "costs": 0.0,
        },
        index=index,
    )


def test_daily_frame_keeps_the_last_value_and_compounds_the_day() -> None:
    bars = bar_series(
        [100, 110, 99, 120, 132],
        ["2023-01-03 09:31", "2023-01-03 16:00", "2023-01-04 09:31", "2023-01-04 12:00", "2023-01-04 16:00"],
    )
    daily = figures.daily_frame(bars)
    assert list(daily.index) == [pd.Timestamp("2023-01-03"), pd.Timestamp("2023-01-04")]
    assert daily["value"].tolist() == [110, 132]
    assert daily["return"].iloc[1] == pytest.approx(132 / 110 - 1)
    assert daily["traded_value"].tolist() == [20.0, 30.0]
    assert daily["turnover"].iloc[1] == pytest.approx(30.0 / 132)
    assert daily["exposure"].tolist() == pytest.approx([0.75, 0.75])


def test_daily_exposure_is_net_and_gross_at_the_sessions_last_bar() -> None:
    bars = bar_series(
        [100, 110, 99, 120], ["2023-01-03 09:31", "2023-01-03 16:00", "2023-01-04 09:31", "2023-01-04 16:00"]
    )
    bars["gross_value"] = [0.0, 165.0, 10.0, 60.0]  # e.g. 110 long + 55 short against cash 27.5 on the first day
    daily = figures.daily_frame(bars)
    assert daily["exposure"].tolist() == pytest.approx([0.75, 0.75])
    assert daily["gross_exposure"].tolist() == pytest.approx([1.5, 0.5])
    assert "gross_exposure" not in figures.daily_frame(bars.drop(columns="gross_value"))  # an older series: net only


def test_drawdowns_and_monthly_returns_known_answers() -> None:
    values = pd.DataFrame({"a": [1.0, 2.0, 1.0, 3.0]})
    assert figures.drawdowns(values)["a"].tolist() == [0.0, 0.0, -0.5, 0.0]
    returns = pd.Series([0.1, 0.1, -0.5], index=pd.to_datetime(["2023-01-03", "2023-01-31", "2023-02-01"]))
    table = figures.monthly_returns(returns)
    assert table.loc[2023, 1] == pytest.approx(0.21)
    assert table.loc[2023, 2] == pytest.approx(-0.5)
    assert table.loc[2023, 3] != table.loc[2023, 3]  # NaN: no sessions in March


def test_the_monthly_heatmaps_colour_bar_is_in_the_cells_unit() -> None:
    """The cells say 21.0%; the colour bar's ticks are percent too (they read 0.2 before), and so is the hover."""
    returns = pd.Series([0.1, 0.1, -0.5], index=pd.to_datetime(["2023-01-03", "2023-01-31", "2023-02-01"]))
    heat = figures.monthly_heatmap(returns, "a").data[0]
    assert heat.text[0][0] == "21.0%" and heat.text[0][1] == "-50.0%"
    assert heat.colorbar.tickformat.endswith("%")
    assert heat.text[0][0] == format(heat.z[0][0], heat.colorbar.tickformat)  # d3's and Python's ".1%" agree
    assert "%{z:" + heat.colorbar.tickformat + "}" in heat.hovertemplate


def test_rolling_sharpe_is_the_metric_over_each_window() -> None:
    rng = np.random.default_rng(0)
    returns = pd.DataFrame({"a": rng.normal(0.001, 0.01, 40), "b": rng.normal(0.0, 0.02, 40)})
    rolled = figures.rolling_sharpe(returns, 10)
    assert rolled.iloc[:9].isna().all().all()
    for end in (10, 25, 40):
        expected = metrics.sharpe_ratio(returns.iloc[end - 10 : end].to_numpy())
        np.testing.assert_allclose(rolled.iloc[end - 1].to_numpy(), expected)


def test_best_score_curve_is_the_running_best_per_algorithm() -> None:
    pods = pd.DataFrame(
        {
            "pod_id": ["p0", "p1", "p2", "p3", "p4"],
            "algo": ["ppo", "sac", "ppo", "ppo", "sac"],
            "start": [0.0, 0.0, 60.0, 120.0, 60.0],
            "end": [60.0, 60.0, 120.0, 180.0, 240.0],
            "score": [1.0, 0.5, 0.7, 2.0, np.nan],
            "status": ["finished"] * 4 + ["failed"],
            "worker": ["w"] * 5,
        }
    )
    curve = figures.best_score_curve(pods)
    assert curve[curve.algo == "ppo"]["best"].tolist() == [1.0, 1.0, 2.0]
    assert curve[curve.algo == "ppo"]["minutes"].tolist() == [1.0, 2.0, 3.0]
    assert curve[curve.algo == "sac"]["best"].tolist() == [0.5]


def test_the_hyperparameter_picker_starts_on_one_that_varies(built: Path) -> None:
    frame = pd.DataFrame(
        {
            "pod_id": ["p0", "p1", "p2"],
            "algo": ["ppo"] * 3,
            "score": [1.0, 2.0, 0.5],
            "gamma": [0.99] * 3,
            "clip": [0.2, 0.2, np.nan],
            "learning_rate": [1e-3, 3e-4, 1e-4],
            "note": ["a", "b", "c"],
        }
    )
    assert figures.hyperparameter_names(frame) == ["learning_rate", "gamma", "clip"]
    at = app_test(built).run()
    at.switch_page("app_pages/tournament.py").run()
    picker = at.selectbox(key="hyperparameter")
    params = figures.hyperparameter_frame(runs.load_pods(built / "tour"))
    assert params[picker.value].nunique() > 1


def test_tournament_tables_come_from_its_files(built: Path) -> None:
    board = runs.load_leaderboard(built / "tour")
    table = figures.leaderboard_table(board)
    assert table["pod"].tolist() == [entry["pod_id"] for entry in board["entries"]]
    assert table["rank"].tolist() == list(range(1, len(board["entries"]) + 1))
    pods = runs.load_pods(built / "tour")
    params = figures.hyperparameter_frame(pods)
    assert len(params) == pods["score"].notna().sum()
    assert figures.hyperparameter_names(params)  # learning rate and friends
    for figure in (
        figures.best_score_figure(pods),
        figures.pod_timeline_figure(pods),
        figures.hyperparameter_figure(params, figures.hyperparameter_names(params)[0]),
    ):
        assert figure.data


def test_the_tournament_page_states_the_result_and_each_candidates_evidence(built: Path) -> None:
    selection = runs.load_selection(built / "tour")
    at = app_test(built).run()
    at.switch_page("app_pages/tournament.py").run()
    assert not at.exception
    assert selection["sentence"] in [i.value for i in at.info]
    table = next(d.value for d in at.dataframe if "qualified" in d.value.columns)
    assert table.index.tolist() == [c["pod_id"] for c in selection["candidates"]]
    assert table["qualified"].tolist() == [c["qualified"] for c in selection["candidates"]]
    assert table["ensemble weight"].sum() == pytest.approx(1.0 if selection["members"] else 0.0)
    assert table["reason"].tolist() == [c["reason"] for c in selection["candidates"]]  # the tournament's own words


def test_a_tournaments_report_places_its_result_among_its_own_pods(built: Path) -> None:
    """report.json's spread: every finished pod's validation score, every kept pod's net Sharpe ratio
    from the pods' own pass, and the result's figures the report's own (its metrics row, selection.json)."""
    root = built / "tour"
    report, selection = report_of(root), runs.load_selection(root)
    record = report["spread"]
    pods = runs.load_pods(root)
    finished = pods[pods["status"] == "finished"]
    assert record["finished"] == len(finished) == 3 and record["result"] == selection["result"]
    assert [p["pod_id"] for p in record["pods"]] == finished["pod_id"].tolist()
    assert [p["validation"] for p in record["pods"]] == pytest.approx(finished["score"].tolist())
    score = selection["ensemble_score"] if selection["result"] == "ensemble" else selection["best_score"]
    assert record["validation"]["value"] == pytest.approx(score)
    assert record["validation"] == selection["spread"]["validation"]  # the tournament's record, on validation
    on_test = record["backtest"]
    assert on_test["period"] == "test" and on_test["not_kept"] == 0  # population 3 of 3 pods: every pod kept
    assert on_test["value"] == pytest.approx(report["metrics"][selection["result"]]["sharpe_ratio"], rel=1e-9)
    best = next(p for p in record["pods"] if p["pod_id"] == record["best_pod"])
    assert best["backtest"] == pytest.approx(report["metrics"]["best"]["sharpe_ratio"], rel=1e-9)
    text = (root / "report.md").read_text()
    section = text[text.index("## The result against its own pods") :].split("\n## ")[0]
    assert "| validation | 3 of 3 |" in section and "| test (net Sharpe) |" in section
    assert all(line in section for line in record["sentences"]) and "nan" not in section.lower()


def test_the_tournament_page_draws_its_pods_spread_with_the_result_marked(built: Path) -> None:
    record = report_of(built / "tour")["spread"]
    at = app_test(built).run()
    at.switch_page("app_pages/tournament.py").run()
    assert not at.exception
    drawn = chart(at, "spread")
    points = sorted(x for trace in drawn.data for x in trace.x)
    assert points == pytest.approx(sorted(p["backtest"] for p in record["pods"] if p["backtest"] is not None))
    lines = [shape.x0 for shape in drawn.layout.shapes]
    found = record["backtest"]["standing"]
    assert lines == pytest.approx([found["value"], found["median"]])  # the report's numbers, as they are
    assert "net Sharpe ratio, test" in drawn.layout.title.text
    assert [c.value for c in at.caption if c.value in record["sentences"]] == record["sentences"]


def test_a_tournament_without_a_backtest_draws_its_pods_validation_spread(runs_copy: Path) -> None:
    for name in ("report.json", "report.md"):
        (runs_copy / "tour" / name).unlink()
    record = runs.load_selection(runs_copy / "tour")["spread"]
    assert record["backtest"] is None
    at = app_test(runs_copy).run()
    at.switch_page("app_pages/tournament.py").run()
    assert not at.exception
    drawn = chart(at, "spread")
    assert "validation score" in drawn.layout.title.text
    assert drawn.layout.shapes[0].x0 == pytest.approx(record["validation"]["standing"]["value"])
    assert [c.value for c in at.caption if c.value in record["sentences"]] == record["sentences"]


def test_a_tournament_without_a_result_says_there_is_no_spread(runs_copy: Path) -> None:
    for name in ("report.json", "report.md", "selection.json"):  # stopped without a finished pod, or still running
        (runs_copy / "tour" / name).unlink()
    at = app_test(runs_copy).run()
    at.switch_page("app_pages/tournament.py").run()
    assert not at.exception and not [c for c in at.get("plotly_chart") if c.proto.id.endswith("-spread")]
    assert any(c.value.startswith("No result yet, and no spread of pods") for c in at.caption)


def test_a_candidates_reason_is_the_selections_own_and_an_older_file_says_it_has_none() -> None:
    selection = {
        "members": [],
        "weights": [],
        "candidates": [
            {"pod_id": "p0", "score": 2.0, "psr": 0.99, "qualified": True, "reason": "qualified, but no other pod did"},
            {"pod_id": "p1", "score": 1.0, "psr": 0.5, "qualified": False},  # an older selection.json
        ],
    }
    table = figures.selection_table(selection)
    assert table.loc["p0", "reason"] == "qualified, but no other pod did"
    assert table.loc["p1", "reason"] == figures.NO_REASON


def test_the_split_draws_across_a_daylight_saving_change() -> None:
    card = {
        "periods": {
            "train": {"start": "2023-01-03 09:30:00-05:00", "end": "2023-08-31 15:59:00-04:00", "bars": 10},
            "test": {"start": "2023-11-01 09:30:00-04:00", "end": "2023-12-29 15:59:00-05:00", "bars": 5},
        }
    }
    figure = figures.periods_figure(card)
    assert len(figure.data) == 2
    assert list(figures.periods_table(card).index) == ["train", "test"]


# --------------------------------------------------------------------- metrics: the report's numbers


def loaded_series(run_dir: Path) -> tuple[dict, dict[str, pd.DataFrame]]:
    report = report_of(run_dir)
    return report, {s["name"]: runs.load_series(run_dir, s["series"]) for s in report["strategies"]}


def test_whole_period_metrics_are_report_json_and_summary_gives_the_same(built: Path) -> None:
    report, series = loaded_series(built / "ppo")
    first, last = figures.period_dates(report)
    shown = figures.range_metrics(report, series, first, last)
    assert list(shown.index) == report["order"]
    for name, row in shown.iterrows():
        for column, value in report["metrics"][name].items():
            assert row[column] == value or (value is None and np.isnan(row[column]))
    recomputed = figures.metrics_table(series, report["config"]["risk_free"])
    pd.testing.assert_frame_equal(recomputed.loc[shown.index], shown, check_exact=False, rtol=1e-12, atol=0)


def test_a_shorter_range_is_summary_over_that_range(built: Path) -> None:
    report, series = loaded_series(built / "ppo")
    first, last = figures.period_dates(report)
    shown = figures.range_metrics(report, series, last, last)
    assert (shown["days"] == 1).all()
    one_day = {name: figures.in_range(frame, last, last) for name, frame in series.items()}
    returns = pd.DataFrame({n: f["return"].to_numpy() for n, f in one_day.items()})
    expected = metrics.summary(
        returns,
        timestamps=next(iter(one_day.values())).index,
        traded_value=pd.DataFrame({n: f["traded_value"].to_numpy() for n, f in one_day.items()}),
        portfolio_value=pd.DataFrame({n: f["value"].to_numpy() for n, f in one_day.items()}),
    )
    pd.testing.assert_frame_equal(shown, expected.loc[shown.index])


# --------------------------------------------------------------------- costs: the report's numbers


def test_cost_table_and_bars_are_report_json_numbers(built: Path) -> None:
    from dashboards import costs

    report = report_of(built / "ppo")
    table = costs.cost_frame(report["costs"])
    assert list(table.index) == list(report["costs"])
    for name, row in table.iterrows():
        for key in costs.COLUMNS:
            value = report["costs"][name][key]
            assert row[key] == value or (value is None and np.isnan(row[key]))
    figure = costs.cost_figure(table)
    assert [trace.name for trace in figure.data] == list(costs.PARTS.values())
    for trace, part in zip(figure.data, costs.PARTS):
        assert list(trace.x) == list(table.index)
        np.testing.assert_array_equal(np.asarray(trace.y, dtype=float), table[f"{part}_bps"].to_numpy())
    assert figure.layout.barmode == "relative"  # stacked


def test_the_breakeven_figure_draws_each_curve_and_marks_the_crossing() -> None:
    from dashboards import costs
    from trader.backtesting.assembly import breakeven

    curves = {
        "edge": breakeven([0.0, 1.0, 2.0, 4.0], [1.0, 0.5, -0.5, -1.0]),
        "never": breakeven([0.0, 1.0, 2.0, 4.0], [2.0, 1.5, 1.0, 0.5]),
    }
    figure = costs.breakeven_figure(curves)
    lines = [trace for trace in figure.data if trace.mode == "lines+markers"]
    assert [trace.name for trace in lines] == ["edge: 1.50x", "never: above 4x"]
    assert list(lines[0].x) == [0.0, 1.0, 2.0, 4.0] and list(lines[0].y) == [1.0, 0.5, -0.5, -1.0]
    marks = [trace for trace in figure.data if trace.mode == "markers+text"]
    assert len(marks) == 1 and list(marks[0].x) == [pytest.approx(1.5)] and list(marks[0].y) == [0.0]
    assert list(marks[0].text) == ["1.50x"]
    assert [shape.y0 for shape in figure.layout.shapes] == [0.0]  # the line at Sharpe 0
    table = costs.breakeven_frame(curves)
    assert table.loc["edge", "breakeven multiple"] == pytest.approx(1.5)
    assert np.isnan(table.loc["never", "breakeven multiple"])
    assert table["breakeven cost"].tolist() == ["1.50x", "above 4x"]


# --------------------------------------------------------------------- pages under AppTest


def test_every_page_renders_without_exceptions(built: Path) -> None:
    at = app_test(built).run()
    assert not at.exception
    assert at.dataframe and len(at.get("plotly_chart")) == 9
    for page in ("significance", "tournament", "training", "data"):
        at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception, page
        assert not at.warning, (page, [w.value for w in at.warning])
        assert at.get("plotly_chart"), page


def assert_titles_clear_of_the_toolbar(at, page: str) -> None:
    """Every chart the page drew has a title on its plot's top edge, below the band at the top that
    Plotly's toolbar covers (`figures.TOOLBAR_PX`); before, titles sat in that band, under it."""
    charts = at.get("plotly_chart")
    assert charts, page
    for drawn in charts:
        layout = json.loads(drawn.proto.spec)["layout"]
        title, where = layout.get("title") or {}, (page, drawn.proto.id)
        assert title.get("text") and title.get("yref") == "paper" and title.get("yanchor") == "bottom", where
        assert title.get("y") == 1 and title.get("xanchor") == "left", where
        assert layout["margin"]["t"] - title["pad"]["b"] - title["font"]["size"] >= figures.TOOLBAR_PX, where


def test_every_charts_title_sits_below_the_toolbar(built: Path) -> None:
    at = app_test(built).run()
    assert_titles_clear_of_the_toolbar(at, "strategies")
    for page in ("significance", "tournament", "training", "data"):
        at.switch_page(f"app_pages/{page}.py").run()
        assert_titles_clear_of_the_toolbar(at, page)


def test_a_page_opened_by_its_link_on_a_fresh_server_runs_through_the_app(tmp_path: Path, monkeypatch) -> None:
    """A fresh session whose first request is a page's link (AppTest: a page switched to before the
    first run) runs dashboards/app.py: the wide layout and the titled sidebar of `PAGES`, then the
    page, the same as a page reached from "/". (With the page scripts in a folder named ``pages/``
    Streamlit ran the page alone: a narrow page and a sidebar of file names.)"""
    import streamlit as st

    from dashboards.app_pages import PAGES

    layouts, sidebars = [], []
    set_page_config, navigation = st.set_page_config, st.navigation

    def recorded_config(*args, **kwargs):
        layouts.append(kwargs.get("layout"))
        return set_page_config(*args, **kwargs)

    def recorded_navigation(pages, **kwargs):
        sidebars.append([page.title for page in pages])
        return navigation(pages, **kwargs)

    monkeypatch.setattr(st, "set_page_config", recorded_config)
    monkeypatch.setattr(st, "navigation", recorded_navigation)
    for page in PAGES[1:]:
        layouts.clear(), sidebars.clear()
        at = app_test(tmp_path)
        at.switch_page(f"app_pages/{page.script}").run()
        assert not at.exception, page
        assert layouts == ["wide"] and sidebars == [[p.title for p in PAGES]], page
        assert [t.value for t in at.title] == [page.title]  # the page itself was drawn


def test_the_dashboards_help_names_every_page(capsys) -> None:
    from dashboards.app_pages import PAGES

    assert cli(["dashboard", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    missing = [page.title for page in PAGES if page.title not in text]
    assert not missing, missing


def test_a_strategys_display_name_is_its_reports_label_and_no_two_read_the_same() -> None:
    report = {
        "strategies": [
            {"name": "best", "label": "PPO best"},
            {"name": "final", "label": "PPO final"},
            {"name": "a", "label": "Oracle"},
            {"name": "b", "label": "Oracle"},
            {"name": "custom"},
        ]
    }
    assert runs.strategy_labels(report) == {
        "best": "PPO best",
        "final": "PPO final",
        "a": "Oracle (a)",
        "b": "Oracle (b)",
        "custom": "custom",
    }


def test_every_page_shows_a_strategy_by_the_one_display_name(built: Path) -> None:
    """The Strategies page (its metrics, costs, charts and picker) and "Is the edge real?" name each
    strategy alike: `runs.strategy_labels`, report.json's labels ("PPO best", not ``best``)."""
    report = report_of(built / "ppo")
    shown = [runs.strategy_labels(report)[name] for name in report["order"]]
    assert "best" not in shown and len(set(shown)) == len(shown)
    at = app_test(built).run()
    assert not at.exception
    assert list(at.dataframe[0].value.index) == shown  # the metrics
    assert list(next(d.value for d in at.dataframe if "unfilled share" in d.value.columns).index) == shown
    assert [trace.name for trace in chart(at, "equity").data] == shown
    assert strategies(at).options == shown  # the picker offers the labels (its values stay the names)
    assert at.selectbox(key="heatmap_strategy").value == shown[0]
    at.switch_page("app_pages/significance.py").run()
    at.selectbox(key="significance_run").set_value("ppo").run()
    assert list(at.dataframe[0].value.index) == shown


def test_the_table_shows_report_json_numbers_and_follows_the_selection(built: Path) -> None:
    at = app_test(built).run()
    report = report_of(built / "ppo")
    table = at.dataframe[0].value
    shown = runs.strategy_labels(report)
    assert list(table.index) == [shown[name] for name in report["order"]]
    labels = {key: label for key, label in metrics.METRIC_LABELS.items()}
    for name in report["order"]:
        assert table.loc[shown[name], labels["sharpe_ratio"]] == report["metrics"][name]["sharpe_ratio"]
        assert table.loc[shown[name], labels["max_drawdown"]] == report["metrics"][name]["max_drawdown"]
    strategies(at).set_value(["best", "equal_weight"]).run()
    assert sorted(at.dataframe[0].value.index) == sorted([shown["best"], shown["equal_weight"]])


def test_a_runs_other_reports_are_listed_beside_its_own_and_show_their_numbers(runs_copy: Path) -> None:
    """A validation-period backtest goes to ``reports/validation/``; both pages offer it
    beside the run's own report, and show its report.json's numbers."""
    assert cli(["backtest", str(runs_copy / "ppo"), "--period", "validation", "--no-tear-sheet", "--no-breakeven"]) == 0
    other = runs_copy / "ppo" / "reports" / "validation"
    report = report_of(other)
    assert report["period"]["name"] == "validation" and report_of(runs_copy / "ppo")["period"]["name"] == "test"
    at = app_test(runs_copy).run()
    runs_widget = at.sidebar.multiselect(key="runs")
    assert runs_widget.options.index("ppo") < runs_widget.options.index("ppo/reports/validation")
    runs_widget.set_value(["ppo/reports/validation"]).run()
    assert not at.exception
    table = at.dataframe[0].value
    label, shown = metrics.METRIC_LABELS["sharpe_ratio"], runs.strategy_labels(report)
    assert {name: table.loc[shown[name], label] for name in report["order"]} == {
        name: report["metrics"][name]["sharpe_ratio"] for name in report["order"]
    }
    at.switch_page("app_pages/significance.py").run()
    assert "ppo/reports/validation" in at.sidebar.selectbox(key="significance_run").options


def test_the_strategies_page_shows_and_offers_each_trade_list(built: Path) -> None:
    report = report_of(built / "ppo")
    at = app_test(built).run()
    assert not at.exception
    options = next(w for w in at.selectbox if w.label == "Strategy").options  # keyed on the runs picked
    assert len(options) == len([k for k in report["files"] if k.startswith("trades:")])
    shown = next(d.value for d in at.dataframe if "ticker" in d.value.columns)
    strategy = {label: name for name, label in runs.strategy_labels(report).items()}[options[0]]
    name = report["files"][f"trades:{strategy}"]
    written = pd.read_parquet(built / "ppo" / name)
    assert len(shown) == min(len(written), 1000) and list(shown.columns) == list(written.columns)
    assert any(b.label.startswith("Download the trade list") for b in at.get("download_button"))


def test_the_significance_page_shows_report_json_evidence_and_the_tournaments_trials(built: Path) -> None:
    at = app_test(built).run()
    at.switch_page("app_pages/significance.py").run()
    at.selectbox(key="significance_run").set_value("tour").run()
    assert not at.exception
    report = report_of(built / "tour")
    labels = {s["name"]: s["label"] for s in report["strategies"]}
    table = at.dataframe[0].value
    assert list(table.index) == [labels[name] for name in report["order"]]
    for name in report["order"]:
        assert table.loc[labels[name], "verdict"] == report["evidence"][name]["sentence"]
    assert report["selection"]["n_trials"] == len(pd.read_parquet(built / "tour" / "trials.parquet"))
    assert any(f"({report['selection']['n_trials']} trials)" in h.value for h in at.subheader)
    charts = at.get("plotly_chart")
    assert len(charts) == 2  # the intervals and the trials (too few days for PBO's blocks)
    winner = report["selection"]["winner"]
    drawn = [shape["y0"] for shape in json.loads(charts[1].proto.spec)["layout"].get("shapes", [])]
    expected = [
        winner[key] for key in ("expected_max_sharpe_null", "expected_max_sharpe") if winner.get(key) is not None
    ]
    # report.json's lines only, never recomputed: the tiny run's 2 validation days give none
    assert drawn == pytest.approx(expected)


def _decoded(value):
    """Plotly's JSON with its typed arrays ({"dtype", "bdata"[, "shape"]}) turned back into lists."""
    import base64

    if isinstance(value, dict) and "bdata" in value and "dtype" in value:
        array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        shape = value.get("shape")
        return (array.reshape([int(n) for n in str(shape).split(",")]) if shape else array).tolist()
    if isinstance(value, dict):
        return {k: _decoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    return value


def chart(at, key: str):
    """The Plotly figure the page drew in its chart with widget key `key`."""
    import plotly.graph_objects as go

    found = [c for c in at.get("plotly_chart") if c.proto.id.endswith(f"-{key}")]
    assert len(found) == 1, key
    return go.Figure(_decoded(json.loads(found[0].proto.spec)))


def test_the_costs_section_shows_report_json_costs_and_breakeven(built: Path) -> None:
    at = app_test(built).run()
    assert not at.exception
    report = report_of(built / "ppo")
    order, label = report["order"], runs.strategy_labels(report)
    shown = [label[name] for name in order]
    bars = chart(at, "costs").data
    assert [trace.name for trace in bars] == ["commission", "spread", "impact", "borrow"]
    for trace in bars:
        assert list(trace.x) == shown
        assert list(trace.y) == [report["costs"][name][f"{trace.name}_bps"] for name in order]
    lines = [t for t in chart(at, "breakeven").data if t.mode == "lines+markers"]
    assert [t.name for t in lines] == [f"{label[name]}: {report['breakeven'][name]['text']}" for name in order]
    for trace, name in zip(lines, order):
        assert list(trace.x) == report["breakeven"][name]["multiples"]
        assert list(trace.y) == report["breakeven"][name]["sharpe"]
    table = next(d.value for d in at.dataframe if "unfilled share" in d.value.columns)
    assert list(table.index) == shown
    for name in order:
        assert table.loc[label[name], "unfilled share"] == report["costs"][name]["unfilled_share"]
        assert table.loc[label[name], "total (bp)"] == report["costs"][name]["costs_bps"]
        assert table.loc[label[name], "breakeven cost"] == report["breakeven"][name]["text"]
    # the tournament's own final backtest reports every strategy's breakeven, as `trader backtest` does
    tour = report_of(built / "tour")
    assert set(tour["breakeven"]) == set(tour["costs"]) == set(tour["order"])
    at.multiselect(key="runs").set_value(["tour"]).run()
    assert not at.exception and chart(at, "costs").data
    lines = [t for t in chart(at, "breakeven").data if t.mode == "lines+markers"]
    label = runs.strategy_labels(tour)
    assert [t.name for t in lines] == [f"{label[name]}: {tour['breakeven'][name]['text']}" for name in tour["order"]]


def formats_shown(table) -> dict[str, str]:
    """Column -> the number format a page's st.dataframe gives it (its column config)."""
    config = json.loads(table.proto.columns or "{}")
    return {
        str(column.get("label", key)): column.get("type_config", {}).get("format")
        for key, column in config.items()
        if column.get("type_config", {}).get("format")
    }


def test_the_costs_and_significance_tables_read_as_money_percentages_and_ratios(built: Path) -> None:
    """No internal column names (``interval_analytic_low``) and no raw floats (82423.2171): every
    number column of both tables has a readable name and a format, money with separators and cents."""
    from dashboards import costs, significance

    at = app_test(built).run()
    table = next(d for d in at.dataframe if "unfilled share" in d.value.columns)
    numeric = [c for c in table.value.columns if pd.api.types.is_numeric_dtype(table.value[c])]
    shown = formats_shown(table)
    assert set(numeric) <= set(shown), set(numeric) - set(shown)
    assert shown["costs"] == shown["value traded"] == "accounting" and shown["unfilled share"] == "percent"
    assert shown["total (bp)"] == "%.2f"
    at.switch_page("app_pages/significance.py").run()
    table = at.dataframe[0]
    assert list(table.value.columns) == list(significance.COLUMNS.values())
    assert not [c for c in table.value.columns if "_" in c]
    shown = formats_shown(table)
    assert shown["Sharpe ratio"] == "%.2f" and shown["PSR: P[Sharpe > 0]"] == "percent"
    numeric = [c for c in table.value.columns if pd.api.types.is_numeric_dtype(table.value[c])]
    assert set(numeric) <= set(shown), set(numeric) - set(shown)
    report = report_of(built / "ppo")
    frame = costs.display_costs(costs.cost_frame(report["costs"]))
    assert set(costs.cost_formats(frame)) == set(frame.columns)


def test_a_backtest_without_cost_multiples_shows_its_costs_and_says_why_no_breakeven(runs_copy: Path) -> None:
    run = runs_copy / "ppo"
    report = report_of(run)
    report["breakeven"] = {}  # as `trader backtest --no-breakeven` writes it
    (run / "report.json").write_text(json.dumps(report))
    at = app_test(runs_copy).run()
    assert not at.exception and chart(at, "costs").data
    assert not [c for c in at.get("plotly_chart") if c.proto.id.endswith("-breakeven")]
    assert any("no breakeven cost" in c.value for c in at.caption)


def test_an_older_run_says_it_has_no_costs_and_draws_net_exposure_only(runs_copy: Path) -> None:
    import pyarrow.parquet as pq

    run = runs_copy / "ppo"
    report = report_of(run)
    for key in ("costs", "cost_model", "breakeven"):
        del report[key]
    (run / "report.json").write_text(json.dumps(report))
    for path in (run / "backtests").glob("*.parquet"):
        table = pq.read_table(path)
        pq.write_table(table.drop(["gross_value"]), path)
    at = app_test(runs_copy).run()
    assert not at.exception
    assert [m for m in messages(at) if "no costs recorded" in m] == [
        "no costs recorded in report.json (written by an older version): run `trader backtest RUN_DIR --overwrite` on it again."
    ]
    assert not [c for c in at.get("plotly_chart") if c.proto.id.endswith(("-costs", "-breakeven"))]
    names = [trace.name for trace in chart(at, "exposure").data]
    assert names == [f"{runs.strategy_labels(report)[name]}: net" for name in report["order"]]
    assert any("Net exposure only" in c.value for c in at.caption)


def test_a_dollar_neutral_book_shows_gross_exposure_while_net_is_zero(tmp_path: Path) -> None:
    """A constructed long-short book (weights +-0.25 on four stocks, rebalanced every bar):
    net exposure about 0, gross about 1, each the backtest's own per-bar records."""
    import torch
    from golden.case import session_panel

    from market_envs.config import EnvConfig
    from trader.backtesting import ActionSchedule, BacktestConfig, run_backtest

    data = session_panel(n_tickers=4, n_days=3, bars_per_day=10, seed=8, benchmark=False)
    actions = torch.tensor([[0.25, -0.25, 0.25, -0.25]]).expand(data.num_bars, 4)
    rules = EnvConfig(action_mode="weights", short_selling=True, features=("close",))
    config = BacktestConfig(tear_sheet=False, buy_cost=0.0, sell_cost=0.0, policy_env=rules)
    result = run_backtest(
        data, {"neutral": ActionSchedule(actions)}, baselines=[], config=config, run_dir=tmp_path / "runs" / "neutral"
    )
    at = app_test(tmp_path / "runs").run()
    assert not at.exception
    traces = {trace.name: trace for trace in chart(at, "exposure").data}
    assert set(traces) == {"neutral: net", "neutral: gross"}
    net, gross = np.asarray(traces["neutral: net"].y), np.asarray(traces["neutral: gross"].y)
    assert len(net) == 3 and np.abs(net).max() < 0.01 and gross.min() > 0.98
    last = result.series["neutral"].iloc[-1]
    assert gross[-1] == pytest.approx(last["gross_value"] / last["value"], rel=1e-12)
    assert net[-1] == pytest.approx(1.0 - last["cash"] / last["value"], rel=1e-12, abs=1e-15)


def test_a_date_range_recomputes_and_several_runs_are_labelled(built: Path) -> None:
    at = app_test(built).run()
    report = report_of(built / "ppo")
    _, last = figures.period_dates(report)
    next(w for w in at.sidebar.date_input if w.label == "Dates").set_value((last.date(), last.date())).run()
    assert not at.exception
    assert (at.dataframe[0].value[metrics.METRIC_LABELS["days"]] == 1).all()
    at.multiselect(key="runs").set_value(["ppo", "tour"]).run()
    assert not at.exception
    index = list(at.dataframe[0].value.index)
    assert any(i.startswith("ppo: ") for i in index) and any(i.startswith("tour: ") for i in index)
    formed = bool(json.loads((built / "tour" / "selection.json").read_text())["members"])
    ppo, tour = (runs.strategy_labels(report_of(built / run)) for run in ("ppo", "tour"))
    assert f"tour: {tour['best']}" in index
    assert (f"tour: {tour.get('ensemble')}" in index) == formed  # no ensemble row unless one was formed
    strategies(at).set_value(["best"]).run()
    assert list(at.dataframe[0].value.index) == [f"ppo: {ppo['best']}", f"tour: {tour['best']}"]


def test_an_empty_runs_folder_says_so_on_every_page(tmp_path: Path) -> None:
    at = app_test(tmp_path).run()
    assert not at.exception and any("No backtest in" in m for m in messages(at))
    for page, text in (
        ("significance", "No report.json in"),
        ("tournament", "No tournament in"),
        ("experiment", "No experiment in"),
        ("training", "No training run in"),
        ("data", "No dataset.json"),
    ):
        at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception and any(text in m for m in messages(at)), page


def test_a_corrupt_report_is_named_and_the_other_runs_still_show(runs_copy: Path) -> None:
    (runs_copy / "ppo" / "report.json").write_text("{not json")
    at = app_test(runs_copy).run()
    at.multiselect(key="runs").set_value(["ppo", "tour"]).run()
    assert not at.exception
    assert any("ppo/report.json: not valid JSON" in w.value for w in at.warning)
    best = runs.strategy_labels(report_of(runs_copy / "tour"))["best"]
    assert best in at.dataframe[0].value.index  # the tournament's strategies, alone: no run prefix


def test_a_corrupt_series_file_is_named_and_the_rest_is_drawn(runs_copy: Path) -> None:
    path = runs_copy / "ppo" / "backtests" / "final.parquet"
    path.write_bytes(b"PAR1 truncated")
    at = app_test(runs_copy).run()
    assert not at.exception
    assert any("final.parquet: not a readable Parquet file" in w.value for w in at.warning)
    label = runs.strategy_labels(report_of(runs_copy / "ppo"))
    assert label["final"] not in at.dataframe[0].value.index and label["best"] in at.dataframe[0].value.index


def test_a_half_written_tournament_names_the_missing_file(runs_copy: Path) -> None:
    (runs_copy / "tour" / "pods.parquet").unlink()
    (runs_copy / "tour" / "leaderboard.json").write_text('{"format_version": 1')
    at = app_test(runs_copy)
    at.run()
    at.switch_page("app_pages/tournament.py").run()
    assert not at.exception
    texts = [w.value for w in at.warning]
    assert any("leaderboard.json: not valid JSON" in t for t in texts)
    assert any("pods.parquet: not found" in t for t in texts)


def test_a_run_without_a_backtest_shows_on_the_training_page_only(tmp_path: Path, built: Path) -> None:
    target = tmp_path / "runs" / "trained"
    target.mkdir(parents=True)
    for name in ("config.toml", "metrics.parquet", "dataset.json"):
        shutil.copy(built / "ppo" / name, target / name)
    at = app_test(tmp_path / "runs").run()
    assert not at.exception and any("No backtest in" in m for m in messages(at))
    at.switch_page("app_pages/training.py").run()
    assert not at.exception and at.get("plotly_chart")
    at.switch_page("app_pages/data.py").run()
    assert not at.exception and not at.warning


def test_the_training_pages_best_validation_is_the_score_that_chose_best_json(built: Path) -> None:
    at = app_test(built).run()
    at.switch_page("app_pages/training.py").run()
    assert not at.exception
    table = next(d.value for d in at.dataframe if "best validation score" in d.value.columns)
    best = json.loads((built / "ppo" / "checkpoints" / "best.json").read_text())["info"]["validation"]
    assert table.loc["ppo", "best validation score"] == pytest.approx(best["score"], rel=1e-12)
    assert best["score"] == best["bar_sharpe"]  # a market run's score: the Sharpe ratio of its validation bars


def test_tournament_pods_join_the_training_page(built: Path) -> None:
    at = app_test(built).run()
    at.switch_page("app_pages/training.py").run()
    at.checkbox(key="include_pods").check().run()
    options = at.multiselect(key="training_runs").options
    assert any(option.startswith("tour/p0") for option in options)


# --------------------------------------------------------------------- the command


def test_cli_dashboard_bad_input_exits_2_with_one_line(tmp_path: Path, capsys) -> None:
    assert cli(["dashboard", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a directory" in err
    assert cli(["dashboard", str(tmp_path), "--port", "70000"]) == 2


def test_cli_dashboard_runs_the_app_with_streamlit(tmp_path: Path) -> None:
    from podracer.cli.dashboard import APP as CLI_APP, streamlit_command

    command = streamlit_command(tmp_path, 8765, "127.0.0.1")
    assert CLI_APP == APP and str(APP) in command and "8765" in command


def suggested_commands() -> list[tuple[str, str]]:
    """Every ``trader ...`` command the pages show: in backticks, and each page's ``HINT`` (page, command)."""
    import re

    from dashboards.app_pages import hints

    found = list(hints().items())
    for page in sorted((APP.parent / "app_pages").glob("*.py")) + [APP]:
        for command in re.findall(r"`(trader [^`{]+)`", page.read_text()):
            found.append((page.name, command))
    return found


LEARNING_HINTS = ("training.py", "tournament.py", "walkforward.py")
"""The pages whose empty-page command trains something."""


def test_each_empty_page_shows_its_hint_and_each_learning_hint_has_the_preset_and_a_budget(tmp_path: Path) -> None:
    """A hint that trains uses the market preset (the env's own defaults learn nothing on a laptop's
    budget) and states its budget: steps, or a time budget with pods of a stated size."""
    from dashboards.app_pages import PAGES, hints

    found = hints()
    assert set(LEARNING_HINTS) <= set(found)
    for script in LEARNING_HINTS:
        words = found[script].split()
        assert words[words.index("--preset") + 1] == "market", script
        assert "--steps" in words or {"--time-budget", "--pod-steps"} <= set(words), script
        assert "--learner" not in words or words[words.index("--learner") + 1] != "tournament", script
    at = app_test(tmp_path).run()
    for page in PAGES:
        if page.script in found:
            at.switch_page(f"app_pages/{page.script}").run()
            assert any(f"`{found[page.script]}`" in m for m in messages(at)), page


def test_every_command_a_page_suggests_parses(tmp_path: Path) -> None:
    """The hints' commands are real: each parses with the CLI's own parser (placeholders
    filled in; a command of a group, ``trader experiment podracer ...``, with its own
    parser), and a bare ``trader X`` names a command that exists."""
    import click
    import typer

    from podracer.cli import app

    group = typer.main.get_command(app)
    commands = suggested_commands()
    assert len(commands) >= 9 and any(page == "experiment.py" for page, _ in commands)
    fill = {"RUN_DIR": str(tmp_path / "run"), "RUNS_DIR": str(tmp_path)}
    for page, text in commands:
        words = [fill.get(word, word) for word in text.split()[1:]]
        command = group.get_command(click.Context(group), words[0])
        assert command is not None, f"{page}: `{text}` names no command"
        # a group lists commands (typer carries its own click: isinstance(command, click.Group) is False)
        while hasattr(command, "list_commands") and len(words) > 1 and not words[1].startswith("-"):
            words = words[1:]
            command = command.get_command(click.Context(command), words[0])
            assert command is not None, f"{page}: `{text}` names no command"
        if len(words) > 1:
            command.make_context(words[0], words[1:])  # raises click's UsageError when it does not parse


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_cli_dashboard_on_a_busy_port_exits_2_with_one_line_and_prints_no_url(tmp_path: Path, capsys) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli(["dashboard", str(tmp_path), "--port", str(port)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and f"--port {port}" in err and "in use" in err


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_stopping_trader_dashboard_stops_streamlit_and_frees_the_port(tmp_path: Path, stop: str) -> None:
    """SIGTERM is handled (the child is terminated); SIGKILL cannot be, so the child's
    parent-death signal stops it. Either way no Streamlit process keeps the port."""
    import signal

    import psutil

    parent, port = serve_dashboard(tmp_path)
    children: list = []
    try:
        children = psutil.Process(parent.pid).children(recursive=True)
        assert children, "Streamlit runs as a child of trader dashboard"
        parent.send_signal(getattr(signal, stop))
        parent.wait(timeout=20)
        gone, alive = psutil.wait_procs(children, timeout=20)
        assert not alive and not _listening(port)
    finally:  # a failing run must not leave its Streamlit behind
        parent.kill()
        for child in children:
            if child.is_running():
                child.kill()


# --------------------------------------------------------------------- a real browser


@pytest.mark.browser
def test_every_page_draws_in_headless_chromium(built: Path, tmp_path: Path) -> None:
    """`make screenshots`' code path on the tiny runs: every page draws, none shows an exception."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))  # a developer's tool, outside the package
    import dashboard_screenshots as screenshots

    if screenshots.find_browser() is None:
        pytest.skip("chromium and chromedriver are not installed (make screenshots installs them)")
    pytest.importorskip("selenium")
    shots = screenshots.shoot(built, tmp_path)
    assert [shot.page for shot in shots] == list(screenshots.PAGES)
    for shot in shots:
        assert not shot.exceptions, (shot.page, shot.exceptions)
        assert not shot.warnings, (shot.page, shot.warnings)
        assert shot.path.stat().st_size > 20_000  # a drawn page, not a blank one


# --------------------------------------------------------------------- walk-forward


@pytest.fixture(scope="module")
def walked(tmp_path_factory) -> Path:
    """A runs folder holding ``wf``: a real PPO walk-forward of four folds, on the
    walk-forward tests' daily recipe and budget."""
    from test_walkforward import BUDGET, FOLDS, SMALL_PPO, daily_frame, write_daily_recipe

    from podracer.walkforward import walk_forward

    root = tmp_path_factory.mktemp("walked")
    os.environ["PODRACER_DATA_DIR"] = str(root / "data")
    recipe = write_daily_recipe(root / "recipe", daily_frame())
    walk_forward(root / "runs" / "wf", str(recipe), FOLDS, "ppo", seed=3, algo_config=SMALL_PPO, **BUDGET)
    return root / "runs"


def test_find_runs_lists_a_walk_forward_and_its_folds_at_any_depth(walked: Path) -> None:
    found = [run.name for run in runs.find_runs(walked)]
    assert found == ["wf", "wf/folds/0", "wf/folds/1", "wf/folds/2", "wf/folds/3"]
    assert [run.name for run in runs.find_runs(walked / "wf")] == found  # the walk-forward given as runs folder
    listed = {run.name: run for run in runs.find_runs(walked)}
    assert listed["wf"].has_walkforward and not listed["wf"].has_report
    assert (
        listed["wf/folds/2"].has_report
        and listed["wf/folds/2"].has_training
        and not listed["wf/folds/2"].has_walkforward
    )


def test_the_walk_forward_views_draw_walkforward_json_and_stitched_parquet(walked: Path) -> None:
    from dashboards import walkforward as views

    summary = json.loads((walked / "wf" / "walkforward.json").read_text())
    figure = views.timeline_figure(views.window_frame(summary["folds"]))
    for trace in figure.data:  # each bar runs from the window's first bar to its last
        starts = pd.to_datetime(list(trace.base))
        ends = starts + pd.to_timedelta(np.asarray(trace.x, dtype=float), unit="ms")
        expected = [[pd.Timestamp(t).tz_localize(None) for t in row["windows"][trace.name]] for row in summary["folds"]]
        assert [[s, e] for s, e in zip(starts, ends)] == expected
        assert list(trace.y) == [f"fold {row['fold']}" for row in summary["folds"]]
    stitched = pd.read_parquet(walked / "wf" / "stitched.parquet")
    values = views.stitched_values(stitched)  # daily bars: every bar is its session's last
    assert list(values.columns) == list(dict.fromkeys(stitched["strategy"])) and "ppo" in values.columns
    for name in values.columns:
        assert values[name].to_numpy().tolist() == stitched.loc[stitched["strategy"] == name, "value"].tolist()
    starts = views.fold_starts(stitched)
    assert [s.strftime("%Y-%m-%d") for s in starts] == [row["windows"]["test"][0][:10] for row in summary["folds"]]
    winners = views.winners_frame(summary["folds"])
    assert list(winners.index) == [0, 1, 2, 3] and "pod" not in winners.columns
    for row in summary["folds"]:
        assert winners.loc[row["fold"], "test Sharpe"] == row["test_sharpe"]
        assert winners.loc[row["fold"], "validation score"] == row["validation_sharpe"]
        assert winners.loc[row["fold"], "equal_weight test Sharpe"] == row["equal_weight_test_sharpe"]
        assert json.loads(winners.loc[row["fold"], "hyperparameters"]) == row["hyperparameters"]
    table = views.stitched_metrics(summary["stitched"])
    assert (
        table.loc["ppo", metrics.METRIC_LABELS["sharpe_ratio"]] == summary["stitched"]["metrics"]["ppo"]["sharpe_ratio"]
    )


def plotted(values) -> list:
    """A trace's values as the chart's JSON holds them (Plotly packs number arrays as base64)."""
    import base64

    if isinstance(values, dict):
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    return list(values)


def test_the_walk_forward_page_shows_the_librarys_numbers(walked: Path) -> None:
    at = app_test(walked).run()
    at.switch_page("app_pages/walkforward.py").run()
    assert not at.exception and not at.warning
    summary = json.loads((walked / "wf" / "walkforward.json").read_text())
    charts = at.get("plotly_chart")
    assert len(charts) == 3  # the timeline, the stitched equity, the intervals
    assert_titles_clear_of_the_toolbar(at, "walkforward")
    equity = json.loads(charts[1].proto.spec)["data"]
    stitched = pd.read_parquet(walked / "wf" / "stitched.parquet")
    for trace in equity:
        assert plotted(trace["y"]) == stitched.loc[stitched["strategy"] == trace["name"], "value"].tolist()
    assert sorted(t["name"] for t in equity) == sorted(set(stitched["strategy"]))
    winners = at.dataframe[0].value
    assert winners["test Sharpe"].tolist() == [row["test_sharpe"] for row in summary["folds"]]
    assert winners["winner"].tolist() == ["ppo"] * 4
    table = at.dataframe[1].value
    assert (
        table.loc["ppo", metrics.METRIC_LABELS["sharpe_ratio"]] == summary["stitched"]["metrics"]["ppo"]["sharpe_ratio"]
    )
    shown = " ".join(m.value for m in at.markdown)
    for name, evidence in summary["stitched"]["evidence"].items():
        assert f"{name}: {evidence['sentence']}" in shown
    # a walk-forward still running: its finished folds, nothing stitched
    partial = walked.parent / "partial"
    shutil.copytree(walked / "wf", partial / "wf")
    for name in ("walkforward.json", "walkforward.md", "stitched.parquet"):
        (partial / "wf" / name).unlink()
    shutil.rmtree(partial / "wf" / "folds" / "3")
    at = app_test(partial).run()
    at.switch_page("app_pages/walkforward.py").run()
    assert not at.exception and any("3 fold(s) done" in m for m in messages(at))
    assert len(at.get("plotly_chart")) == 1 and at.dataframe[0].value.index.tolist() == [0, 1, 2]


def test_an_empty_runs_folder_says_so_on_the_walk_forward_page(tmp_path: Path) -> None:
    at = app_test(tmp_path).run()
    at.switch_page("app_pages/walkforward.py").run()
    assert not at.exception and any("No walk-forward in" in m for m in messages(at))
