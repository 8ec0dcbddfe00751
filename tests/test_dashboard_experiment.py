"""The dashboard's page of the seed paper's experiment and its view functions.

The experiment's run directory is written by `podracer.experiment`'s own functions without
training: its config (`claim`), its data set recipe (`experiment_recipe`), the test
period's backtest of the benchmark and equal weight (`run_backtest`, one of them with
trials so that its DSR is filled), Table 2 from that backtest (`table2`, with an extra cost
model's column) and a hand-made Figure 7 frame, both written by `write_outputs`: the files
are in the shapes a real experiment writes, and cannot drift from them.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dashboards import experiment as views
from dashboards import runs
from market_fixtures import TINY_DAILY_RECIPE
from test_dashboard import assert_titles_clear_of_the_toolbar
from trader import rundir

APP = Path(__file__).resolve().parents[1] / "dashboards" / "app.py"
PAGE = "app_pages/experiment.py"


FIGURE = pd.DataFrame(
    {
        "learner": ["tournament"] * 3 + ["vanilla PPO"] * 2,
        "seconds": [30.0, 60.0, 90.0, 30.0, 60.0],
        "cum_return": [0.05, 0.12, 0.18, -0.02, 0.04],
    }
)
"""Figure 7's points: two learners, snapshots every 30 seconds."""


@pytest.fixture(scope="module")
def experiment_runs(tmp_path_factory) -> Path:
    """A runs folder with ``paper`` (a finished experiment) and ``running`` (its config only)."""
    from market_envs.data import load
    from market_envs.data.recipes import write_recipe
    from trader.backtesting.config import BacktestConfig
    from trader.backtesting.engine import run_backtest
    from trader.backtesting.evidence import Trials
    from podracer.experiment import ExperimentConfig, claim, experiment_recipe, table2, write_outputs

    root = tmp_path_factory.mktemp("dashboard-experiment")
    os.environ["PODRACER_DATA_DIR"] = str(root / "data")
    recipe = root / "tiny.toml"
    recipe.write_text(TINY_DAILY_RECIPE)
    run_dir = root / "runs" / "paper"
    config = ExperimentConfig(
        run_dir=str(run_dir),
        dataset=str(recipe),
        pods=2,
        pod_steps=512,
        years=2.0,
        extra_costs=("institutional",),
        libraries=("sb3",),
    )
    claim(config, run_dir)
    write_recipe(experiment_recipe(config), run_dir / rundir.EXPERIMENT_DATASET)
    data = load(str(run_dir / rundir.EXPERIMENT_DATASET))
    base = BacktestConfig(
        initial_cash=config.initial_cash, buy_cost=config.cost, sell_cost=config.cost, tear_sheet=False
    )
    trials = {"equal_weight": Trials(sharpes=np.array([0.4, 1.1, -0.3]))}
    result = run_backtest(
        data, {}, baselines=["benchmark", "equal_weight"], period="test", config=base, run_dir=run_dir, trials=trials
    )
    extra = {"institutional": result.metrics["sharpe_ratio"] - 0.25}
    write_outputs(run_dir, config, table2(result, extra), FIGURE)
    claim(
        ExperimentConfig(run_dir=str(root / "runs" / "running"), dataset=str(recipe), minutes=5.0),
        root / "runs" / "running",
    )
    return root / "runs"


@pytest.fixture
def runs_copy(experiment_runs: Path, tmp_path: Path) -> Path:
    """A private copy of the runs folder, for tests that damage files."""
    target = tmp_path / "runs"
    shutil.copytree(experiment_runs, target)
    return target


def written(runs_dir: Path) -> dict:
    return json.loads((runs_dir / "paper" / rundir.EXPERIMENT_JSON).read_text())


def app_test(runs_dir: Path, choose: str | None = None):
    """The experiment page over ``runs_dir``, run (``choose``: the experiment picked in the sidebar)."""
    from streamlit.testing.v1 import AppTest

    os.environ["PODRACER_RUNS_DIR"] = str(runs_dir)
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page(PAGE).run()
    if choose is not None:
        at.selectbox(key="experiment_run").select(choose).run()
    assert not at.exception, at.exception
    return at


def same(a: float, b: float | None) -> bool:
    return (b is None and math.isnan(a)) or a == b


# --------------------------------------------------------------------- finding and reading


def test_an_experiment_is_a_kind_of_run_finished_or_running(experiment_runs: Path) -> None:
    found = {run.name: run for run in runs.find_runs(experiment_runs)}
    assert set(found) == {"paper", "running"}  # "running" holds only experiment.toml
    assert found["paper"].has_experiment and found["paper"].has_report and found["running"].has_experiment
    assert not found["running"].has_report and not found["running"].has_training


