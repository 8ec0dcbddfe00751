"""Every command that the README or the dashboard suggests is run as printed (issues 41, 75).

The commands are collected, not copied: the ``trader ...`` lines of the README's bash blocks
and tables (`test_cli_options.readme_commands`), and every ```trader ...``` span in the strings
the dashboard's modules render (docstrings left out). No command is named here: each collected
command is sorted by what it is (`kind`: its subcommand and the flags that change what it needs,
a cluster, a broker, a gymnasium env) and run by that kind's runner, which checks the exit code
and what the command leaves behind. A command of a kind no runner knows fails its test; so a
README of two commands or of forty is run whole.

Each command runs through the real CLI (`podracer.cli.main`, in process, or the console entry
point in a subprocess for the dashboard's server) in a temporary working directory, so
``runs/...`` lands there; the placeholders ``RUN_DIR`` and ``PATH`` are filled with paths there.

Budgets. A command as written trains for minutes; every run here is under
``TRADER_TINY_BUDGETS=1`` (`podracer.cli.budget`), which caps the budget options (transitions,
pods, time budgets, seeds, bars) at smoke-test sizes without a word of the command changed. What a
command says it learns is checked at its real budget by `test_the_tours_tournament_learns`
(slow): the tour's tournament beats equal weight on the test period.

A command that needs a run (backtest, act, paper, baselines, a resumed tournament) gets one first,
trained by `trader train` (or `trader tournament`) at the same tiny budget. Only the quick kinds
run in the default suite; the ones that train a tournament, backtest or start a cluster are slow.

Network. Nothing here leaves loopback: the Alpaca commands run against
`broker_server.BrokerServer` (``--broker-url``/``--data-url`` appended), the cluster commands
against a TLS dask cluster on 127.0.0.1 built from the certificates of `trader cluster certs`
(the command's scheduler address replaced by its address), and `trader tournament --gpus all` on a
machine without CUDA must refuse in one line. `trader experiment podracer` without ``--dataset``
would use Alpaca where its keys are set, so the keys are removed and it takes its synthetic stand-in.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from dashboard_server import serve_dashboard
from test_cli_options import readme_commands

from trader import rundir
from podracer.cli import budget, main

ROOT = Path(__file__).resolve().parents[1]

GROUPS = ("data", "cluster", "experiment")
"""The commands whose first word is a group: their path is two words."""

DAILY = "synthetic-edge-daily"
"""The data set a run needed by a command is trained on (the README's tour's)."""


def normal(line: str) -> str:
    return " ".join(line.split())


def dashboard_commands(root: Path = ROOT / "dashboards") -> list[str]:
    """The ```trader ...``` spans of every string the modules under ``root`` hold, docstrings
    (bare string statements) left out; an f-string's placeholders are kept as ``{...}``."""
    found = []
    for path in sorted(root.rglob("*.py")):
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


def suggested() -> list[str]:
    """Every suggested command once, in the order shown (the README's, then the dashboard's)."""
    return list(dict.fromkeys(normal(line) for line in readme_commands() + dashboard_commands()))


def test_the_dashboards_suggestions_are_found(tmp_path: Path) -> None:
    """The collector reads constants, f-strings and implicit concatenations, and no docstring."""
    (tmp_path / "page.py").write_text(
        '"""Run `trader dashboard [RUNS_DIR]`."""\n'
        'HINT = "run `trader train RUN_DIR --algo ppo " "--dataset d` first"\n'
        "def hint(run):\n"
        '    """`trader gone`"""\n'
        '    return f"then `trader paper {run} --broker replay`"\n'
    )
    assert dashboard_commands(tmp_path) == [
        "trader paper {run} --broker replay",
        "trader train RUN_DIR --algo ppo --dataset d",
    ]


def command_path(line: str) -> tuple[list[str], list[str]]:
    """``line``'s command (one word, two for a group) and the words after it."""
    words = line.split()[1:]
    size = 2 if words and words[0] in GROUPS else 1
    return words[:size], words[size:]


def kind(line: str) -> str:
    """What running ``line`` needs: the name of its runner in `RUNNERS`."""
    path, rest = command_path(line)
    if not rest:
        return "mention"  # prose naming a command ("run `trader backtest` to write one")
    for flag, name in (("--gpus", "gpus"), ("--scheduler", "tls-cluster"), ("--env", "gym")):
        if flag in rest:
            return name
    if path == ["paper"] and "alpaca" in rest:
        return "alpaca"
    return " ".join(path)


def test_every_suggested_command_has_a_runner() -> None:
    shown = suggested()
    assert shown and any(line.startswith("trader train ") for line in shown)
    assert not [line for line in shown if kind(line) not in RUNNERS], "a suggested command no runner below knows"


