"""What a run directory holds for a backtest: its data set, env rules and strategies.

One reader for every kind of run directory (docs/contracts.md), so that `trader
backtest RUN_DIR`, `trader baselines RUN_DIR` and the tournament's final backtest
put the same rows in the report:

- a training run (`trader.train`): ``config.toml`` names the data set and env rules;
  each checkpoint in ``checkpoints/`` is a strategy (``best``, ``final``);
- a tournament (`tournament.run`): ``tournament.toml`` names them; the strategies are
  ``best`` (the leaderboard's first pod) and, when pods cleared the membership bar,
  ``ensemble`` (the members ``selection.json`` lists, with their weights);
- either, or a folder holding only baselines: each ``baselines/<name>/`` written by
  `trader.baselines` is a strategy named ``<name>``.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from market_envs.env import EnvConfig
from trader import rundir
from trader.backtest.engine import recorded_rules
from trader.environments import run_periods
from trader.errors import UserError


@dataclass
class RunContents:
    """A run directory's data set, trading rules and strategies, as found on disk."""

    run_dir: Path
    kind: str
    """"train", "tournament" or "baselines" (a folder with baselines only)."""
    dataset: str | None
    """The data set recipe (name or path) the run trained on; None when none is recorded."""
    env_config: EnvConfig | None
    """The env rules the run trained under; None when none is recorded."""
    checkpoints: dict[str, Path] = field(default_factory=dict)
    """Strategy name -> checkpoint path (without suffix)."""
    ensemble: list[Path] = field(default_factory=list)
    """A tournament's ensemble members' checkpoints (the ``ensemble`` strategy), best
    first; empty when none was formed (`tournament.selection`)."""
    ensemble_weights: list[float] = field(default_factory=list)
    """The members' weights, in the order of ``ensemble``."""
    result: str | None = None
    """A tournament's result, "best" or "ensemble" (``selection.json``); None otherwise."""
    baselines: list[Path] = field(default_factory=list)
    """``baselines/<name>/`` folders with a ``baseline.json`` sidecar."""
    periods: dict[str, list[str]] | None = None
    """Explicit train / validation / test bounds the run trained under (a walk-forward
    fold's windows), replacing the data set's split dates; None: the split dates."""

    def data(self, recipe: str) -> Any:
        """The data set ``recipe`` as the run saw it: loaded once per process
        (`trader.backtest.periods.load_dataset`), cut to the run's own periods (a view)."""
        from trader.backtest import periods

        return periods.load_dataset(recipe).with_periods(self.periods)


def read_run(run_dir: str | os.PathLike[str]) -> RunContents:
    """Everything `trader backtest` and `trader baselines` need from `run_dir`."""
    root = Path(run_dir)
    if root.exists() and not root.is_dir():
        raise UserError(f"RUN_DIR {root} is not a directory")
    tournament = rundir.read_toml(root / rundir.TOURNAMENT, missing_ok=True)
    if tournament:
        contents = _tournament(root, tournament)
    else:
        config = rundir.read_toml(root / rundir.CONFIG, missing_ok=True)
        env = config.get("env") if isinstance(config.get("env"), dict) else {}
        dataset = config.get("dataset") or env.get("dataset")
        rules = recorded_rules(env["env_config"], str(root / rundir.CONFIG)) if "env_config" in env else None
        contents = RunContents(root, "train", dataset if isinstance(dataset, str) else None, rules,
                               checkpoints=_checkpoints(root), periods=run_periods(env))  # fmt: skip
    contents.baselines = baseline_folders(root)
    if contents.kind == "train" and not contents.checkpoints and not (root / rundir.CONFIG).is_file():
        contents.kind = "baselines"
    return contents


