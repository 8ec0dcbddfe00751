"""What a run directory holds for a backtest: its data set, env rules and strategies.

One reader for every kind of run directory (docs/contracts.md), so that `trader
backtest RUN_DIR`, `trader baselines RUN_DIR` and the tournament's final backtest
put the same rows in the report. It gathers what `trader.rundir` reads (the kind,
`trader.rundir.run_kind`, decided there for the dashboard too; the checkpoints, the
baseline folders, the recorded rules) into a `RunContents`:

- a training run (`trader.train`): ``config.toml`` names the data set and env rules;
  each checkpoint in ``checkpoints/`` is a strategy (``best``, ``final``);
- a tournament (`tournament.run`): ``tournament.toml`` names them; the strategies are
  ``best`` (the leaderboard's first pod) and, when pods cleared the membership bar,
  ``ensemble`` (the members ``selection.json`` lists, with their weights);
- either, or a folder holding only baselines: each ``baselines/<name>/`` written by
  `trader.baselines` is a strategy named ``<name>``.

Where a report goes (`backtest_run`, `backtest`): the run backtested as it was
configured (its test period, all its strategies and the built-in baselines, its data
set, capital and costs) writes the run's **own** report (``report.json``,
``report.md``, ``backtests/``, tear sheets, at the top of the run directory); any
other backtest (other strategies, period, costs, capital or data) writes a report of
its own, ``reports/<name>/``, named by what differs (`report_name`), so the run's own
result is never replaced by another. A report already there is replaced only with
``overwrite``, whole (no series of a strategy it no longer has is left beside it).
A strategy whose files are gone is an error naming the missing file, never a row
silently left out.

A tournament backtested with all of its strategies also places its result among its own pods
(`tournament_spread`, `trader.backtesting.spread`: every kept pod in one more pass over the same
period, under the same capital, costs and rules), so that the tournament's final backtest,
`trader backtest RUN_DIR` and `trader baselines RUN_DIR` write the same section.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from market_envs.costs import CostModel
from market_envs.config import EnvConfig
from trader import rundir
from trader.backtesting.baseline_folder import load_strategy
from trader.environments import run_periods
from trader.folds import Windows
from trader.spec import windows_from_dict
from trader.errors import CheckpointError, UserError
from trader.names import BASELINES


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
    windows: Windows | None = None
    """The same windows as bar positions, where the run records them so (a tournament's
    market, `trader.spec.MarketSpec.to_dict`): they win over ``periods``."""
    spec: Any = None
    """The `trader.spec.MarketSpec` the caller handed `read_run` (a walk-forward fold's):
    then the data set, rules and windows are its own, not read from the files."""
    trained: tuple[str, ...] = ()
    """The checkpoints the run's training writes, as its config.toml says (`trader.train`:
    ``final``, and ``best`` where it validates); () for other runs."""

    @property
    def records_run(self) -> bool:
        """The folder records a run (config.toml or tournament.toml): its own backtest is
        defined (`is_configured`); a folder of baselines only, or a new one, is not."""
        return (self.run_dir / rundir.CONFIG).is_file() or (self.run_dir / rundir.TOURNAMENT).is_file()

    def data(self, recipe: str) -> Any:
        """The data set ``recipe`` as the run saw it: loaded once per process
        (`trader.backtesting.periods.load_dataset`), cut to the run's own periods (a view)."""
        from trader.backtesting import periods

        windows = self.spec.windows if self.spec is not None else self.windows
        if windows is not None:  # bar windows, as the caller holds them or the run records them
            return periods.load_dataset(recipe).with_windows(windows.as_dict())
        return periods.load_dataset(recipe).with_periods(self.periods)


