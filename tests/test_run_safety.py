"""Nothing a user saved is lost: every command that would replace finished work refuses
with one line and exit code 2, leaving every file as it was; ``--overwrite`` replaces a
run whole; a backtest that is not the run's own writes a report of its own.

A module fixture builds one real run directory (a tiny market PPO run, an SB3 baseline
and the run's own report); each test works on a copy of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from market_fixtures import write_tiny_recipe
from trader import rundir
from podracer.cli import main

TINY_PPO = "num_steps = 32\nupdate_epochs = 1\nnum_minibatches = 2\nhidden_sizes = [8]\n"


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("safety")
    os.environ["PODRACER_DATA_DIR"] = str(root / "data")
    (root / "ppo.toml").write_text(TINY_PPO)
    return write_tiny_recipe(root, interval="5min")  # a fifth of the bars: each backtest here is bar by bar


@pytest.fixture(scope="module")
def finished(recipe: Path) -> Path:
    """A finished run: `trader train` (market, tiny), `trader baselines` (SB3 PPO) and its own report."""
    run_dir = recipe.parent / "run"
    assert main(train_args(recipe, run_dir)) == 0
    assert (
        main(["baselines", str(run_dir), "--steps", "64", "--eval-every", "0", "--no-tear-sheet", "--output", "json"])
        == 0
    )
    assert (run_dir / "report.json").is_file() and (run_dir / "baselines" / "sb3-ppo-s0" / "baseline.json").is_file()
    return run_dir


def train_args(recipe: Path, run_dir: Path, *more: str) -> list[str]:
    return [
        "train",
        "--algo",
        "ppo",
        "--dataset",
        str(recipe),
        "--steps",
        "128",
        "--num-envs",
        "2",
        "--eval-every",
        "64",
        "--config",
        str(recipe.parent / "ppo.toml"),
        str(run_dir),
        *more,
    ]


@pytest.fixture
def run(finished: Path, tmp_path: Path) -> Path:
    """A copy of the finished run, to change."""
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def checksums(root: Path) -> dict[str, str]:
    """Every file under ``root`` by its path, with the SHA-256 of its bytes."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def refused(argv: list[str], run: Path, capsys, *needles: str) -> str:
    """``argv`` exits 2 with one line naming the folder and ``needles``, and changes no file of ``run``."""
    before = checksums(run)
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), captured.err
    assert captured.out == ""  # no configuration dump, no progress bar before it
    for needle in needles:
        assert needle in err, err
    assert checksums(run) == before
    return err


# ------------------------------------------------------------------ a refusal per command


def test_train_refuses_a_finished_run(run: Path, recipe: Path, capsys) -> None:
    refused(
        train_args(recipe, run), run, capsys, str(run), "holds a run already", "--overwrite", "another run directory"
    )
    refused(train_args(recipe, run, "--algo", "sac"), run, capsys, "holds a run already")  # nor another algorithm's


def test_baselines_refuse_a_finished_baseline(run: Path, capsys) -> None:
    refused(
        ["baselines", str(run), "--steps", "256", "--no-backtest"],
        run,
        capsys,
        str(run / "baselines" / "sb3-ppo-s0"),
        "finished baseline",
        "--overwrite",
    )
    refused(
        ["baselines", str(run), "--steps", "256", "--no-backtest", "--overwrite"],
        run,
        capsys,
        "--no-backtest would leave",
        "report.json",
    )


def test_backtest_refuses_to_replace_the_runs_own_report(run: Path, capsys) -> None:
    refused(
        ["backtest", str(run), "--no-tear-sheet", "--no-breakeven"],
        run,
        capsys,
        "the run's own report",
        "--overwrite",
        "--report NAME",
    )


def test_tournament_refuses_a_folder_that_holds_a_run(run: Path, capsys) -> None:
    refused(
        ["tournament", str(run), "--env", "Pendulum-v1", "--pods", "1"],
        run,
        capsys,
        str(run),
        "holds a run already",
        "another run directory",
    )


def test_walkforward_refuses_a_folder_that_holds_a_run(run: Path, recipe: Path, capsys) -> None:
    refused(
        [
            "walkforward",
            str(run),
            "--dataset",
            str(recipe),
            "--train",
            "3d",
            "--validation",
            "3d",
            "--test",
            "3d",
            "--learner",
            "ppo",
            "--steps",
            "64",
        ],
        run,
        capsys,
        str(run),
        "holds a run already",
    )


def test_demo_refuses_a_folder_that_holds_a_run(run: Path, capsys) -> None:
    refused(["demo", str(run)], run, capsys, str(run), "holds a run already", "another run directory")


@pytest.mark.parametrize(
    "command",
    [
        ["backtest"],
        ["backtest", "--dataset", "RECIPE"],  # the remedy the old message gave: a baselines-only report written there
        ["act"],
        ["paper", "--broker", "replay", "--max-bars", "1"],
        ["baselines", "--steps", "64", "--dataset", "RECIPE"],
    ],
    ids=["backtest", "backtest-dataset", "act", "paper", "baselines"],
)
def test_a_command_that_reads_one_run_refuses_a_walk_forward_folder(
    command: list[str], finished: Path, recipe: Path, tmp_path: Path, capsys
) -> None:
    """A walk-forward's folder holds runs (its folds), not one: the commands that read one run
    name a fold and the walk-forward's report, and write nothing into it."""
    walk = tmp_path / "wf"
    shutil.copytree(finished, rundir.fold_dir(walk, 0))
    rundir.write_toml(walk / rundir.WF_CONFIG, {"dataset": str(recipe), "learner": "ppo"})
    rundir.write_text(walk / rundir.WF_REPORT_MD, "# walk-forward\n")
    argv = [command[0], str(walk), *(str(recipe) if a == "RECIPE" else a for a in command[1:])]
    refused(argv, walk, capsys, f"{walk} is a walk-forward", str(rundir.fold_dir(walk, 0)), rundir.WF_REPORT_MD)


