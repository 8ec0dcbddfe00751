"""benchmarks/ is the maintained suite: every file is run by run_all.py, named as run apart, or a helper;
every script still imports against today's code and answers ``--help``.

A benchmark is run by hand, often sessions after the code it imports has moved; one that no
longer starts (benchmarks/validation_pass.py imported two functions tournament_value.py had
lost) is found here instead of on the day its figure is needed. Only the top level of each
script runs (imports and definitions): their ``main`` is behind ``__name__ == "__main__"``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.run_all import HELPERS, ORDER, SEPARATE

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))
MAINTAINED = [*ORDER, *(Path(name).stem for name in SEPARATE if name.endswith(".py"))]
RESULTS = BENCHMARKS / "RESULTS.md"
NOTEBOOK = BENCHMARKS.parent / "docs" / "notebook"


def test_there_are_scripts_to_check() -> None:
    assert len(SCRIPTS) > 20


def test_every_file_is_in_the_suite_run_apart_or_a_helper() -> None:
    """No one-off beside the suite: a new script joins run_all.py's ORDER, or SEPARATE with why."""
    files = sorted(p.name for p in BENCHMARKS.iterdir() if p.is_file() and p.suffix in (".py", ".sh", ".c"))
    listed = [f"{name}.py" for name in ORDER] + list(SEPARATE) + list(HELPERS)
    assert len(listed) == len(set(listed)), "a file is listed twice in run_all.py"
    assert sorted(listed) == files


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_script_imports(path: Path, monkeypatch) -> None:
    name = f"benchmarks.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # dataclasses look their module up here
    spec.loader.exec_module(module)


@pytest.mark.parametrize("name", MAINTAINED)
def test_every_maintained_script_answers_help(name: str, monkeypatch, capsys) -> None:
    """Its arguments parse: ``--help`` prints the usage and exits 0 (in this process; main reads
    its argv or sys.argv)."""
    module = importlib.import_module(f"benchmarks.{name}")
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
    with pytest.raises(SystemExit) as stop:
        module.main(["--help"]) if inspect.signature(module.main).parameters else module.main()
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("usage: ")


