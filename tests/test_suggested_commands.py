"""Every command that the README or the dashboard suggests is run (issue 41).

The commands are collected, not copied: the ``trader ...`` lines of the README's bash
blocks and tables (`test_cli_options.readme_commands`), and every ```trader ...``` span
in the strings the dashboard's modules render (docstrings left out). A collected command
that no test below runs fails `test_every_suggested_command_is_run`, and so does a test
that names a command nobody suggests any more.

Each test runs its commands through the real CLI (`trader.app.cli.main`, in process, or
the console entry point in a subprocess for the dashboard's server) in a temporary
working directory, so ``runs/...`` lands there; ``RUN_DIR`` and ``PATH`` are filled with
paths there. Each run checks the exit code and one thing the command leaves behind.

Budgets. A command as written trains for minutes; each such run appends the smallest
overrides its own options allow (click keeps an option's last value, so an appended
``--pods 2`` replaces the README's ``--pods 200``), named beside the call in `BUDGET`
and the like. Nothing else is changed: the data set, the learner and the cluster flags
are the README's.

Network. Nothing here leaves loopback: the Alpaca commands run against
`broker_server.BrokerServer` (``--broker-url``/``--data-url`` appended), the cluster
commands against a TLS dask cluster on 127.0.0.1 built from the certificates that the
README's own `trader cluster certs certs/` wrote (the README's 10.0.0.5 replaced by its
address), and `trader tournament --gpus all` on a machine without CUDA must refuse in
one line. No README or dashboard command reaches Yahoo or Polygon; `trader experiment
podracer` without ``--dataset`` would use Alpaca where its keys are set, so the keys are
removed and it takes its synthetic stand-in.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pytest

from trader import rundir
from trader.app.cli import main

from dashboard_server import serve_dashboard
from test_cli_options import readme_commands

ROOT = Path(__file__).resolve().parents[1]

RUNS: dict[str, str] = {}
"""Each suggested command (whitespace collapsed) and the test below that runs it."""


def normal(line: str) -> str:
    return " ".join(line.split())


def runs(*lines: str):
    """Register the suggested commands ``lines`` as run by the decorated test."""

    def mark(test):
        for line in lines:
            assert normal(line) not in RUNS, f"`{line}` is run by {RUNS[normal(line)]} already"
            RUNS[normal(line)] = test.__name__
        return test

    return mark


def dashboard_commands() -> list[str]:
    """The ```trader ...``` spans of every string the dashboard's modules hold, docstrings
    (bare string statements) left out; an f-string's placeholders are kept as ``{...}``."""
    found = []
    for path in sorted((ROOT / "dashboards").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                skip.add(id(node.value))  # a docstring, never drawn
            elif isinstance(node, ast.JoinedStr):
                skip.update(id(part) for part in node.values)
                text = "".join(
                    part.value if isinstance(part, ast.Constant) else "{" + ast.unparse(part.value) + "}"
                    for part in node.values
                )
                found += re.findall(r"`(trader [^`]+)`", text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                found += re.findall(r"`(trader [^`]+)`", node.value)
    return found


def suggested() -> set[str]:
    return {normal(line) for line in readme_commands() + dashboard_commands()}


def test_the_dashboards_suggestions_are_found() -> None:
    """The collector reads f-strings and implicit concatenations, and no docstring."""
    found = set(dashboard_commands())
    assert "trader walkforward RUN_DIR --dataset synthetic-edge-daily --train 3y --validation 1y --test 1y" in found
    assert "trader paper RUN_DIR --broker replay" in found  # inside an f-string
    assert "trader dashboard [RUNS_DIR]" not in found  # dashboards/app.py's docstring


def test_every_suggested_command_is_run() -> None:
    shown = suggested()
    assert len(shown) >= 30
    missing = sorted(shown - set(RUNS))
    assert not missing, f"suggested but run by no test in {Path(__file__).name}: {missing}"
    stale = sorted(set(RUNS) - shown)
    assert not stale, f"run here but suggested nowhere any more: {stale}"


# ------------------------------------------------------------------ running a command


def trader(line: str, *appended: str, fill: dict[str, str] | None = None) -> int:
    """Run the suggested ``line`` (its placeholders filled) with ``appended`` options after it."""
    fill = fill or {}
    words = [fill.get(word, word) for word in line.split()[1:]]
    return main([*words, *appended])


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch) -> Path:
    """A temporary working directory, where ``runs/`` is made; Alpaca's keys unset, so nothing
    picks the Alpaca data set behind the test's back."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("APCA_API_KEY_ID", raising=False)
    monkeypatch.delenv("APCA_API_SECRET_KEY", raising=False)
    return tmp_path


@pytest.fixture(scope="module")
def shared_data(tmp_path_factory) -> Path:
    """One data cache for the module's runs: a data set built once is read by every later test."""
    return tmp_path_factory.mktemp("suggested-data")


@pytest.fixture
def data_dir(shared_data: Path, monkeypatch) -> Path:
    monkeypatch.setenv("PODRACER_DATA_DIR", str(shared_data))
    return shared_data


# ------------------------------------------------------------------ quick commands (the default suite)


@runs("trader data build synthetic-edge-daily")
def test_data_build(cwd: Path, data_dir: Path, capsys) -> None:
    assert trader("trader data build synthetic-edge-daily") == 0
    assert "synthetic-edge-daily" in capsys.readouterr().out
    assert list((data_dir / "panels").iterdir())  # the panel is cached


@runs("trader data validate PATH")
def test_data_validate(cwd: Path, capsys) -> None:
    from test_data_frame import good_frame

    (cwd / "bars").mkdir()
    good_frame().to_csv(cwd / "bars" / "bars.csv", index=False)
    assert trader("trader data validate PATH", fill={"PATH": "bars"}) == 0
    assert "valid" in capsys.readouterr().out


@runs("trader cluster certs certs/")
def test_cluster_certs(cwd: Path) -> None:
    assert trader("trader cluster certs certs/") == 0
    # the files the README's `--tls-ca certs/ca.pem --tls-cert certs/client.pem --tls-key certs/client-key.pem` name
    assert all((cwd / "certs" / name).stat().st_size > 0 for name in ("ca.pem", "client.pem", "client-key.pem"))


@runs("trader tournament runs/t1 --gpus all")
def test_tournament_on_all_gpus_refuses_without_cuda(cwd: Path, capsys) -> None:
    """Without a CUDA device the command refuses in one line, before any work (on a GPU machine
    it would start a dask-cuda cluster: that is tests/test_tournament_cluster.py's, marked gpu)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the refusal cannot be shown")
    assert trader("trader tournament runs/t1 --gpus all") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "cuda" in err.lower(), err
    assert not (cwd / "runs" / "t1").exists()


@runs("trader dashboard runs")
def test_dashboard_serves_the_runs_folder(cwd: Path) -> None:
    """The console script in a subprocess (it serves until stopped); ``--port`` is appended so
    that a dashboard already on 8501 does not matter. It answers Streamlit's health check
    (`dashboard_server.serve_dashboard` waits for it)."""
    (cwd / "runs").mkdir()
    server, _ = serve_dashboard("runs", cwd=cwd)
    server.terminate()
    server.wait(timeout=30)


# ------------------------------------------------------------------ one agent: train, backtest, act, paper, baselines

TRAIN_BUDGET = ("--steps", "512", "--num-envs", "8", "--eval-every", "0")
"""Appended to `trader train` on a market: 512 transitions instead of 300,000 (one update of
the preset's PPO), 8 sub-environments instead of 512 (a rollout of 512 x the preset's steps
would dwarf the budget), validation at the end only."""

NO_TEAR_SHEET = ("--no-tear-sheet",)
"""Appended to a backtest: pyfolio's tear sheets take a minute per strategy on a shared
2-core machine and are drawn by tests/test_backtest.py; the report and series are the same."""

BASELINE_BUDGET = ("--time-budget", "3s", "--seeds", "1", "--windows", "2", "--no-tear-sheet")
"""Appended to `trader baselines`: 3 s per learner instead of 5 minutes, one seed instead of
three, two FinRL windows instead of four, no tear sheets (as `NO_TEAR_SHEET`)."""

SB3_BUDGET = ("--time-budget", "3s", "--seeds", "1", "--no-tear-sheet")
"""`BASELINE_BUDGET` without FinRL's windows, which a command without finrl refuses."""

REPLAY_BUDGET = ("--max-bars", "5")
"""Appended to `trader paper --broker replay`: 5 bars instead of the whole test period."""


def journal(run: Path) -> list[dict]:
    return rundir.read_json_lines(run / rundir.PAPER_JOURNAL)


@pytest.mark.slow
@runs(
    "trader train runs/ppo --algo ppo --dataset synthetic-edge-daily --preset market --steps 300000 --num-envs 512",
    "trader train RUN_DIR --algo ppo --dataset synthetic-edge-daily",  # the training page, where no run is yet
    "trader train",  # the data page: "`trader train` and `trader backtest` write one" (dataset.json)
    "trader backtest runs/ppo",
    "trader backtest",
    "trader backtest RUN_DIR",  # the strategies and significance pages, where no run has a report yet
    "trader backtest RUN_DIR --overwrite",  # the same pages, on a report of an older version: "on it again"
    "trader act runs/ppo --book book.json",
    "trader paper runs/ppo --broker replay",
    "trader paper RUN_DIR --broker replay",
    "trader baselines runs/ppo --baselines sb3 --baseline-algos ppo --time-budget 2m",
    "trader baselines runs/ppo --baselines sb3,finrl --baseline-algos ppo,sac,td3 --time-budget 5m --seeds 3",
)
def test_one_agent_from_training_to_paper_trading(cwd: Path, data_dir: Path, capsys) -> None:
    line = (
        "trader train runs/ppo --algo ppo --dataset synthetic-edge-daily --preset market --steps 300000 --num-envs 512"
    )
    assert trader(line, *TRAIN_BUDGET) == 0
    run = cwd / "runs" / "ppo"
    assert (run / "checkpoints" / "best.safetensors").is_file() and (run / rundir.DATASET).is_file()
    line = "trader train RUN_DIR --algo ppo --dataset synthetic-edge-daily"
    assert trader(line, *TRAIN_BUDGET, fill={"RUN_DIR": "other"}) == 0
    assert (cwd / "other" / "checkpoints" / "best.safetensors").is_file()

    assert trader("trader backtest runs/ppo", *NO_TEAR_SHEET) == 0
    report = json.loads((run / rundir.REPORT_JSON).read_text())
    assert {"best", "final"} <= {s["name"] for s in report["strategies"]}
    (cwd / "other" / rundir.DATASET).unlink()  # the data page: `trader backtest` writes one as well
    assert trader("trader backtest RUN_DIR", *NO_TEAR_SHEET, fill={"RUN_DIR": "other"}) == 0
    assert (cwd / "other" / rundir.REPORT_JSON).is_file() and (cwd / "other" / rundir.DATASET).is_file()
    before = (cwd / "other" / rundir.REPORT_JSON).stat().st_mtime_ns
    assert trader("trader backtest RUN_DIR --overwrite", *NO_TEAR_SHEET, fill={"RUN_DIR": "other"}) == 0
    assert (cwd / "other" / rundir.REPORT_JSON).stat().st_mtime_ns > before
    capsys.readouterr()

    (cwd / "book.json").write_text(json.dumps({"cash": 50_000.0, "holdings": {"SYN000": 10, "SYN001": 5}}))
    assert trader("trader act runs/ppo --book book.json") == 0
    assert "SYN000" in capsys.readouterr().out

    assert trader("trader paper runs/ppo --broker replay", *REPLAY_BUDGET) == 0
    assert len(journal(run)) == 5
    assert trader("trader paper RUN_DIR --broker replay", *REPLAY_BUDGET, fill={"RUN_DIR": "other"}) == 0
    assert len(journal(cwd / "other")) == 5

    line = "trader baselines runs/ppo --baselines sb3 --baseline-algos ppo --time-budget 2m"
    assert trader(line, *SB3_BUDGET) == 0
    learners = {p.name for p in (run / rundir.BASELINES_DIR).iterdir() if p.is_dir()}
    assert len(learners) == 1, learners  # sb3 PPO
    line = "trader baselines runs/ppo --baselines sb3,finrl --baseline-algos ppo,sac,td3 --time-budget 5m --seeds 3"
    # --overwrite appended: runs/ppo holds the first command's finished baselines (refused, naming them, without it)
    assert trader(line, *BASELINE_BUDGET, "--overwrite") == 0
    assert len({p.name for p in (run / rundir.BASELINES_DIR).iterdir() if p.is_dir()}) > len(
        learners
    )  # SAC, TD3, FinRL


@pytest.mark.slow
@runs("trader train runs/ppo --algo ppo --dataset synthetic-edge-minute --steps 200000")
def test_train_on_minute_bars(cwd: Path, data_dir: Path) -> None:
    """``--steps 512 --eval-every 0`` appended: 512 transitions instead of 200,000, validation at
    the end only. Most of the time goes into building synthetic-edge-minute (100 tickers, a year
    of minutes)."""
    line = "trader train runs/ppo --algo ppo --dataset synthetic-edge-minute --steps 200000"
    assert trader(line, "--steps", "512", "--eval-every", "0") == 0
    assert (cwd / "runs" / "ppo" / "checkpoints" / "best.safetensors").is_file()


# ------------------------------------------------------------------ tournaments

TOURNAMENT_BUDGET = ("--pods", "2", "--pod-steps", "256", "--num-envs", "4")
"""Appended to `trader tournament`: 2 pods (the first stop reached; it replaces the README's
``--pods`` and comes before its ``--time-budget``) of 256 transitions instead of 50,000,
4 sub-environments per pod instead of 64."""


def finished_pods(run: Path) -> int:
    return sum(event["kind"] == "finished" for event in rundir.read_json_lines(run / rundir.EVENTS))


@pytest.mark.slow
@runs(
    "trader tournament runs/t1 --dataset synthetic-edge-daily --workers 2",
    "trader tournament",  # the strategies page: "run `trader backtest RUN_DIR` (or `trader tournament`) to write one"
    "trader tournament runs/t1 --resume --pods 200",
    "trader paper runs/t1 --broker replay",
)
def test_a_tournament_resumed_and_paper_traded(cwd: Path, data_dir: Path) -> None:
    assert trader("trader tournament runs/t1 --dataset synthetic-edge-daily --workers 2", *TOURNAMENT_BUDGET) == 0
    run = cwd / "runs" / "t1"
    assert finished_pods(run) == 2 and (run / rundir.LEADERBOARD).is_file() and (run / rundir.REPORT_JSON).is_file()
    # --pods 3 appended: one pod more than the first run's instead of 198 (the saved settings are taken as they are)
    assert trader("trader tournament runs/t1 --resume --pods 200", "--pods", "3") == 0
    assert finished_pods(run) == 3
    assert trader("trader paper runs/t1 --broker replay", *REPLAY_BUDGET) == 0
    assert len(journal(run)) == 5


@pytest.mark.slow
@runs(
    "trader tournament runs/t1 --dataset synthetic-edge-daily --preset market --algos ppo,sac,td3 --population 8 "
    "--pod-steps 50000 --time-budget 30m --workers 2",
    "trader tournament runs/t1 --dataset synthetic-edge-daily --preset market --time-budget 3m --workers 2",
    "trader tournament RUN_DIR --dataset synthetic-edge-daily",
)
def test_the_other_tournaments(cwd: Path, data_dir: Path, monkeypatch) -> None:
    """Each in a folder of its own (they all write runs/t1), with `TOURNAMENT_BUDGET` appended."""
    lines = [line for line, test in RUNS.items() if test == "test_the_other_tournaments"]
    for i, line in enumerate(lines):
        (cwd / str(i)).mkdir()
        monkeypatch.chdir(cwd / str(i))
        assert trader(line, *TOURNAMENT_BUDGET, fill={"RUN_DIR": "runs/t1"}) == 0, line
        assert finished_pods(cwd / str(i) / "runs" / "t1") == 2, line


DAILY = ("--dataset", "synthetic-edge-daily")


@pytest.mark.slow
@runs(
    "trader tournament runs/t1 --scheduler tls://10.0.0.5:8786 --tls-ca certs/ca.pem --tls-cert certs/client.pem "
    "--tls-key certs/client-key.pem --time-budget 2h",
    "trader tournament runs/t1 --scheduler tls://10.0.0.5:8786 --pods 200 --tls-ca certs/ca.pem "
    "--tls-cert certs/client.pem --tls-key certs/client-key.pem",
)
def test_tournaments_on_a_tls_cluster(cwd: Path, data_dir: Path) -> None:
    """The README's certificates (`trader cluster certs certs/`) serve a TLS dask cluster on
    127.0.0.1 (one in-process worker, as tests/test_cluster_tls.py builds it), whose address
    replaces the README's tls://10.0.0.5:8786. `TOURNAMENT_BUDGET` is appended, and
    ``--dataset synthetic-edge-daily``: on the tournament's default data set (synthetic-edge-minute)
    the pods finish in a minute but the final backtest of its minute test period had not ended
    after 20 minutes on a shared 2-core machine; the cluster is what these lines show."""
    distributed = pytest.importorskip("distributed")
    from tournament.certs import certificate_files

    assert trader("trader cluster certs certs/") == 0
    files = {name: str(path) for name, path in certificate_files(cwd / "certs").items()}
    security = distributed.security.Security(
        tls_ca_file=files["ca"],
        **{
            f"tls_{role}_{part}": files[role + tail]
            for role in ("scheduler", "worker", "client")
            for part, tail in (("cert", ""), ("key", "-key"))
        },
        require_encryption=True,
    )
    with distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tls://",
        host="127.0.0.1",
        security=security,
        dashboard_address=None,
        silence_logs=40,
    ) as local:
        assert local.scheduler_address.startswith("tls://127.0.0.1:")
        for line in [line for line, test in RUNS.items() if test == "test_tournaments_on_a_tls_cluster"]:
            shutil.rmtree(cwd / "runs", ignore_errors=True)  # two ways of starting runs/t1
            address = {"tls://10.0.0.5:8786": local.scheduler_address}
            assert trader(line, *TOURNAMENT_BUDGET, *DAILY, fill=address) == 0, line
            assert finished_pods(cwd / "runs" / "t1") == 2