def read_run(run_dir: str | os.PathLike[str], spec: Any = None) -> RunContents:
    """Everything `trader backtest` and `trader baselines` need from `run_dir` (its kind
    as `trader.rundir.run_kind` decides it: a folder that records neither a training run nor
    a tournament is read as one of baselines; a folder of several runs, a walk-forward or an
    experiment, is one `UserError` line naming a run inside it: `trader.rundir.check_one_run`).

    :param spec: the run's `trader.spec.MarketSpec`, when the caller holds it (a walk-forward
        fold): its data set, rules and windows are taken as they are, and only the run's
        strategies (checkpoints, a tournament's leaderboard and selection, baselines) are
        read from the folder; config.toml and tournament.toml are not read."""
    root = Path(run_dir)
    if root.exists() and not root.is_dir():
        raise UserError(f"RUN_DIR {root} is not a directory")
    if spec is not None:
        return _with_spec(root, spec)
    rundir.check_one_run(root)  # a walk-forward or an experiment: one line, before anything is written
    kind = rundir.run_kind(root)
    if kind == "tournament":
        contents = _tournament(root, rundir.read_toml(root / rundir.TOURNAMENT))
    else:
        config = rundir.read_toml(root / rundir.CONFIG, missing_ok=True)  # read once: its [env] below
        env = rundir.env_table(config)
        dataset = config.get("dataset") or env.get("dataset")
        rules = rundir.recorded_rules(env["env_config"], str(root / rundir.CONFIG)) if "env_config" in env else None
        contents = RunContents(
            root,
            "train" if kind == "train" else "baselines",
            dataset if isinstance(dataset, str) else None,
            rules,
            checkpoints=rundir.checkpoints(root),
            periods=run_periods(env),
            trained=_trained(config),
        )
    contents.baselines = rundir.baseline_folders(root)
    return contents