def test_every_file_the_experiments_writers_wrote_is_documented(experiment_runs: Path) -> None:
    from test_rundir import assert_every_file_is_documented

    assert_every_file_is_documented(experiment_runs / "paper")


def test_the_loaders_name_the_file_that_is_wrong(runs_copy: Path) -> None:
    run = runs_copy / "paper"
    assert runs.load_experiment(run)["table"] == written(runs_copy)["table"]
    (run / rundir.EXPERIMENT_JSON).write_text('{"format_version": 1, "config": {}, "table": [{"strategy": "x"}]}')
    with pytest.raises(runs.RunFileError, match=r"paper/experiment.json: no 'source' entry"):
        runs.load_experiment(run)
    (run / rundir.EXPERIMENT_JSON).write_text('{"format_version": 2, "config": {}, "table": []}')
    with pytest.raises(runs.RunFileError, match=r"experiment.json: format_version 2, this library reads 1"):
        runs.load_experiment(run)
    (run / rundir.EXPERIMENT_FIGURE).write_bytes(b"PAR1 half")
    with pytest.raises(runs.RunFileError, match=r"figure7.parquet: not a readable Parquet file"):
        runs.load_experiment_figure(run)
    (run / rundir.EXPERIMENT).write_text("dataset = ")
    with pytest.raises(runs.RunFileError, match=r"experiment.toml: not valid TOML"):
        runs.load_experiment_config(run)
    assert runs.load_experiment_dataset(runs_copy / "running") == {}  # not written yet


# --------------------------------------------------------------------- the view functions: known answers


def test_table_2_is_experiment_json_s_rows_with_the_papers_marked(experiment_runs: Path) -> None:
    rows = written(experiment_runs)["table"]
    table = views.table_frame(rows)
    labels = views.table_labels(rows)
    assert list(table.index) == [row["strategy"] for row in rows]
    assert list(table.columns) == list(labels.values())
    assert list(labels.values())[:6] == [
        "Source",
        "Cumulative return",
        "Annual return",
        "Annual volatility",
        "Max drawdown",
        "Sharpe ratio",
    ]
    assert {"PSR", "DSR", "Trials", "Sharpe (institutional)"} <= set(table.columns)
    for row, (_, shown) in zip(rows, table.iterrows(), strict=True):
        assert shown["Source"] == row["source"]
        for key, label in labels.items():
            if key != "source":
                assert same(shown[label], row[key]), (row["strategy"], key)
    paper = table[table["Source"] == "the paper"]
    assert list(paper.index) == ["Tournament (the paper)", "Vanilla PPO (the paper)"]
    assert views.paper_rows(rows) == list(paper.index)
    assert paper.loc["Tournament (the paper)", "Cumulative return"] == 3.62 and paper["PSR"].isna().all()
    ours = table[table["Source"] == "ours"]
    assert len(ours) == 2 and ours["PSR"].notna().all() and ours["Trials"].tolist().count(3.0) == 1
    formats = views.table_formats(table)
    assert (
        formats["Cumulative return"] == "percent" and formats["Sharpe ratio"] == "%.2f" and formats["Trials"] == "%.0f"
    )
    assert "Source" not in formats


def test_the_settings_are_experiment_toml_s_and_the_split_its_recipes(experiment_runs: Path) -> None:
    config = rundir.read_toml(experiment_runs / "paper" / rundir.EXPERIMENT)
    dataset = rundir.read_toml(experiment_runs / "paper" / rundir.EXPERIMENT_DATASET)
    settings = views.settings_frame(config, dataset)["Value"]
    assert settings["Data set"].endswith("tiny.toml, its last 2 years")
    assert settings["Training"] == f"{dataset['start']} until {dataset['train_end']} (exclusive)"
    assert settings["Test (Table 2 and Figure 7)"] == f"{dataset['val_end']} until {dataset['end']} (exclusive)"
    assert settings["Budget of each learner"].startswith("1,024 transitions (the tournament's 2 pods of 512")
    assert settings["Commission per side"] == "0.20%" and settings["Capital"] == "$1,000,000"
    assert settings["Env rules (preset)"] == "market-costs" and settings["Extra cost models"] == "institutional"
    assert settings["Baseline libraries"] == "sb3"
    running = rundir.read_toml(experiment_runs / "running" / rundir.EXPERIMENT)
    shown = views.settings_frame(running, {})["Value"]
    assert shown["Budget of each learner"].startswith("5 minutes of wall-clock") and "Training" not in shown


def test_figure_7_draws_one_line_per_learner_with_the_files_points() -> None:
    figure = views.figure7(FIGURE.sample(frac=1.0, random_state=0))  # any row order
    assert [trace.name for trace in figure.data] == ["tournament", "vanilla PPO"]
    for trace in figure.data:
        rows = FIGURE[FIGURE["learner"] == trace.name]
        assert list(trace.x) == rows["seconds"].tolist() and list(trace.y) == rows["cum_return"].tolist()