# ------------------------------------------------------------------ walk-forward

WALK_BUDGET = ("--pods", "1", "--pod-steps", "128", "--num-envs", "4")
"""Appended to `trader walkforward` (a tournament per fold): 1 pod of 128 transitions per fold
instead of the tournament's 12 of 50,000, 4 sub-environments per pod."""


@pytest.mark.slow
@runs(
    "trader walkforward RUN_DIR --dataset synthetic-edge-daily --train 3y --validation 1y --test 1y",
    "trader walkforward",  # the walk-forward page: "run the same `trader walkforward` command again to resume it"
)
def test_walk_forward_and_its_resumption(cwd: Path, data_dir: Path, capsys) -> None:
    """The dashboard's command with RUN_DIR runs/wf, run once, then again: the second run resumes
    and trains nothing."""
    line = "trader walkforward RUN_DIR --dataset synthetic-edge-daily --train 3y --validation 1y --test 1y"
    assert trader(line, *WALK_BUDGET, fill={"RUN_DIR": "runs/wf"}) == 0
    run = cwd / "runs" / "wf"
    report = json.loads((run / rundir.WF_REPORT_JSON).read_text())
    assert (run / rundir.WF_STITCHED).is_file() and report
    stamps = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file() and "checkpoints" in p.parts}
    assert stamps
    assert trader(line, *WALK_BUDGET, fill={"RUN_DIR": "runs/wf"}) == 0
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # no fold trained again