# ------------------------------------------------------------------ running a command


def words(line: str, fill: dict[str, str]) -> list[str]:
    return [fill.get(word, word) for word in line.split()[1:]]


def option(line: str, flag: str) -> str | None:
    """The value ``flag`` takes in ``line`` (its last), or None."""
    found = re.findall(rf"{flag}[ =](\S+)", line)
    return found[-1] if found else None


def run_dir(line: str, fill: dict[str, str]) -> Path:
    return Path(words(line, fill)[len(command_path(line)[0])])


def finished_pods(run: Path) -> int:
    return sum(event["kind"] == "finished" for event in rundir.read_json_lines(run / rundir.EVENTS))


def journal(run: Path) -> list[dict]:
    return rundir.read_json_lines(run / rundir.PAPER_JOURNAL)


class Setting:
    """Where a command runs: the working directory, the module's trained run, pytest's fixtures."""

    def __init__(self, cwd: Path, request, capsys) -> None:
        self.cwd, self.request, self.capsys = cwd, request, capsys
        self.fill = {"RUN_DIR": "runs/x", "PATH": "bars"}

    def run(self, line: str, *appended: str) -> int:
        return main([*words(line, self.fill), *appended])

    def trained(self, run: Path) -> Path:
        """``run`` holds a tiny single-agent run (copied from the module's, trained once)."""
        if not run.exists():
            shutil.copytree(self.request.getfixturevalue("tiny_run"), run)
        return run


def run_mention(s: Setting, line: str) -> None:
    """Prose naming a command: the command exists (its help exits 0)."""
    assert s.run(line, "--help") == 0


def run_data_build(s: Setting, line: str) -> None:
    assert s.run(line) == 0
    assert list((s.request.getfixturevalue("data_dir") / "panels").iterdir())  # the panel is cached


def run_data_validate(s: Setting, line: str) -> None:
    from test_data_frame import good_frame

    (s.cwd / "bars").mkdir()
    good_frame().to_csv(s.cwd / "bars" / "bars.csv", index=False)
    assert s.run(line) == 0
    assert "valid" in s.capsys.readouterr().out


def run_cluster_certs(s: Setting, line: str) -> None:
    assert s.run(line) == 0
    folder = s.cwd / words(line, s.fill)[2]
    assert all((folder / name).stat().st_size > 0 for name in ("ca.pem", "client.pem", "client-key.pem"))


def run_gpus(s: Setting, line: str) -> None:
    """Without a CUDA device the command refuses in one line, before any work (on a GPU machine
    it would start a dask-cuda cluster: that is tests/test_tournament_cluster.py's, marked gpu)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the refusal cannot be shown")
    assert s.run(line) == 2
    err = s.capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(budget.ENV)  # the budget's notice, then the refusal
    assert len(err) == 2 and err[1].startswith("error: ") and "cuda" in err[1].lower(), err
    assert not run_dir(line, s.fill).exists()


def run_dashboard(s: Setting, line: str) -> None:
    """The console script in a subprocess (it serves until stopped); ``--port`` is appended so
    that a dashboard already on 8501 does not matter. It answers Streamlit's health check."""
    folder = words(line, s.fill)[1]
    (s.cwd / folder).mkdir()
    server, _ = serve_dashboard(folder, cwd=s.cwd)
    server.terminate()
    server.wait(timeout=30)


def run_train(s: Setting, line: str) -> None:
    assert s.run(line) == 0
    run = run_dir(line, s.fill)
    rest = command_path(line)[1]
    if "--population" in rest:  # P seeds, each a run directory of its own (seed-<k>)
        population = int(rest[rest.index("--population") + 1])
        runs = sorted(run.glob("seed-*"))
        assert len(runs) == population and (run / "population.json").is_file()
    else:
        runs = [run]
    for run in runs:
        assert (run / "checkpoints" / "best.safetensors").is_file() and (run / rundir.DATASET).is_file()


def run_backtest(s: Setting, line: str) -> None:
    run = s.trained(run_dir(line, s.fill))
    assert s.run(line) == 0
    report = json.loads((run / rundir.REPORT_JSON).read_text())
    assert {"best", "final", "equal_weight"} <= {strategy["name"] for strategy in report["strategies"]}


def run_act(s: Setting, line: str) -> None:
    s.trained(run_dir(line, s.fill))
    book = option(line, "--book")
    if book is not None:
        (s.cwd / book).write_text(json.dumps({"cash": 50_000.0, "holdings": {"SYN000": 10, "SYN001": 5}}))
    assert s.run(line) == 0
    assert "SYN000" in s.capsys.readouterr().out