def _trained(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The checkpoints `trader.train` writes for the run config.toml describes: ``final``, and
    ``best`` where it validates (a market or gymnasium env); () for a file it did not write."""
    if "algo" not in config:
        return ()
    env = rundir.env_table(config)
    return ("best", "final") if env.get("kind") in ("market", "gymnasium") else ("final",)


def _with_spec(root: Path, spec: Any) -> RunContents:
    """The run in ``root`` on the caller's spec: its strategies from the folder, the rest from ``spec``."""
    if rundir.run_kind(root) == "tournament":
        contents = _tournament(root, {"env": spec.dataset})
    else:
        trained = ("best", "final") if (root / rundir.CONFIG).is_file() else ()  # a market run of `trader.train`
        checkpoints = rundir.checkpoints(root)
        contents = RunContents(
            root,
            "train" if checkpoints or trained else "baselines",
            spec.dataset,
            None,
            checkpoints=checkpoints,
            trained=trained,
        )
    contents.env_config, contents.spec = spec.rules, spec
    contents.baselines = rundir.baseline_folders(root)
    return contents


def _tournament(root: Path, config: dict[str, Any]) -> RunContents:
    """A tournament's best pod (leaderboard.json) and its ensemble and result (selection.json).
    Its market: tournament.toml's ``[env]`` table (`trader.spec.MarketSpec.to_dict`), or in a file
    of the older form ``env`` (a name) with ``env_config`` and ``periods`` beside it."""
    source = str(root / rundir.TOURNAMENT)
    env = config.get("env")
    windows = None
    if isinstance(env, Mapping):
        rules = rundir.recorded_rules(env.get("rules") or {}, source)
        windows = windows_from_dict(env["windows"]) if env.get("windows") else None
        env = env.get("dataset")
    else:
        rules = rundir.recorded_rules(config.get("env_config") or {}, source)
    board = root / rundir.LEADERBOARD
    entries: list[dict[str, Any]] = []
    if board.is_file():
        values = rundir.read_json(board, version=rundir.LEADERBOARD_VERSION)
        entries = list(values.get("entries") or [])
    paths = [root / e["checkpoint"] for e in entries if e.get("checkpoint")]
    checkpoints = {"best": paths[0]} if paths else {}
    contents = RunContents(
        root,
        "tournament",
        env if isinstance(env, str) else None,
        rules,
        checkpoints=checkpoints,
        periods=run_periods(config),
        windows=windows,
    )
    selected = root / rundir.SELECTION
    if selected.is_file():
        values = rundir.read_json(selected, version=rundir.SELECTION_VERSION)
        contents.ensemble = [root / path for path in values.get("member_checkpoints") or []]
        contents.ensemble_weights = [float(w) for w in values.get("weights") or []]
        contents.result = values.get("result")
    return contents


def expected_checkpoints(contents: RunContents) -> dict[str, Path | list[Path]]:
    """Strategy name -> checkpoint (path without suffix) that the run must hold: a finished
    training run's ``final`` and (validated runs) ``best``, every checkpoint found, and a
    tournament's best pod and ensemble members."""
    expected = dict(contents.checkpoints)
    if contents.kind == "train":  # written by trader.train, which saves `final`, and `best` where it validates
        expected.update({name: contents.run_dir / rundir.CHECKPOINTS / name for name in contents.trained})
    if contents.ensemble:
        expected["ensemble"] = contents.ensemble
    return expected


def check_checkpoints(contents: RunContents, names: Sequence[str] | None = None) -> None:
    """A `CheckpointError` naming the first file missing of a strategy the run holds
    (`expected_checkpoints`; ``names``: only these strategies): a deleted checkpoint is an
    error, never a row silently left out."""
    for name, paths in expected_checkpoints(contents).items():
        if names is not None and name not in names:
            continue
        for path, suffix in (
            (p, s) for p in (paths if isinstance(paths, list) else [paths]) for s in (".json", ".safetensors")
        ):
            if not path.with_suffix(suffix).is_file():
                raise CheckpointError(
                    f"{path.with_suffix(suffix)}: not found: the run's strategy {name!r} "
                    "cannot be backtested (deleted, or its training did not finish)"
                )


def run_strategies(contents: RunContents, device: str = "cpu", names: Sequence[str] | None = None) -> dict[str, Any]:
    """Strategy name -> what `run_backtest` takes: checkpoint paths, the tournament's
    ensemble (an `EnsemblePolicy`), and each finished baseline (an `ExternalPolicy`).
    A strategy whose files are gone is a `CheckpointError` naming the file; ``names``:
    only these of the run's strategies are loaded and checked (None: all)."""
    check_checkpoints(contents, names)
    strategies: dict[str, Any] = {k: v for k, v in contents.checkpoints.items() if names is None or k in names}
    if contents.ensemble and (names is None or "ensemble" in names):
        from trader.agents.ensemble import load_ensemble

        strategies["ensemble"] = load_ensemble(contents.ensemble, device, contents.ensemble_weights or None)
    if contents.baselines:
        for folder in contents.baselines:
            if names is not None and folder.name not in names:
                continue
            strategy = load_strategy(folder, device, contents.spec.rules if contents.spec is not None else None)
            if strategy is not None:  # a baseline that failed to train has no model
                strategies[folder.name] = strategy
    return strategies


def backtest_config(
    contents: RunContents,
    *,
    initial_cash: float | None = None,
    cost: float | None = None,
    tear_sheet: bool = True,
    costs: Any = None,
    breakeven: bool = False,
) -> Any:
    """The run's capital, costs and env rules (when it records them), unless overridden.

    :param cost: one commission rate per side instead of the run's (its other cost terms kept).
    :param costs: a `market_envs.costs.NamedCosts` every strategy trades under instead of the run's model.
    :param breakeven: also run the multiples of the cost model (`BREAKEVEN_MULTIPLES`) for each
        strategy's breakeven cost.
    """
    from market_envs.costs import NamedCosts, described
    from trader.backtesting.config import BREAKEVEN_MULTIPLES, BacktestConfig

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
        recorded_rules=contents.spec is None,  # a spec's rules are the ones its strategies were trained under
    )
    return config.with_costs(named)


def report_has_breakeven(folder: str | os.PathLike[str]) -> bool:
    """Whether the report in ``folder`` holds breakeven costs (no report: False), so that a
    command that writes it again (`trader baselines`) computes them again instead of dropping them."""
    path = Path(folder) / rundir.REPORT_JSON
    values = rundir.read_json(path) if path.is_file() else None
    return isinstance(values, dict) and bool(values.get("breakeven"))