@pytest.mark.slow
@runs(
    "trader walkforward runs/wf --dataset synthetic-edge-daily --preset market --train 3y --validation 1y --test 1y "
    "--learner ppo --steps 20000"
)
def test_the_tours_walk_forward(cwd: Path, data_dir: Path) -> None:
    """The README's tour: one PPO run per fold under the market preset; `TRAIN_BUDGET` appended
    (512 transitions per fold instead of 20,000)."""
    (line,) = [line for line, test in RUNS.items() if test == "test_the_tours_walk_forward"]
    assert trader(line, *TRAIN_BUDGET) == 0
    run = cwd / "runs" / "wf"
    assert (run / rundir.WF_STITCHED).is_file() and (run / rundir.WF_REPORT_JSON).is_file()


@pytest.mark.slow
@runs(
    "trader walkforward runs/wf --dataset synthetic-edge-daily --train 3y --validation 1y --test 1y "
    "--learner tournament --preset market --pods 6 --pod-steps 16384 --workers 2 --baselines sb3"
)
def test_walk_forward_with_baselines(cwd: Path, data_dir: Path) -> None:
    """`WALK_BUDGET` appended; the SB3 baseline gets the same budget per fold (its default)."""
    (line,) = [line for line, test in RUNS.items() if test == "test_walk_forward_with_baselines"]
    assert trader(line, *WALK_BUDGET) == 0
    run = cwd / "runs" / "wf"
    assert (run / rundir.WF_STITCHED).is_file() and list(run.rglob(f"{rundir.BASELINES_DIR}/*"))


