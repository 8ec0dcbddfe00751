"""Every script in benchmarks/ still imports: its imports resolve against today's code.

A benchmark is run by hand, often sessions after the code it imports has moved; one that no
longer starts (benchmarks/validation_pass.py imported two functions tournament_value.py had
lost) is found here instead of on the day its figure is needed. Only the top level of each
script runs (imports and definitions): their ``main`` is behind ``__name__ == "__main__"``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))


def test_there_are_scripts_to_check() -> None:
    assert len(SCRIPTS) > 20


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_script_imports(path: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the scripts import each other by module name
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, path.stem, module)  # dataclasses look their module up here
    spec.loader.exec_module(module)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--arms", "pbt,bogus"], "unknown arm(s) ['bogus']"),
        (["--arms", "pbt", "--keep-runs", "kept", "--out", "rows.json"], "trains into --keep-runs only"),
        (["--eval-every", "-1", "--keep-runs", "kept"], "--eval-every must be >= 0, got -1"),
    ],
)
def test_tournament_value_refuses_bad_input_before_any_work(args: list[str], says: str, tmp_path: Path) -> None:
    """Exit 2 and nothing written: an unknown arm; rows asked of fewer arms than all (they are trained for
    tournament_lineage.py only, with nothing to pair); a negative --eval-every."""
    import subprocess

    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "tournament_value.py"), *args],
        cwd=tmp_path,
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
    import numpy as np

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from tournament_value import NOT_WORSE_MARGIN, not_worse

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