def select_strategies(
    contents: RunContents, requested: Sequence[str] | None, device: str = "cpu", baselines: Sequence[str] | None = None
) -> tuple[dict[str, Any], list[str] | None]:
    """The run's strategies and the built-in baselines to backtest.

    :param requested: None: every strategy of the run (`run_strategies`); else names of
        the run's strategies, built-in baselines (`trader.names.BASELINES`) or checkpoint
        paths (a ``.json``/``.safetensors`` file, or a path with ``/``).
    :param baselines: the built-in baselines; None: every one that applies (without
        ``requested``), or those named in ``requested``.
    """
    found = run_strategies(
        contents, device, None if requested is None else [n for n in requested if n not in BASELINES]
    )
    if requested is None:
        return found, None if baselines is None else list(baselines)
    policies, chosen = {}, list(baselines or [])
    for name in requested:
        if name in BASELINES:
            chosen.append(name)
        elif name in found:
            policies[name] = found[name]
        elif Path(name).suffix in (".json", ".safetensors") or "/" in name:
            path = Path(name)
            if not path.with_suffix(".json").is_file():
                raise CheckpointError(f"checkpoint not found: {path.with_suffix('.json')}")
            policies[path.with_suffix("").name] = path.with_suffix("")
        else:
            own = [
                *contents.checkpoints,
                *(["ensemble"] if contents.ensemble else []),
                *(f.name for f in contents.baselines),
            ]
            known = ", ".join([*own, *BASELINES])
            raise CheckpointError(f"strategy {name!r} not found in {contents.run_dir} (strategies here: {known})")
    return policies, list(dict.fromkeys(chosen))


def backtest_run(
    run_dir: str | os.PathLike[str],
    *,
    dataset: str | None = None,
    period: str = "test",
    strategies: Sequence[str] | None = None,
    baselines: Sequence[str] | None = None,
    config: Any = None,
    device: str = "cpu",
    initial_books: dict[str, Any] | None = None,
    report: str | None = None,
    own: bool = False,
    overwrite: bool = False,
    spec: Any = None,
    on_start: Callable[[int], None] | None = None,
) -> Any:
    """Backtest a run directory's strategies (`select_strategies`) beside the built-in
    baselines and write the report into it (see the module docstring); returns the
    `BacktestResult`, whose ``files`` say where the report went.

    :param dataset: a data set recipe; default the run's.
    :param strategies: only these strategies (`select_strategies`; None: all of the run's).
    :param baselines: built-in baselines (None: every one that applies).
    :param config: a `BacktestConfig`; default `backtest_config(contents)`, the run's.
    :param initial_books: strategy name -> the `trader.backtesting.config.Book` it starts
        from (`run_backtest`); default: all cash.
    :param report: write ``reports/<report>/`` whatever the backtest is; default: the run's
        own report when the run is backtested as configured, else ``reports/<report_name>/``.
    :param own: this backtest is the run's own whatever it holds (a walk-forward fold's,
        whose own backtest is its ``best`` beside the yardsticks).
    :param overwrite: replace the report already there (whole); without it, refused.
    :param spec: the run's `trader.spec.MarketSpec`, held by the caller (a walk-forward fold's):
        its data set, rules and windows, instead of the run files' (`read_run`).
    :param on_start: called once the request is checked, its data loaded and its period found
        (each refusal comes first, alone), before the backtest, with the number of the run's
        strategies to backtest: a command's start line.
    """
    from trader.backtesting.engine import run_backtest
    from trader.backtesting.periods import select_period

    root = Path(run_dir)
    if not root.is_dir() and dataset is None and spec is None:
        raise UserError(
            f"no such run directory: {root} (to backtest the built-in baselines into a new folder, "
            "give --dataset RECIPE)"
        )
    contents = read_run(root, spec)
    recipe = dataset or contents.dataset
    if not recipe:
        raise UserError(
            f"no data set given: pass --dataset RECIPE ({root} records none in config.toml or tournament.toml)"
        )
    configured = backtest_config(contents)
    config = config or configured
    if report is not None:
        name = check_report_name(report)
    elif own or is_configured(
        contents,
        dataset=dataset,
        period=period,
        strategies=strategies,
        baselines=baselines,
        config=config,
        configured=configured,
    ):
        name = ""
    else:
        name = report_name(
            contents,
            dataset=dataset,
            period=period,
            strategies=strategies,
            baselines=baselines,
            config=config,
            configured=configured,
        )
    check_report_target(root, name, overwrite)
    policies, chosen = select_strategies(contents, strategies, device, baselines)
    data = contents.data(recipe)
    policies = trading_in(policies, select_period(data, period)[0].timestamps[0])
    if on_start is not None:
        on_start(len(policies))
    trials = contents_trials(contents)
    selection = run_selection(data, trials, config, device, contents.result) if period != "validation" else None
    if selection is not None and contents.result is not None:
        selection["tournament"] = tournament_result(contents.run_dir)
    pods = tournament_spread(contents, data, period, config, device, policies) if strategies is None else None
    return write_into(
        root,
        name,
        lambda folder: run_backtest(
            data,
            policies,
            baselines=chosen,
            period=period,
            config=config,
            run_dir=folder,
            device=device,
            trials=trials,
            selection=selection,
            initial_books=initial_books,
            spread=pods,
        ),
    )