# ------------------------------------------------------------------ the seed paper's experiment

EXPERIMENT_SIZE = ("--tickers", "4", "--years", "0.1")
"""Appended to `trader experiment podracer` on its synthetic minute stand-in (no Alpaca keys):
its laptop-sized options, 4 tickers and the last tenth of a year, instead of 100 tickers and a year."""

EXPERIMENT_PODS = ("--pods", "1", "--pod-steps", "256", "--tickers", "4", "--years", "2")
"""Appended where the command gives --pods: 1 pod of 256 transitions (every other learner the
same) instead of 6 of 20,000, on 4 tickers and the data set's last 2 years."""


@pytest.mark.slow
@runs("trader experiment podracer runs/paper --minutes 30", "trader experiment podracer runs/paper-synth --minutes 10")
def test_the_experiment_by_the_minute(cwd: Path, data_dir: Path, monkeypatch, capsys) -> None:
    """``--minutes 1 --pod-steps 256`` (a minute per learner, pods that finish in it; at 6 s the
    dask workers were still starting) and `EXPERIMENT_SIZE` appended. With the minutes alone no
    pod of 50,000 transitions finishes: that is one line naming the budget, exit code 2 (it was a
    KeyError)."""
    (cwd / "short").mkdir()
    monkeypatch.chdir(cwd / "short")
    assert trader("trader experiment podracer runs/paper --minutes 30", "--minutes", "0.05", *EXPERIMENT_SIZE) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress lines
    assert last.startswith("error: ") and "finished nothing to select within --minutes 0.05" in last, last
    monkeypatch.chdir(cwd)
    for line in [line for line, test in RUNS.items() if test == "test_the_experiment_by_the_minute"]:
        assert trader(line, "--minutes", "1", "--pod-steps", "256", *EXPERIMENT_SIZE) == 0, line
        run = cwd / line.split()[3]
        assert (run / rundir.EXPERIMENT_JSON).is_file() and (run / rundir.EXPERIMENT_TABLE).is_file()


