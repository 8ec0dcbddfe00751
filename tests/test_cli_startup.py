"""The CLI loads only what a command runs: `trader --help` never pays for torch or scipy.

Each check runs in a fresh interpreter (this test process has torch loaded already)
and reads `sys.modules` there. The light lists that the commands declare their
options with (`trader.names`) must equal what the registries know.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trader.names import ALGOS

HEAVY = ("torch", "scipy")


def _loaded_after(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; return which of `HEAVY` it loaded, and its output."""
    script = (
        "import contextlib, io, json, sys\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        + "".join(f"    {line}\n" for line in code.splitlines())
        + f"print(json.dumps({{'heavy': sorted(m for m in {HEAVY!r} if m in sys.modules), 'out': out.getvalue()}}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_cli_loads_no_torch_nor_scipy() -> None:
    assert _loaded_after("import podracer.cli")["heavy"] == []


@pytest.mark.parametrize("argv", [["--help"], ["data", "--help"], ["train", "--help"]])
def test_help_loads_no_torch_nor_scipy(argv: list[str]) -> None:
    loaded = _loaded_after(f"from podracer.cli import main\ncode = main({argv!r})\nassert code == 0, code")
    assert loaded["heavy"] == []
    assert "Usage: trader" in loaded["out"]


def test_the_probe_sees_a_heavy_import() -> None:
    """The checks above can fail: the agents, which a training command imports, load torch."""
    assert _loaded_after("import trader.agents")["heavy"] == ["torch"]


def test_the_edge_rule_does_not_import_the_synthetic_market() -> None:
    """The edge module once ran the synthetic market from its script entry point."""
    loaded = _loaded_after("import market_envs.data.edge\nprint('market_envs.data.synthetic' in sys.modules)")
    assert loaded["out"].strip() == "False" and loaded["heavy"] == ["torch"]


def test_the_light_algorithm_names_are_the_registry() -> None:
    from trader.agents import SPEC_MODULES, get_spec

    assert tuple(SPEC_MODULES) == ALGOS
    assert [get_spec(name).name for name in ALGOS] == list(ALGOS)