def test_a_script_that_imports_a_sibling_runs_as_a_file_from_anywhere(tmp_path: Path, monkeypatch, capsys) -> None:
    """``python benchmarks/walkforward.py`` imports ``benchmarks.significance`` from another folder, with the
    checkout's root nowhere on sys.path: the script puts it there itself (run here as a file, in this process)."""
    root = BENCHMARKS.parent
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(BENCHMARKS)] + [p for p in sys.path if p and Path(p).resolve() != root])
    for name in [name for name in sys.modules if name == "benchmarks" or name.startswith("benchmarks.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "argv", ["walkforward.py", "--help"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(BENCHMARKS / "walkforward.py"), run_name="__main__")
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("usage: walkforward.py")
    assert Path(sys.modules["benchmarks.significance"].__file__).resolve() == BENCHMARKS / "significance.py"


def test_run_all_refuses_an_unknown_name_before_running_any(capsys) -> None:
    from benchmarks import run_all

    assert run_all.main(["dsr_calibration", "no_such_benchmark"]) == 2
    out = capsys.readouterr()
    assert "no benchmark named 'no_such_benchmark'" in out.err
    assert "===" not in out.out  # dsr_calibration, named first, did not run


def test_dsr_calibration_prints_a_share_per_edge(capsys) -> None:
    """A tiny budget of benchmarks/dsr_calibration.py: one row per edge, both shares in [0, 1]."""
    from benchmarks import dsr_calibration

    assert dsr_calibration.main(["--edges", "0,3", "--draws", "20", "--trials", "4", "--days", "60"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [row.split("|")[1].strip() for row in rows] == ["0", "3"]
    for row in rows:
        shares = [float(cell) for cell in row.strip("|").split("|")[1:]]
        assert len(shares) == 2 and all(0.0 <= share <= 1.0 for share in shares)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "args", "header"),
    [
        ("cli_startup.py", ["--runs", "1"], "| command | median of 1 |"),
        ("network_speed.py", ["--stocks", "4", "--repeats", "1"], "| stocks | network | hidden |"),
        ("pod_group_step.py", ["--pods", "1,2", "--repeats", "1"], "| pods P | validation pass ms |"),
        ("pod_group_train.py", ["--pods", "2", "--pod-steps", "256", "--num-envs", "2"], "| 2 |"),
        ("train_throughput.py", ["--quick", "--no-sb3"], "| learner | device | envs x steps |"),
    ],
)
def test_a_script_at_a_tiny_budget_prints_its_table(script: str, args: list[str], header: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert header in done.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--arms", "pbt,bogus"], "unknown arm(s) ['bogus']"),
        (["--arms", "pbt", "--keep-runs", "kept", "--out", "rows.json"], "trains into --keep-runs only"),
        (["--eval-every", "-1", "--keep-runs", "kept"], "--eval-every must be >= 0, got -1"),
    ],
)
def test_tournament_value_refuses_bad_input_before_any_work(args: list[str], says: str, tmp_path: Path) -> None:
    """Exit 2 and nothing written: an unknown arm; rows asked of fewer arms than all (with nothing to pair,
    they are trained into --keep-runs only); a negative --eval-every."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "tournament_value.py"), *args],
        cwd=tmp_path,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(BENCHMARKS.parent)},
    )
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert not (tmp_path / "kept").exists()


def test_tournament_values_not_worse_test_is_calibrated_at_its_margin(monkeypatch) -> None:
    """The "not worse" test of tournament_value.py: a tie is not worse (p = 1/1024 over 10 seeds), a gap
    of twice the margin is (p near 1), and on the margin's boundary, with symmetric noise, it rejects at
    most about 5% of the time at the 5% level (2,000 simulated sets of 10 seeds)."""
    from benchmarks.tournament_value import NOT_WORSE_MARGIN, not_worse

    rng = np.random.default_rng(11)
    other = list(7.4 + 0.02 * rng.standard_normal(10))
    assert not_worse(other, other) == pytest.approx(1 / 1024)
    assert not_worse([x * (1 - 2 * NOT_WORSE_MARGIN) for x in other], other) > 0.99
    rejected = 0
    for _ in range(2_000):
        b = 7.4 + 0.05 * rng.standard_normal(10)
        a = b * (1 - NOT_WORSE_MARGIN) + 0.05 * rng.standard_normal(10)
        rejected += not_worse(list(a), list(b)) < 0.05
    assert rejected / 2_000 < 0.065


def test_results_is_short_and_every_maintained_script_feeds_it() -> None:
    """RESULTS.md holds the current tables only (the history is docs/notebook/), and names every script of the
    suite and every one run apart."""
    text = RESULTS.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 800
    assert [name for name in [*(f"{n}.py" for n in ORDER), *SEPARATE] if name not in text] == []


def test_every_claim_names_its_command_and_the_commit_that_recorded_it() -> None:
    text = RESULTS.read_text(encoding="utf-8")
    overviews = {"What is met and what is not", "Sections cited elsewhere, now in the notebook"}
    claims = [
        section
        for section in re.split(r"^## ", text, flags=re.MULTILINE)[1:]
        if section.splitlines()[0] not in overviews
    ]
    assert len(claims) > 20
    for section in claims:
        title = section.splitlines()[0]
        assert re.search(r"recorded at\s+[0-9a-f]{7}", section, flags=re.IGNORECASE), f"{title}: no recording commit"
        assert re.search(r"(python|trader|bash) ", section), f"{title}: no command"


def test_every_section_moved_to_the_notebook_is_there_under_its_title() -> None:
    """The titles the README, the docs and the code cite still lead somewhere: RESULTS.md's table of moved
    sections names the notebook page, and the page holds the title; every page the notebook's index lists exists."""
    text = RESULTS.read_text(encoding="utf-8")
    moved = re.findall(r"^\| (.+?) \| \[[^\]]+\]\(\.\./docs/notebook/([^)]+)\) \|$", text, flags=re.MULTILINE)
    assert len(moved) > 10
    for title, page in moved:
        assert title.split(" (a paragraph of")[0] in (NOTEBOOK / page).read_text(encoding="utf-8"), (title, page)
    index = (NOTEBOOK / "index.md").read_text(encoding="utf-8")
    pages = re.findall(r"\]\((2026-[^)]+\.md)\)", index)
    assert len(pages) > 20 and all((NOTEBOOK / page).is_file() for page in pages)