@pytest.mark.slow
@runs(
    "trader experiment podracer runs/small --dataset synthetic-edge-daily --pods 6 --pod-steps 20000 "
    "--extra-costs institutional",
    "trader experiment podracer RUN_DIR --dataset synthetic-edge-daily --pods 6 --pod-steps 20000",
    "trader experiment podracer",  # the experiment page: "run the same ... command again to resume it"
)
def test_the_experiment_by_pods_and_its_resumption(cwd: Path, data_dir: Path) -> None:
    line = "trader experiment podracer runs/small --dataset synthetic-edge-daily --pods 6 --pod-steps 20000 --extra-costs institutional"
    assert trader(line, *EXPERIMENT_PODS) == 0
    assert "institutional" in (cwd / "runs" / "small" / rundir.EXPERIMENT_TABLE).read_text()
    line = "trader experiment podracer RUN_DIR --dataset synthetic-edge-daily --pods 6 --pod-steps 20000"
    assert trader(line, *EXPERIMENT_PODS, fill={"RUN_DIR": "runs/x"}) == 0
    table = cwd / "runs" / "x" / rundir.EXPERIMENT_JSON
    before = table.read_text()
    stamps = {p: p.stat().st_mtime_ns for p in (cwd / "runs" / "x").rglob("*") if "checkpoints" in p.parts}
    assert trader(line, *EXPERIMENT_PODS, fill={"RUN_DIR": "runs/x"}) == 0  # again: resumed, nothing trained
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps and table.read_text() == before