def backtest(
    data: Any = None,
    policies: Mapping[str, Any] | None = None,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    period: str | None = None,
    baselines: Sequence[str] | None = None,
    config: Any = None,
    device: str = "cpu",
    report: str | None = None,
    overwrite: bool = False,
    **options: Any,
) -> Any:
    """The Python API's backtest (`trader.backtest(...)`): `run_backtest`, and with
    ``run_dir``, its report written into that run directory under the run's rules.

    :param data: a `MarketData` or a data set recipe; with ``run_dir`` and no ``data``, the run's.
    :param policies: strategy name -> checkpoint path, agent, callable, ... (`run_backtest`);
        with ``run_dir`` and no ``policies``, the run's own strategies (`backtest_run`).
    :param run_dir: a run directory: ``config`` defaults to the run's capital, costs and env
        rules (`backtest_config`: as it trained); the report goes into it, as the run's own
        when the run is backtested as configured, else into ``reports/<name>/``
        (``report``, or named by what it is: `report_name`). A folder that records no run
        gets the report itself.
    :param period: "test" (the default with a recipe or a run), "validation", "train",
        "START:END" or "all" (the default for a `MarketData` without ``run_dir``).
    :param report: the name of the report folder (``reports/<report>/``).
    :param overwrite: replace a report already there (whole); without it, refused.
    :param options: `run_backtest`'s other keywords (``trials``, ``selection``, ``initial_books``).
    """
    from trader.backtesting.engine import run_backtest

    if run_dir is None:
        if report is not None or overwrite:
            raise UserError("report and overwrite apply with run_dir (the run directory the report goes into)")
        return run_backtest(data, policies, baselines=baselines, period=period, config=config, device=device, **options)
    root = Path(run_dir)
    contents = read_run(root)
    if contents.records_run and policies is None and (data is None or isinstance(data, str)) and not options:
        return backtest_run(
            root,
            dataset=data,
            period=period or "test",
            baselines=baselines,
            config=config,
            device=device,
            report=report,
            overwrite=overwrite,
        )
    if data is None:
        if not contents.dataset:
            raise UserError(f"no data given, and {root} records no data set")
        data = contents.data(contents.dataset)
        period = period or "test"
    configured = backtest_config(contents)
    config = config or configured
    if report is not None:
        name = check_report_name(report)
    elif not contents.records_run:
        name = ""  # a folder that records no run: the report is its own
    else:
        given = getattr(data, "name", data)
        name = report_name(
            contents,
            dataset=None if given == contents.dataset else str(given),
            period=period or "all",
            strategies=list(policies or {}),
            baselines=baselines,
            config=config,
            configured=configured,
        )
    check_report_target(root, name, overwrite)
    return write_into(
        root,
        name,
        lambda folder: run_backtest(
            data, policies, baselines=baselines, period=period, config=config, run_dir=folder, device=device, **options
        ),
    )


# ------------------------------------------------------------------ where the report goes

_REPORT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+=-]*$")