def run_paper(s: Setting, line: str) -> None:
    run = s.trained(run_dir(line, s.fill))
    assert s.run(line) == 0
    assert len(journal(run)) == budget.TINY["paper"]["--max-bars"]


def run_baselines(s: Setting, line: str) -> None:
    run = s.trained(run_dir(line, s.fill))
    assert s.run(line) == 0
    learners = [p for p in (run / rundir.BASELINES_DIR).iterdir() if p.is_dir()]
    assert len(learners) >= len(option(line, "--baselines").split(",")), learners
    report = json.loads((run / rundir.REPORT_JSON).read_text())
    assert len(report["strategies"]) > 2 + len(learners)  # the run's, the baselines', the yardsticks'


def run_tournament(s: Setting, line: str) -> None:
    run = run_dir(line, s.fill)
    if "--resume" in line:
        assert main(["tournament", str(run), "--dataset", DAILY]) == 0  # the tournament it resumes
        before = finished_pods(run)
        assert s.run(line) == 0
        assert finished_pods(run) >= before
        return
    assert s.run(line) == 0
    assert finished_pods(run) >= 1 and (run / rundir.LEADERBOARD).is_file() and (run / rundir.REPORT_JSON).is_file()


def run_walkforward(s: Setting, line: str) -> None:
    """Run once, then again: the second run resumes and trains nothing."""
    assert s.run(line) == 0
    run = run_dir(line, s.fill)
    assert (run / rundir.WF_STITCHED).is_file() and json.loads((run / rundir.WF_REPORT_JSON).read_text())
    stamps = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file() and "checkpoints" in p.parts}
    assert stamps
    assert s.run(line) == 0
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # no fold trained again
    if "--baselines" in line:
        assert list(run.rglob(f"{rundir.BASELINES_DIR}/*"))


def run_experiment(s: Setting, line: str) -> None:
    assert s.run(line) == 0
    run = run_dir(line, s.fill)
    assert (run / rundir.EXPERIMENT_JSON).is_file() and (run / rundir.EXPERIMENT_TABLE).is_file()
    extra = option(line, "--extra-costs")
    if extra is not None:
        assert extra in (run / rundir.EXPERIMENT_TABLE).read_text()


def run_gym(s: Setting, line: str) -> None:
    pytest.importorskip("mujoco")
    assert s.run(line) == 0
    run = run_dir(line, s.fill)
    if line.split()[1] == "train":
        assert (run / "checkpoints" / "best.safetensors").is_file()
    else:
        assert finished_pods(run) >= 1


def run_tls_cluster(s: Setting, line: str) -> None:
    """Certificates of `trader cluster certs` serve a TLS dask cluster on 127.0.0.1 (one in-process
    worker, as tests/test_cluster_tls.py builds it), whose address replaces the command's; the
    command's certificate paths are where the certificates are written. ``--dataset`` is appended
    when the command gives none: on the tournament's default (synthetic-edge-minute) the final
    backtest of its minute test period takes longer than a test may; the cluster is what it shows."""
    distributed = pytest.importorskip("distributed")
    from tournament.certs import certificate_files

    folder = Path(option(line, "--tls-ca")).parent
    assert main(["cluster", "certs", str(folder)]) == 0
    files = {name: str(path) for name, path in certificate_files(s.cwd / folder).items()}
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
        s.fill[option(line, "--scheduler")] = local.scheduler_address
        assert s.run(line, *(() if "--dataset" in line else ("--dataset", DAILY))) == 0
        assert finished_pods(run_dir(line, s.fill)) >= 1


def run_alpaca(s: Setting, line: str) -> None:
    """The run is tests/test_paper_alpaca.py's, trained on `broker_server.BrokerServer`'s bars (a
    run of the README's would trade tickers the server does not list). Appended: the server's URLs
    and its fast clock's timings (`test_paper_alpaca.options`)."""
    from broker_server import BrokerServer
    from test_paper_alpaca import options
    from vendor_server import KEY_ID, SECRET

    bars, alpaca_run = s.request.getfixturevalue("market"), s.request.getfixturevalue("trained")
    monkeypatch = s.request.getfixturevalue("monkeypatch")
    monkeypatch.setenv("PODRACER_DATA_DIR", str(alpaca_run.parent / "data"))
    monkeypatch.setenv("APCA_API_KEY_ID", KEY_ID)
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
    run = run_dir(line, s.fill)
    shutil.copytree(alpaca_run, run)
    server = BrokerServer(bars, "2020-11-25 15:40")
    with server.running():
        assert s.run(line, *options(server)[2:]) == 0, line
    assert len(journal(run)) == budget.TINY["paper"]["--max-bars"]
    assert (server.posts == []) == ("--dry-run" in line), line