# ------------------------------------------------------------------ a locomotion benchmark


@pytest.mark.slow
@runs(
    "trader train runs/ant-sac --algo sac --env Ant-v5 --steps 200000 --num-envs 8",
    "trader tournament runs/ant-t --env Ant-v5 --algos ppo,sac,td3 --pod-steps 100000 --time-budget 1h",
)
def test_ant(cwd: Path) -> None:
    """``--steps 64 --eval-episodes 1`` appended to training (64 transitions instead of 200,000,
    one evaluation episode), `TOURNAMENT_BUDGET` to the tournament."""
    pytest.importorskip("mujoco")
    line = "trader train runs/ant-sac --algo sac --env Ant-v5 --steps 200000 --num-envs 8"
    assert trader(line, "--steps", "64", "--eval-episodes", "1") == 0
    assert (cwd / "runs" / "ant-sac" / "checkpoints" / "best.safetensors").is_file()
    line = "trader tournament runs/ant-t --env Ant-v5 --algos ppo,sac,td3 --pod-steps 100000 --time-budget 1h"
    assert trader(line, *TOURNAMENT_BUDGET) == 0
    assert finished_pods(cwd / "runs" / "ant-t") == 2


# ------------------------------------------------------------------ paper trading on Alpaca's paper API, on loopback