def check_report_name(name: str) -> str:
    """A report folder's name as given (``--report NAME``): letters, digits, ``_.+=-``."""
    if not isinstance(name, str) or not _REPORT_NAME.match(name) or len(name) > 120:
        raise UserError(
            f"--report {name!r}: a report's name is letters, digits, '_', '.', '+', '=' or '-' "
            "(at most 120), starting with a letter or digit"
        )
    return name


def _trading_terms(config: Any) -> Any:
    """What a `BacktestConfig` trades under, without how it is drawn or recorded."""
    return replace(config, tear_sheet=True, compile=False, cost_multiples=(), cost_model=None, record_positions="bar")


def is_configured(
    contents: RunContents,
    *,
    dataset: str | None,
    period: str | None,
    strategies: Sequence[str] | None,
    baselines: Sequence[str] | None,
    config: Any,
    configured: Any,
) -> bool:
    """Is this backtest the run's as it was configured: the test period, every strategy of
    the run and every built-in baseline, its own data set, and its capital, costs and rules?
    (Tear sheets, breakeven runs and recorded positions are how it is drawn, not what it
    trades.) A folder that records no run has no configuration: all of its backtests are its own."""
    if not contents.records_run:
        return True
    same_data = dataset is None or resolved_recipe(dataset) == resolved_recipe(contents.dataset)
    return (
        same_data
        and period == "test"
        and strategies is None
        and baselines is None
        and _trading_terms(config) == _trading_terms(configured)
    )


def resolved_recipe(recipe: str | None) -> str | None:
    """A recipe by the name a run records it (a recipe file by its absolute path)."""
    if recipe is None:
        return None
    from trader.environments import resolve_env

    return resolve_env(recipe).value


def report_name(
    contents: RunContents,
    *,
    dataset: str | None,
    period: str | None,
    strategies: Sequence[str] | None,
    baselines: Sequence[str] | None,
    config: Any,
    configured: Any,
) -> str:
    """The folder name of a backtest that is not the run's own, from what differs: the data
    set (``data-<name>``), the period (``validation``, ``2022-01-01-2022-06-30``), the
    strategies (``strategies-best+oracle``), the costs (``costs-<model>``), the capital
    (``cash-<amount>``), the risk-free rate or the rules (``rules-given``); joined by ``_``."""
    parts = []
    if dataset is not None and resolved_recipe(dataset) != resolved_recipe(contents.dataset):
        parts.append(f"data-{Path(dataset).stem}")
    if period != "test":
        parts.append("all" if period is None else period)
    if strategies is not None or baselines is not None:
        names = [Path(s).with_suffix("").name if "/" in s else s for s in (*(strategies or ()), *(baselines or ()))]
        parts.append("strategies-" + "+".join(dict.fromkeys(names)))
    if (config.buy_cost, config.sell_cost, config.costs) != (
        configured.buy_cost,
        configured.sell_cost,
        configured.costs,
    ):
        parts.append(f"costs-{config.named_costs.name}")
    if config.initial_cash != configured.initial_cash:
        parts.append(f"cash-{config.initial_cash:g}")
    if config.risk_free != configured.risk_free:
        parts.append(f"risk-free-{config.risk_free:g}")
    if _rules(config) != _rules(configured):
        parts.append("rules-given")
    name = "_".join(re.sub(r"[^A-Za-z0-9_.+=-]+", "-", part).strip("-.") for part in parts) or "backtest"
    if len(name) > 120:  # many strategies: keep the start readable, the whole unique
        name = f"{name[:100]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    return name


def _rules(config: Any) -> EnvConfig:
    """The policies' env rules of a `BacktestConfig`, without the cash and costs (the
    backtest's own, named apart)."""
    return replace(config.policy_env, buy_cost=0.0, sell_cost=0.0, costs=CostModel(), initial_cash=1.0)


def check_report_target(root: Path, name: str, overwrite: bool) -> None:
    """Refuse, before any work, to replace a report already there without ``overwrite``."""
    folder = rundir.report_folder(root, name)
    if overwrite or not (folder / rundir.REPORT_JSON).is_file():
        return
    if name == "":
        raise UserError(
            f"{root} holds the run's own report already (report.json): pass --overwrite to replace it, "
            "or --report NAME to write a report of its own"
        )
    raise UserError(
        f"{folder} holds a report already: pass --overwrite to replace it, or --report NAME to write another"
    )