def _tournament(root: Path, config: dict[str, Any]) -> RunContents:
    """A tournament's best pod (leaderboard.json) and its ensemble and result (selection.json)."""
    rules = recorded_rules(config.get("env_config") or {}, str(root / rundir.TOURNAMENT))
    env = config.get("env")
    board = root / rundir.LEADERBOARD
    entries: list[dict[str, Any]] = []
    if board.is_file():
        values = rundir.read_json(board, version=rundir.LEADERBOARD_VERSION)
        entries = list(values.get("entries") or [])
    paths = [root / e["checkpoint"] for e in entries if e.get("checkpoint")]
    paths = [p for p in paths if p.with_suffix(".json").is_file()]
    checkpoints = {"best": paths[0]} if paths else {}
    contents = RunContents(root, "tournament", env if isinstance(env, str) else None, rules,
                           checkpoints=checkpoints, periods=run_periods(config))  # fmt: skip
    selected = root / rundir.SELECTION
    if selected.is_file():
        values = rundir.read_json(selected, version=rundir.SELECTION_VERSION)
        contents.ensemble = [root / path for path in values.get("member_checkpoints") or []]
        contents.ensemble_weights = [float(w) for w in values.get("weights") or []]
        contents.result = values.get("result")
    return contents


def _checkpoints(root: Path) -> dict[str, Path]:
    """name -> checkpoint path (without suffix) for every sidecar in RUN_DIR/checkpoints."""
    folder = root / rundir.CHECKPOINTS
    if not folder.is_dir():
        return {}
    return {p.stem: p.with_suffix("") for p in sorted(folder.glob("*.json"))}


def baseline_folders(root: Path) -> list[Path]:
    """``RUN_DIR/baselines/<name>/`` folders that hold a ``baseline.json``, sorted by name."""
    folder = root / rundir.BASELINES_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if (p / rundir.BASELINE_SIDECAR).is_file())


def run_strategies(contents: RunContents, device: str = "cpu") -> dict[str, Any]:
    """Strategy name -> what `run_backtest` takes: checkpoint paths, the tournament's
    ensemble (an `EnsemblePolicy`), and each finished baseline (an `ExternalPolicy`)."""
    strategies: dict[str, Any] = dict(contents.checkpoints)
    if contents.ensemble:
        from trader.agents.ensemble import load_ensemble

        strategies["ensemble"] = load_ensemble(contents.ensemble, device, contents.ensemble_weights or None)
    if contents.baselines:
        from trader.baselines.folder import load_strategy

        for folder in contents.baselines:
            strategy = load_strategy(folder, device)
            if strategy is not None:  # a baseline that failed to train has no model
                strategies[folder.name] = strategy
    return strategies


def backtest_config(contents: RunContents, *, initial_cash: float | None = None, cost: float | None = None,
                    tear_sheet: bool = True, costs: Any = None, breakeven: bool = False) -> Any:  # fmt: skip
    """The run's capital, costs and env rules (when it records them), unless overridden.

    :param cost: one commission rate per side instead of the run's (its other cost terms kept).
    :param costs: a `market_envs.costs.NamedCosts` every strategy trades under instead of the run's model.
    :param breakeven: also run the multiples of the cost model (`BREAKEVEN_MULTIPLES`) for each
        strategy's breakeven cost.
    """
    from market_envs.costs import NamedCosts, described
    from trader.backtest.engine import BREAKEVEN_MULTIPLES, BacktestConfig

    rules = contents.env_config or EnvConfig()
    named = NamedCosts.from_config(rules)  # named by what it charges: "institutional", "flat 0.05% per side"
    if costs is not None:
        named = costs
    elif cost is not None:
        named = described(cost, cost, named.costs)
    config = BacktestConfig(
        initial_cash=rules.initial_cash if initial_cash is None else initial_cash,
        tear_sheet=tear_sheet,
        policy_env=rules,
        cost_multiples=BREAKEVEN_MULTIPLES if breakeven else (),
    )
    return config.with_costs(named)


