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
    probe.write_text("from trader.train import _resolve_config\nfrom trader.cli.train import _progress\n")
    assert private_imports(probe, tmp_path) == ["trader/cli/probe.py:1: from trader.train import _resolve_config"]