from test_paper_alpaca import market, options, trained  # noqa: E402,F401  (module fixtures: a run on the server's bars)


@pytest.mark.slow
@runs(
    "trader paper runs/t1 --broker alpaca --max-drawdown 0.05 --daily-loss-limit 0.02 --max-order-value 20000",
    "trader paper runs/t1 --broker alpaca --dry-run",
)
def test_paper_trading_on_alpaca(cwd: Path, market, trained: Path, monkeypatch) -> None:
    """runs/t1 is tests/test_paper_alpaca.py's run, trained on `broker_server.BrokerServer`'s bars
    (a run of the README's would trade tickers the server does not list). Appended: the
    server's URLs, its fast clock's timings (`test_paper_alpaca.options`) and ``--max-bars 3``."""
    from broker_server import BrokerServer
    from vendor_server import KEY_ID, SECRET

    monkeypatch.setenv("PODRACER_DATA_DIR", str(trained.parent / "data"))
    monkeypatch.setenv("APCA_API_KEY_ID", KEY_ID)
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
    for line in [line for line, test in RUNS.items() if test == "test_paper_trading_on_alpaca"]:
        shutil.rmtree(cwd / "runs", ignore_errors=True)
        shutil.copytree(trained, cwd / "runs" / "t1")
        server = BrokerServer(market, "2020-11-25 15:40")
        with server.running():
            assert trader(line, *options(server)[2:], "--max-bars", "3") == 0, line
        assert len(journal(cwd / "runs" / "t1")) == 3
        assert (server.posts == []) == ("--dry-run" in line), line