def backtest_run(run_dir: str | os.PathLike[str], *, dataset: str | None = None, period: str = "test",
                 names: list[str] | None = None, baselines: list[str] | None = None, config: Any = None,
                 device: str = "cpu", initial_books: dict[str, Any] | None = None) -> Any:  # fmt: skip
    """Backtest a run directory's strategies (`run_strategies`) beside the built-in
    baselines and write the report into it; returns the `BacktestResult`.

    :param names: only these strategies of the run (None: all of them).
    :param baselines: built-in baselines (None: every one that applies).
    :param config: a `BacktestConfig`; default `backtest_config(contents)`.
    :param initial_books: strategy name -> the `trader.backtest.engine.Book` it starts
        from (`run_backtest`); default: all cash.
    """
    from trader.backtest.engine import run_backtest
    from trader.backtest.periods import select_period

    contents = read_run(run_dir)
    recipe = dataset or contents.dataset
    if not recipe:
        raise UserError(f"no data set given: pass --dataset RECIPE ({Path(run_dir)} records none)")
    strategies = run_strategies(contents, device)
    if names is not None:
        strategies = {name: strategies[name] for name in names}
    data = contents.data(recipe)
    strategies = trading_in(strategies, select_period(data, period)[0].timestamps[0])
    config = config or backtest_config(contents)
    trials = contents_trials(contents)
    selection = run_selection(data, trials, config, device, contents.result) if period != "validation" else None
    if selection is not None and contents.result is not None:
        selection["tournament"] = tournament_result(contents.run_dir)
    return run_backtest(data, strategies, baselines=baselines, period=period, config=config, run_dir=run_dir,
                        device=device, trials=trials, selection=selection, initial_books=initial_books)  # fmt: skip


def contents_trials(contents: RunContents) -> dict[str, Any]:
    """Strategy name -> the trials it was selected from (`trader.backtest.evidence.run_trials`)."""
    from trader.backtest.evidence import run_trials

    best = contents.checkpoints.get("best")
    best_pod = best.parent.parent.name if contents.kind == "tournament" and best is not None else None
    return run_trials(contents.run_dir, contents.kind, best_pod, contents.baselines)


def tournament_result(run_dir: Path) -> dict[str, Any]:
    """A tournament's result as ``selection.json`` states it: ``{"result", "sentence"}``."""
    values = rundir.read_json(run_dir / rundir.SELECTION, version=rundir.SELECTION_VERSION)
    return {"result": values["result"], "sentence": values["sentence"]}


def run_selection(data: Any, trials: dict[str, Any], config: Any, device: str,
                  result: str | None = None) -> dict[str, Any] | None:  # fmt: skip
    """The selection statistics of the run's own trials, on the validation period, with
    the run's result as the winner (``best``, or a tournament's ``ensemble`` when that is
    its result): the yardsticks (equal-weight, the benchmark) are backtested there for SPA."""
    from dataclasses import replace

    from trader.backtest.engine import run_backtest
    from trader.backtest.evidence import selection_evidence

    chosen = trials.get(result or "best")
    if chosen is None or chosen.returns is None:
        return None
    yardsticks = [b for b in ("equal_weight", "benchmark") if b != "benchmark" or data.benchmark is not None]
    plain = replace(config, tear_sheet=False)
    validation = run_backtest(data, {}, baselines=yardsticks, period="validation", config=plain, device=device)
    daily = validation.daily_returns
    return selection_evidence(chosen, {name: daily[name] for name in yardsticks if name in daily.columns},
                              labels=validation.labels())  # fmt: skip


def trading_in(strategies: dict[str, Any], start: Any) -> dict[str, Any]:
    """Drop, with a warning, strategies that trade only from a later date (FinRL's
    ensemble trades from the test period on: its windows are trained on earlier data)."""
    from trader.backtest.strategies import ExternalPolicy

    kept = {}
    for name, strategy in strategies.items():
        first = strategy.starts[0] if isinstance(strategy, ExternalPolicy) else None
        if first is not None and start < first:
            warnings.warn(f"{name} left out: it trades from {first} on, the period starts at {start}", stacklevel=2)
            continue
        kept[name] = strategy
    return kept