def write_into(root: Path, name: str, run: Any) -> Any:
    """Run ``run(folder)`` (a backtest writing its report into ``folder``) for report
    ``name`` of the run in ``root``: the run's own report in place (`write_report`
    replaces it whole), a named one staged beside ``reports/<name>/`` and renamed into
    place when complete. The result's ``files`` name the final paths."""
    if name == "":
        return run(root)
    final = rundir.report_folder(root, name)
    staged = rundir.stage_folder(final)
    try:
        result = run(staged)
        rundir.commit_folder(staged, final)
    finally:
        shutil.rmtree(staged, ignore_errors=True)  # gone once committed; a failed backtest's leftovers
    return replace(result, files={key: final / Path(path).relative_to(staged) for key, path in result.files.items()})


def contents_trials(contents: RunContents) -> dict[str, Any]:
    """Strategy name -> the trials it was selected from (`trader.backtesting.evidence.run_trials`)."""
    from trader.backtesting.evidence import run_trials

    best = contents.checkpoints.get("best")
    best_pod = best.parent.parent.name if contents.kind == "tournament" and best is not None else None
    return run_trials(contents.run_dir, contents.kind, best_pod, contents.baselines)


def tournament_result(run_dir: Path) -> dict[str, Any]:
    """A tournament's result as ``selection.json`` states it: ``{"result", "sentence"}``."""
    values = rundir.read_json(run_dir / rundir.SELECTION, version=rundir.SELECTION_VERSION)
    return {"result": values["result"], "sentence": values["sentence"]}


def tournament_spread(
    contents: RunContents, data: Any, period: str, config: Any, device: str, policies: Mapping[str, Any]
) -> dict[str, Any] | None:
    """A tournament's result against its own pods (`trader.backtesting.spread`): every kept pod
    backtested over ``period`` beside the result (the ensemble of ``policies``, when it is the result),
    under ``config``; None for a run that is not a tournament."""
    from trader.backtesting import spread

    if contents.kind != "tournament":
        return None
    ensemble = policies.get("ensemble") if contents.result == "ensemble" else None
    pods = spread.finished_pods(contents.run_dir)
    figures = spread.pods_backtest(data, pods, ensemble, period, config, device)
    return spread.spread(contents.run_dir, figures, period)


def run_selection(
    data: Any, trials: dict[str, Any], config: Any, device: str, result: str | None = None
) -> dict[str, Any] | None:
    """The selection statistics of the run's own trials, on the validation period, with
    the run's result as the winner (``best``, or a tournament's ``ensemble`` when that is
    its result): the yardsticks (equal-weight, the benchmark) are backtested there for SPA."""
    from dataclasses import replace

    from trader.backtesting.engine import run_backtest
    from trader.backtesting.evidence import selection_evidence

    chosen = trials.get(result or "best")
    if chosen is None or chosen.returns is None:
        return None
    yardsticks = [b for b in ("equal_weight", "benchmark") if b != "benchmark" or data.benchmark is not None]
    # Only the yardsticks' daily returns are read: no tear sheet, and no breakeven runs at other cost multiples.
    plain = replace(config, tear_sheet=False, cost_multiples=())
    validation = run_backtest(data, {}, baselines=yardsticks, period="validation", config=plain, device=device)
    daily = validation.daily_returns
    return selection_evidence(
        chosen, {name: daily[name] for name in yardsticks if name in daily.columns}, labels=validation.labels()
    )


def trading_in(strategies: dict[str, Any], start: Any) -> dict[str, Any]:
    """Drop, with a warning, strategies that trade only from a later date (FinRL's
    ensemble trades from the test period on: its windows are trained on earlier data)."""
    from trader.backtesting.strategies import ExternalPolicy

    kept = {}
    for name, strategy in strategies.items():
        first = strategy.starts[0] if isinstance(strategy, ExternalPolicy) else None
        if first is not None and start < first:
            warnings.warn(f"{name} left out: it trades from {first} on, the period starts at {start}", stacklevel=2)
            continue
        kept[name] = strategy
    return kept