RUNNERS: dict[str, Callable[[Setting, str], None]] = {
    "mention": run_mention,
    "data build": run_data_build,
    "data validate": run_data_validate,
    "cluster certs": run_cluster_certs,
    "gpus": run_gpus,
    "dashboard": run_dashboard,
    "train": run_train,
    "backtest": run_backtest,
    "act": run_act,
    "paper": run_paper,
    "baselines": run_baselines,
    "tournament": run_tournament,
    "walkforward": run_walkforward,
    "experiment podracer": run_experiment,
    "gym": run_gym,
    "tls-cluster": run_tls_cluster,
    "alpaca": run_alpaca,
}
"""Each kind of command and the function that runs one and checks what it leaves behind."""

QUICK = {"mention", "data build", "data validate", "cluster certs", "gpus", "dashboard", "train"}
"""The kinds the default suite runs (seconds each); the others train tournaments, backtest a
test period, start clusters or brokers (a minute or more each on a shared 2-core machine)."""


def quick(line: str) -> bool:
    return kind(line) in QUICK and "minute" not in (
        option(line, "--dataset") or ""
    )  # a minute data set: a build of minutes


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch) -> Path:
    """A temporary working directory, where ``runs/`` is made; the budgets tiny; Alpaca's keys
    unset, so nothing picks the Alpaca data set behind the test's back."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(budget.ENV, "1")
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


@pytest.fixture(scope="module")
def tiny_run(shared_data: Path, tmp_path_factory) -> Path:
    """A single-agent run at the tiny budget, for the commands that act on a run."""
    run = tmp_path_factory.mktemp("suggested-run") / "ppo"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(budget.ENV, "1")
        patch.setenv("PODRACER_DATA_DIR", str(shared_data))
        assert main(["train", str(run), "--algo", "ppo", "--dataset", DAILY, "--preset", "market"]) == 0
    return run


@pytest.mark.parametrize(
    "line", [pytest.param(line, marks=() if quick(line) else pytest.mark.slow) for line in suggested()]
)
def test_the_suggested_command_runs(line: str, cwd: Path, data_dir: Path, request, capsys) -> None:
    assert kind(line) in RUNNERS, f"`{line}`: no runner for a command of its kind ({kind(line)!r})"
    RUNNERS[kind(line)](Setting(cwd, request, capsys), line)


def test_the_tiny_budget_says_so(cwd: Path, capsys) -> None:
    """Under the variable every command prints one line naming it, first."""
    assert main(["--version"]) == 0
    assert capsys.readouterr().err.startswith(f"{budget.ENV}=1: budgets capped")


# ------------------------------------------------------------------ what the tour says it learns


def tour_tournament() -> str:
    """The tour's tournament: the first `trader tournament RUN ...` command of the README's section
    whose title names a tour (the README's first such command where no section does)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    sections = re.split(r"^##+ ", text, flags=re.MULTILINE)  # a bash block's comments start with one #
    tours = [section for section in sections if "tour" in section.split("\n", 1)[0].lower()]
    for part in [*tours, text]:
        found = [normal(line) for line in readme_commands(part) if kind(normal(line)) == "tournament"]
        if found:
            return found[0]
    raise AssertionError("the README shows no `trader tournament RUN ...` command")


@pytest.mark.slow
def test_the_tours_tournament_learns(tmp_path: Path, monkeypatch) -> None:
    """At the README's own budget (no tiny budget here) the tour's tournament learns the planted
    edge: its best pod's Sharpe ratio on the test period is above equal weight's (issue 75, finding 3:
    without the market preset it was 0.47 against equal weight's 0.69)."""
    line = tour_tournament()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(budget.ENV, raising=False)
    monkeypatch.setenv("PODRACER_DATA_DIR", str(tmp_path / "data"))
    assert main(line.split()[1:]) == 0, line
    metrics = json.loads((run_dir(line, {}) / rundir.REPORT_JSON).read_text())["metrics"]
    best, equal = metrics["best"]["sharpe_ratio"], metrics["equal_weight"]["sharpe_ratio"]
    assert best > equal, f"`{line}`: the best pod's test Sharpe {best:.2f} is not above equal weight's {equal:.2f}"


# ------------------------------------------------------------------ paper trading on Alpaca's paper API, on loopback

from test_paper_alpaca import market, trained  # noqa: F401  (module fixtures: a run on the server's bars)
