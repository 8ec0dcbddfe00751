"""The formatter owns the layout: every Python file is as `ruff format` (pinned in the dev
extras, configured in pyproject.toml) writes it, so nobody lays code out by hand."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff() -> str:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is missing: `make test` installs it with the dev extras (pyproject.toml)")
    return found


def test_every_file_is_as_the_formatter_writes_it() -> None:
    done = subprocess.run([ruff(), "format", "--check", "."], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"run `ruff format .`; these differ:\n{done.stdout}{done.stderr}"


def test_the_check_fails_on_a_file_laid_out_by_hand(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "bad.py").write_text("x = [1,\n  2]\n")
    done = subprocess.run([ruff(), "format", "--check", "."], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 1 and "bad.py" in done.stdout