def test_a_tournament_resume_refuses_a_setting_it_would_ignore(tmp_path: Path, capsys) -> None:
    run = tmp_path / "t"
    run.mkdir()
    rundir.write_toml(run / "tournament.toml", {"run_dir": str(run), "env": "Pendulum-v1", "pod_steps": 5000})
    rundir.append_json_line(run / "events.jsonl", {"kind": "started", "time": 0.0})
    refused(
        ["tournament", str(run), "--resume", "--pod-steps", "8000"],
        run,
        capsys,
        "--pod-steps",
        "5000",
        "keeps its settings",
    )
    refused(["tournament", str(run), "--resume", "--dataset", "synthetic-edge-daily"], run, capsys, "--dataset/--env")


# ------------------------------------------------------------------ --overwrite replaces a run whole


def test_train_overwrite_leaves_nothing_of_the_old_run(run: Path, recipe: Path, capsys) -> None:
    assert main(train_args(recipe, run, "--overwrite", "--seed", "3")) == 0
    capsys.readouterr()
    left = sorted(rundir.run_entries(run))
    assert left == ["checkpoints/", "config.toml", "dataset.json", "metrics.parquet", "trials.parquet"], left
    assert rundir.read_toml(run / "config.toml")["seed"] == 3


def test_overwrite_of_a_folder_that_does_not_exist_yet_starts_a_new_run(tmp_path: Path, recipe: Path, capsys) -> None:
    fresh = tmp_path / "fresh"
    assert main(train_args(recipe, fresh, "--overwrite")) == 0
    capsys.readouterr()
    assert (fresh / "config.toml").is_file()


def test_overwrite_never_deletes_a_file_it_did_not_write(run: Path, recipe: Path, capsys) -> None:
    (run / "notes.txt").write_text("mine")
    refused(train_args(recipe, run, "--overwrite"), run, capsys, "notes.txt", "no run writes")
    assert (run / "notes.txt").read_text() == "mine"


# ------------------------------------------------------------------ a backtest that is not the run's own


def test_another_period_or_strategy_writes_a_report_of_its_own(run: Path, capsys) -> None:
    own = checksums(run)
    assert main(["backtest", str(run), "--period", "validation", "--no-tear-sheet", "--no-breakeven"]) == 0
    assert (
        main(
            [
                "backtest",
                str(run),
                "--strategies",
                "best,equal_weight",
                "--costs",
                "retail",
                "--no-tear-sheet",
                "--no-breakeven",
            ]
        )
        == 0
    )
    capsys.readouterr()
    names = [report.name for report in rundir.reports(run)]
    assert names == ["", "strategies-best+equal_weight_costs-retail", "validation"], names
    assert {k: v for k, v in checksums(run).items() if not k.startswith("reports/")} == own  # the own report untouched
    shown = json.loads((run / "reports" / "validation" / "report.json").read_text())
    assert shown["period"]["name"] == "validation"
    for entry in shown["strategies"]:  # every series the report names is in its own folder
        assert (run / "reports" / "validation" / entry["series"]).is_file()
    refused(
        ["backtest", str(run), "--period", "validation", "--no-tear-sheet", "--no-breakeven"],
        run,
        capsys,
        str(run / "reports" / "validation"),
        "--overwrite",
    )
    from dashboards.runs import find_runs, load_report, load_series

    assert [r.name for r in find_runs(run)] == ["run"] and [r.name for r in find_runs(run.parent)] == ["run"]
    for report in rundir.reports(run):  # what the dashboard reads of each, from its folder
        entries = load_report(report.path)["strategies"]
        assert all(len(load_series(report.path, e["series"])) > 0 for e in entries), report.name


def test_an_overwritten_report_keeps_no_series_of_a_strategy_it_lost(run: Path, capsys) -> None:
    assert (run / "backtests" / "final.parquet").is_file()
    assert (
        main(
            ["backtest", str(run), "--report", "two", "--strategies", "best,final", "--no-tear-sheet", "--no-breakeven"]
        )
        == 0
    )
    assert (
        main(
            [
                "backtest",
                str(run),
                "--report",
                "two",
                "--strategies",
                "best",
                "--no-tear-sheet",
                "--no-breakeven",
                "--overwrite",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert sorted(p.name for p in (run / "reports" / "two" / "backtests").glob("*.parquet")) == ["best.parquet"]
    assert sorted(p.name for p in (run / "reports" / "two" / "backtests" / "trades").iterdir()) == ["best.parquet"]


def test_a_strategy_whose_checkpoint_is_gone_is_an_error_naming_it(run: Path, capsys) -> None:
    (run / "baselines" / "sb3-ppo-s0" / "model.zip").unlink()
    refused(
        ["backtest", str(run), "--overwrite", "--no-tear-sheet", "--no-breakeven"],
        run,
        capsys,
        "sb3-ppo-s0/model.zip: not found",
    )
    for path in (run / "checkpoints").glob("final.*"):
        path.unlink()
    refused(
        ["backtest", str(run), "--overwrite", "--no-tear-sheet", "--no-breakeven"],
        run,
        capsys,
        "checkpoints/final.json: not found",
        "'final'",
    )
    refused(
        ["backtest", str(run), "--strategies", "final", "--no-tear-sheet", "--no-breakeven"],
        run,
        capsys,
        "checkpoints/final.json: not found",
    )
    assert (
        main(["backtest", str(run), "--strategies", "best", "--no-tear-sheet", "--no-breakeven"]) == 0
    )  # the others still backtest
