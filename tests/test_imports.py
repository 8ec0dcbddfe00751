"""Library code and tests import no private name (``_x``) from another package:
either the name is public, or the caller lives in the wrong place."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("trader", "tournament", "market_envs", "dashboards", "tests", "benchmarks")


def private_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``from other.package.module import _name`` lines of one file under ``root``."""
    package = ".".join(path.relative_to(root).parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        home = node.module.rsplit(".", 1)[0] if "." in node.module else node.module
        if package in (home, node.module):
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                found.append(f"{path.relative_to(root)}:{node.lineno}: from {node.module} import {alias.name}")
    return found


def test_no_private_name_is_imported_across_packages() -> None:
    offenders = [line for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))
                 for line in private_imports(path)]  # fmt: skip
    assert not offenders, "\n".join(offenders)


def test_the_check_finds_a_private_import_but_not_one_within_the_package(tmp_path: Path) -> None:
    probe = tmp_path / "trader" / "cli" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("from trader.training import _resolve_config\nfrom trader.cli.train import _progress\n")
    assert private_imports(probe, tmp_path) == ["trader/cli/probe.py:1: from trader.training import _resolve_config"]


def test_the_python_apis_calls_are_plain_functions_with_their_signatures_and_docstrings() -> None:
    """`trader.train`, `trader.backtest`, `trader.baselines` and `trader.act` are the functions
    themselves (help() and IDEs show their parameters), imported on first use; their modules
    are `trader.training`, `trader.backtesting` and `trader.libraries`."""
    import inspect
    import subprocess
    import sys
    import types

    import trader

    first = {"train": "algo", "backtest": "data", "baselines": "run_dir", "act": "run_dir"}
    for name, parameter in first.items():
        function = getattr(trader, name)
        assert isinstance(function, types.FunctionType), name
        assert next(iter(inspect.signature(function).parameters)) == parameter
        assert function.__doc__ and len(function.__doc__) > 200, name
    from trader.backtesting import backtest
    from trader.libraries import baselines
    from trader.training import train

    assert (trader.train, trader.backtest, trader.baselines) == (train, backtest, baselines)
    light = "import sys, trader; print(any(m.startswith(('torch', 'trader.training')) for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", light], capture_output=True, text=True, check=True).stdout.strip() == "False"