# --------------------------------------------------------------------- the page


def table_shown(at) -> pd.DataFrame:
    """The page's Table 2 (AppTest does not expose a dataframe's key: found by its columns)."""
    return next(d.value for d in at.dataframe if "Source" in d.value.columns)


def settings_shown(at) -> pd.DataFrame:
    return next(d.value for d in at.dataframe if list(d.value.columns) == ["Value"])


def chart_lines(at) -> list[str]:
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    return [trace["name"] for trace in spec["data"]]


def test_the_page_shows_the_settings_table_2_and_figure_7(experiment_runs: Path) -> None:
    at = app_test(experiment_runs)
    assert at.title[0].value == "The paper's experiment"
    assert at.selectbox(key="experiment_run").options == ["paper", "running"]
    assert not at.warning
    rows = written(experiment_runs)["table"]
    table = table_shown(at)
    assert list(table.index) == [row["strategy"] for row in rows]
    pd.testing.assert_frame_equal(table, views.table_frame(rows))  # experiment.json's numbers, as they are
    assert table.loc["Vanilla PPO (the paper)", "Source"] == "the paper"
    assert any(
        "are the seed paper's published figures" in c.value and "Vanilla PPO (the paper)" in c.value for c in at.caption
    )
    settings = settings_shown(at)
    assert settings.loc["Commission per side", "Value"] == "0.20%"
    figure = pd.read_parquet(experiment_runs / "paper" / rundir.EXPERIMENT_FIGURE)
    assert chart_lines(at) == sorted(figure["learner"].unique())
    assert_titles_clear_of_the_toolbar(at, "experiment")


def test_an_experiment_still_running_shows_its_settings_and_says_so(experiment_runs: Path) -> None:
    at = app_test(experiment_runs, choose="running")
    assert settings_shown(at).loc["Budget of each learner", "Value"].startswith("5 minutes")
    assert any("running has not finished" in i.value for i in at.info)
    assert not at.get("plotly_chart") and len(at.dataframe) == 1


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda run: (run / rundir.EXPERIMENT_JSON).write_text('{"table": ['), "experiment.json: not valid JSON"),
        (lambda run: (run / rundir.EXPERIMENT_FIGURE).unlink(), "figure7.parquet: not found"),
        (
            lambda run: (run / rundir.EXPERIMENT_FIGURE).write_bytes(b"PAR1"),
            "figure7.parquet: not a readable Parquet file",
        ),
        (lambda run: (run / rundir.EXPERIMENT).write_text("cost = ["), "experiment.toml: not valid TOML"),
    ],
)
def test_a_missing_or_unreadable_file_is_one_problem_line(runs_copy: Path, damage, words: str) -> None:
    damage(runs_copy / "paper")
    at = app_test(runs_copy)
    assert len(at.warning) == 1 and words in at.warning[0].value, [w.value for w in at.warning]
    if "figure7" in words:  # the table still shows
        assert len(table_shown(at)) == len(written(runs_copy)["table"])
    if "experiment.json" in words:  # the figure still shows
        assert chart_lines(at) == ["tournament", "vanilla PPO"]


def test_without_an_experiment_the_page_says_how_to_run_one(tmp_path: Path) -> None:
    from test_dashboard import suggested_commands

    at = app_test(tmp_path)
    hint = next(i.value for i in at.info if "No experiment in" in i.value)
    assert "`trader experiment podracer RUN_DIR" in hint
    assert any(
        page == "experiment.py" and text.startswith("trader experiment podracer") for page, text in suggested_commands()
    )


def test_the_hints_command_runs_up_to_the_training(tmp_path: Path, monkeypatch) -> None:
    """The empty page's command, run through the CLI with the training stubbed out: its
    options make an experiment config, and its data set's window takes the experiment's
    split (`experiment_recipe`: what `run_experiment` checks before it trains)."""
    import podracer.experiment as experiment
    from dashboards.app_pages import hints
    from podracer.cli import main as cli

    hint = hints()[Path(PAGE).name]
    seen = []

    class Stop(Exception):
        pass

    def stub(config, on_progress=None):
        seen.append(config)
        raise Stop

    monkeypatch.setattr(experiment, "run_experiment", stub)
    with pytest.raises(Stop):
        cli([str(tmp_path / "run") if word == "RUN_DIR" else word for word in hint.split()[1:]])
    recipe = experiment.experiment_recipe(seen[0])
    assert seen[0].pods == 6 and recipe.start < recipe.train_end < recipe.val_end < recipe.end
