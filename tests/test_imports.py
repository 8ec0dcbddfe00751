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
    offenders = [
        line for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py")) for line in private_imports(path)
    ]
    assert not offenders, "\n".join(offenders)


def test_the_check_finds_a_private_import_but_not_one_within_the_package(tmp_path: Path) -> None:
    probe = tmp_path / "podracer" / "cli" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("from trader.training import _snapshot_probe\nfrom podracer.cli.train import _progress\n")
    assert private_imports(probe, tmp_path) == ["podracer/cli/probe.py:1: from trader.training import _snapshot_probe"]


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
    assert (
        subprocess.run([sys.executable, "-c", light], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )


# --------------------------------------------------------------------------- floors

FLOORS = {"market_envs": 0, "trader": 1, "tournament": 2, "podracer": 3, "dashboards": 3}
"""Each floor is a top-level package: the environments, the trader core (agents, training,
backtesting, metrics, stats, rundir), the tournament, and the application (the CLI, the demo,
walk-forward, the experiment, paper trading, presets) beside the dashboards."""
PACKAGES = tuple(FLOORS)


def floor(module: str) -> int:
    """The floor of `module`: its top-level package's."""
    return FLOORS[module.split(".")[0]]


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of `PACKAGES` under `root` by dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules that `path` imports anywhere in it: at the top, inside functions, or
    for type checking (``from package import module`` names the module)."""

    def owner(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {m for m in map(owner, names) if m}
    return found


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports(path, known) - {name} for name, path in known.items()}


def upward(edges: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in edges.items() for b in targets if floor(b) > floor(a))


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_floors_only_point_down() -> None:
    """market_envs -> the trader core -> tournament -> the application and dashboards: no module
    imports one on a higher floor, not even inside a function or for type checking."""
    offenders = upward(graph())
    assert not offenders, "\n".join(offenders)


def test_no_two_modules_import_each_other_round_a_circle() -> None:
    assert circles(graph()) == []


def folder_of(module: str, root: Path = ROOT) -> str:
    """The folder a module lives in, dotted: a package is its own folder."""
    path = modules(root)[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def folder_graph(edges: dict[str, set[str]], root: Path = ROOT) -> dict[str, set[str]]:
    """Imports between folders that do not hold one another: a folder may lean on its parent's
    modules (trader.errors) and its parent on it, but two side folders lean one way only."""

    def apart(a: str, b: str) -> bool:
        return not (a == b or a.startswith(b + ".") or b.startswith(a + "."))

    found: dict[str, set[str]] = {}
    for module, targets in edges.items():
        home = folder_of(module, root)
        found.setdefault(home, set()).update(t for t in map(lambda m: folder_of(m, root), targets) if apart(home, t))
    return found


def test_no_two_folders_import_each_other_round_a_circle() -> None:
    assert circles(folder_graph(graph())) == []


def test_the_floor_check_finds_an_import_inside_a_function_and_a_circle(tmp_path: Path) -> None:
    for name, text in {
        "market_envs/__init__.py": "",
        "market_envs/env.py": "def f():\n    from trader.rundir import x\n",
        "trader/__init__.py": "",
        "trader/rundir.py": "from trader import stats\n",
        "trader/stats.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import trader.rundir\n",
        "podracer/walkforward.py": "from tournament import run\n",
        "tournament/__init__.py": "from market_envs import env\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "dashboards").mkdir()
    edges = graph(tmp_path)
    assert upward(edges) == ["market_envs.env -> trader.rundir"]  # the application may drive a tournament
    assert circles(edges) == [["trader.rundir", "trader.stats"]]


def test_the_folder_check_finds_two_side_folders_round_a_circle(tmp_path: Path) -> None:
    for name, text in {
        "trader/__init__.py": "from trader.backtesting import engine\n",
        "trader/errors.py": "",
        "trader/backtesting/__init__.py": "",
        "trader/backtesting/engine.py": "from trader.errors import x\ndef f():\n    from trader.libraries.folder import y\n",
        "trader/libraries/__init__.py": "",
        "trader/libraries/folder.py": "",
        "trader/libraries/run.py": "from trader.backtesting.engine import z\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    for package in ("market_envs", "tournament", "podracer", "dashboards"):
        (tmp_path / package).mkdir()
    edges = graph(tmp_path)
    assert circles(edges) == []  # no two modules import each other
    assert circles(folder_graph(edges, tmp_path)) == [["trader.backtesting", "trader.libraries"]]


def test_the_dashboard_reads_run_files_through_the_run_directory_module_not_the_application() -> None:
    """File schemas the dashboard reads live in `trader.rundir`; it imports nothing of `podracer`."""
    edges = graph()
    offenders = sorted(
        f"{a} -> {b}"
        for a, targets in edges.items()
        if a.startswith("dashboards")
        for b in targets
        if b.startswith("podracer")
    )
    assert not offenders, "\n".join(offenders)


# --------------------------------------------------------------------------- private names

NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})
"""A NamedTuple's public methods and fields start with an underscore to stay out of its fields' way."""

OTHER_LIBRARIES = {
    "_C": "torch's C extension (torch._C._storage_Use_Count: the shared tables' reference count)",
    "_storage_Use_Count": "torch._C's storage reference count",
    "_cdata": "a torch storage's handle, for its reference count",
    "_foreach_lerp_": "torch's fused multi-tensor lerp, the target networks' Polyak update",
    "_exit": "os._exit, a forked shard worker's exit",
    "_session": "alpaca-py's HTTP session, given a timeout it does not set",
    "_retry": "alpaca-py's fixed retries, replaced by our bounded back-off",
    "_seeds": "Stable-Baselines3's VecEnv seeds, which its subclass sets",
    "_reset_seeds": "Stable-Baselines3's VecEnv hook",
    "_reset_options": "Stable-Baselines3's VecEnv hook",
    "_get_indices": "Stable-Baselines3's VecEnv helper",
    "_fused_adam_": "torch's fused Adam kernel, which torch.optim.Adam(fused=True) calls: a pod group's per-row Adam",
    "_foreach_norm": "torch's multi-tensor norm, which nn.utils.clip_grad_norm_ calls: per-row clipping",
}
"""Private names of other libraries that the product uses, each with why: they are theirs, not ours."""


def defined_names(tree: ast.AST) -> set[str]:
    """The names a module defines: its functions, classes, assigned names and attributes."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            found.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
    return found


def private_attributes(path: Path, root: Path = ROOT) -> list[str]:
    """``module._name`` and ``object._attr`` of one file where the module does not define the
    name itself: a private name of another module (or of another library, `OTHER_LIBRARIES`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = defined_names(tree)
    return [
        f"{path.relative_to(root)}:{node.lineno}: .{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and node.attr not in own | NAMEDTUPLE_API | set(OTHER_LIBRARIES)
    ]


def private_imports_across_modules(path: Path, root: Path = ROOT) -> list[str]:
    """``from other.module import _name`` lines of one file, within its package too."""
    module = ".".join(path.relative_to(root).with_suffix("").parts)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level and node.module != module:
            found += [
                f"{path.relative_to(root)}:{node.lineno}: from {node.module} import {alias.name}"
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            ]
    return found


def test_no_product_module_uses_a_private_name_of_another() -> None:
    """Not by import, not as ``module._name``, not as ``object._attr``: if another module needs it,
    it is public; if it is private, no other module should need it."""
    offenders = [
        line
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in private_attributes(path) + private_imports_across_modules(path)
    ]
    assert not offenders, "\n".join(offenders)


def test_the_private_name_check_sees_each_form(tmp_path: Path) -> None:
    probe = tmp_path / "market_envs" / "rollout.py"
    probe.parent.mkdir(parents=True)
    probe.write_text(
        "from market_envs.env import _step_kernel, step\n"
        "import market_envs.env as env_module\n"
        "class Runner:\n"
        "    def __init__(self, env):\n"
        "        self._own = env._rules\n"
        "        self._own.fill._replace(native=False)\n"
        "        env_module._compile_options('cpu')\n"
    )
    assert private_imports_across_modules(probe, tmp_path) == [
        "market_envs/rollout.py:1: from market_envs.env import _step_kernel"
    ]
    assert sorted(private_attributes(probe, tmp_path)) == [
        "market_envs/rollout.py:5: ._rules",
        "market_envs/rollout.py:7: ._compile_options",
    ]


def test_the_env_config_and_the_run_files_load_without_torch() -> None:
    """`market_envs.config` (the env's rules and `EnvConfig`) and `trader.rundir` (every file of a
    run) import no torch: the dashboard and a run's readers load them light."""
    import subprocess
    import sys

    for module in ("market_envs.config", "trader.rundir"):
        probe = f"import sys, {module}; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3])"
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
        assert done.stdout.strip() == "[]", f"{module} loads torch: {done.stdout}"
