"""Walk-forward: retrain on each fold's window, trade the next one, judge the stitched record.

`walk_forward(run_dir, dataset, folds, learner=...)` cuts the data set into folds
(`trader.folds`) and, fold by fold:

1. **trains and selects** in ``RUN_DIR/folds/<k>/``, a normal run directory: a
   `trader.train` run (``learner`` "ppo", "sac" or "td3": its ``best`` snapshot is
   chosen on the fold's validation window) or a `tournament.run` (``"tournament"``:
   the leaderboard's best pod). The fold's `trader.spec.MarketSpec` (the data set, the
   rules built once for every fold, the fold's windows as bar positions) goes to the
   training run, to the baselines and to the test step as it is: training, validation,
   normalisation statistics and every baseline see the fold's own windows only, and no
   step reads them back from the fold's files. (The tournament learner carries the same
   `MarketSpec` in its `TournamentConfig` to every pod, which runs in another process: the
   spec travels as `MarketSpec.to_dict`, the windows as bar positions.)
2. **tests** the selected policy on the fold's test window through the backtest engine
   (`trader.backtesting.runs.backtest_run`, beside the benchmark, equal-weight and the
   classical factor portfolios, `walked_yardsticks`; report
   in the fold's folder). The policy takes over the previous fold's book (cash and
   shares, `trader.backtesting.Book`) as live trading would, and pays the costs of the
   trades of the switch; fold 0 starts from cash. The book is held without a decision
   over the boundary bar (the last bar of a window makes no decision);
3. writes ``folds/<k>/fold.json`` last, atomically: the marker of a finished fold, with
   its figures and its final book.

A killed walk-forward started again on the same run directory (same config) skips
every fold with a marker and restarts the first unfinished one from scratch (its
leftovers are removed). Each fold's seed is ``seed + k``, so a resumed run equals an
uninterrupted one wherever the learner is deterministic (one worker, CPU).

Then **the stitched record**: the test windows are consecutive, so the selected
policies' test series, concatenated, are one out-of-sample record over the whole span;
the yardsticks (benchmark, equal-weight, the factor portfolios) are backtested once over the same
span: rules decided from past bars only, they trade it as they would have fold by fold. Its metrics and
evidence (`trader.backtesting.evidence`: interval, PSR and the deflated Sharpe counting
every trial of every fold) go into ``walkforward.json`` and ``walkforward.md``; each
strategy's per-bar series into ``stitched.parquet``. docs/contracts.md lists the files.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trader import rundir
from trader.backtesting.report import format_value
from trader.errors import ConfigError, UserError
from trader.folds import WINDOWS, Fold, FoldSpec, consecutive, make_folds
from trader.names import counted
from trader.rundir import config_from_dict, config_to_dict, fold_dir, read_fold
from trader.spec import MarketSpec, market_spec

LEARNERS = ("tournament", "ppo", "sac", "td3")
SELECTED = "best"
"""The strategy of each fold's run directory that walks forward (its validation winner)."""
YARDSTICKS = ("benchmark", "equal_weight")
"""The buy-and-hold yardsticks every fold and the stitched record carry; beside them the classical
factor portfolios whose windows fit (`walked_yardsticks`)."""
BASELINE_LIBRARIES = ("sb3", "sb3-dummy", "finrl")
"""The baseline libraries a walk-forward trains per fold (`trader.libraries.LIBRARIES`
but RLlib, which runs in an environment of its own)."""

Progress = Callable[[str], None]
"""Called with one line per step (fold started, fold finished, stitching)."""


@dataclass(frozen=True)
class WalkForwardConfig:
    """A walk-forward run, written into ``RUN_DIR/walkforward.toml``; a run directory
    resumes only under the same config."""

    run_dir: str
    """Where everything goes."""
    dataset: str
    """The data set recipe (name or path; a path is recorded absolute)."""
    folds: FoldSpec
    """The fold lengths (`trader.folds.FoldSpec`)."""
    learner: str = "tournament"
    """"tournament" (a `tournament.run` per fold) or "ppo", "sac", "td3" (a `trader.train` run per fold)."""
    seed: int = 0
    """Fold k's run has seed ``seed + k``."""
    device: str = "cpu"
    """Where the learners and the backtests run."""
    steps: int = 100_000
    """Single learner: environment transitions per fold."""
    num_envs: int = 8
    """Single learner: sub-environments of its training env."""
    eval_every: int = 10_000
    """Single learner: transitions between validations (0: once, at the end)."""
    algo_config: dict[str, Any] = field(default_factory=dict)
    """Single learner: algorithm config overrides."""
    env_config: Any = field(default_factory=dict)
    """The env rules of every fold: `EnvConfig` overrides (costs, action mode, features) as
    a dict, or an `EnvConfig` (kept as it is down to each fold's env)."""
    tournament: dict[str, Any] = field(default_factory=dict)
    """Tournament learner: `TournamentConfig` keys (pods, pod_steps, population,
    workers, algos, algo_configs, time_budget, ...) for every fold."""
    baselines: tuple[str, ...] = ()
    """Baseline libraries trained per fold beside the learner (`trader.baselines`:
    "sb3", "sb3-dummy", "finrl"), on the fold's windows, rules and budget."""
    baseline_algos: tuple[str, ...] = ("ppo",)
    """SB3 algorithms of the ``sb3`` libraries."""
    baseline_steps: int | None = None
    """Env steps of each baseline per fold; None: the learner's (``steps``, or a
    tournament's ``pods x pod_steps``)."""
    warm_start: bool = False
    """Fold k+1 continues from fold k (continual training) instead of starting fresh:
    a single learner from fold k's ``best`` checkpoint (`trader.train`'s ``init_from``),
    a tournament's breeding pods from fold k's leaderboard (`TournamentConfig.warm_start`)."""
    compile: bool = False
    """Single learner: ``torch.compile`` its networks and env step (`trader.train`'s ``compile``;
    a tournament's is its ``tournament["compile"]``)."""
    time_budget: float | None = None
    """Single learner: seconds of training per fold, whichever of it and ``steps`` comes first
    (`trader.train`'s ``time_budget``; a tournament's is its ``tournament["time_budget"]``); None:
    ``steps`` alone."""

    def __post_init__(self) -> None:
        if self.learner not in LEARNERS:
            raise UserError(f"--learner must be one of {', '.join(LEARNERS)}, got {self.learner!r}")
        if isinstance(self.folds, Mapping):
            object.__setattr__(self, "folds", config_from_dict(FoldSpec, self.folds))
        if self.steps < 1 or self.num_envs < 1 or self.eval_every < 0:
            raise ConfigError("steps and num_envs must be >= 1, eval_every >= 0")
        if self.time_budget is not None and not self.time_budget > 0:
            raise ConfigError(f"time_budget must be a positive number of seconds per fold, got {self.time_budget}")
        object.__setattr__(self, "baselines", tuple(self.baselines))
        object.__setattr__(self, "baseline_algos", tuple(self.baseline_algos))
        if "rllib" in self.baselines:
            raise UserError(
                "--baselines: rllib runs in its own environment and is not walked forward; use sb3, sb3-dummy or finrl"
            )
        unknown = [name for name in self.baselines if name not in BASELINE_LIBRARIES]
        if unknown:
            raise UserError(f"--baselines: unknown library {unknown}; choose from {', '.join(BASELINE_LIBRARIES)}")
        if self.baselines:
            from trader.adapters.sb3 import ALGOS as SB3_ALGOS

            bad = [a for a in self.baseline_algos if a not in SB3_ALGOS]
            if bad or not self.baseline_algos:
                raise UserError(
                    f"--baseline-algos: unknown algorithm {bad or '(none)'}; SB3 baselines take {', '.join(SB3_ALGOS)}"
                )
        if self.baseline_steps is not None and self.baseline_steps < 1:
            raise UserError(f"--baseline-steps must be >= 1, got {self.baseline_steps}")
        reserved = sorted(
            {"run_dir", "env", "env_config", "seed", "periods", "windows", "backtest", "warm_start"}
            & set(self.tournament)
        )
        if reserved:
            raise ConfigError(f"tournament keys {reserved} are set by the walk-forward for each fold")

    def to_dict(self) -> dict[str, Any]:
        return {**config_to_dict(self), "folds": self.folds.to_dict()}

    def baseline_budget(self) -> int:
        """Env steps of each baseline per fold: the learner's own budget unless set."""
        if self.baseline_steps is not None:
            return int(self.baseline_steps)
        if self.learner != "tournament":
            return int(self.steps)
        from tournament import TournamentConfig

        values = {**config_to_dict(TournamentConfig()), **self.tournament}
        if values.get("pods") is None:
            raise UserError("a tournament stopped by time has no step budget to give the baselines: set baseline_steps")
        return int(values["pods"]) * int(values["pod_steps"])

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> WalkForwardConfig:
        return config_from_dict(cls, values)


@dataclass
class WalkForwardResult:
    """What `walk_forward` returns (``walkforward.json`` holds the same figures)."""

    run_dir: Path
    folds: list[dict[str, Any]]
    """Each fold's record (``folds/<k>/fold.json``)."""
    stitched: pd.DataFrame = field(repr=False)
    """Per bar: ``timestamp``, ``strategy``, ``fold`` and the series columns."""
    summary: dict[str, Any] = field(repr=False)
    """``walkforward.json``."""


def fold_label(index: int, total: int) -> str:
    """How a progress line names fold ``index``: by its folder's number (``folds/0/`` is fold 0),
    then its place among ``total``: "fold 0 (1 of 6)"."""
    return f"fold {index} ({index + 1} of {total})"


def walk_forward(
    run_dir: str | os.PathLike[str],
    dataset: str,
    folds: FoldSpec,
    learner: str = "tournament",
    *,
    seed: int = 0,
    device: str = "cpu",
    steps: int = 100_000,
    num_envs: int = 8,
    eval_every: int = 10_000,
    algo_config: Mapping[str, Any] | None = None,
    env_config: Mapping[str, Any] | None = None,
    tournament: Mapping[str, Any] | None = None,
    baselines: tuple[str, ...] = (),
    baseline_algos: tuple[str, ...] = ("ppo",),
    baseline_steps: int | None = None,
    warm_start: bool = False,
    compile: bool = False,
    time_budget: float | None = None,
    on_progress: Progress | None = None,
) -> WalkForwardResult:
    """Walk ``learner`` forward over ``dataset`` (see the module docstring); resumes a
    walk-forward already in ``run_dir`` when its config is the same.

    :param folds: the fold lengths, rolling or expanding, with an embargo.
    :param learner: "tournament", "ppo", "sac" or "td3".
    :param steps: a single learner's env steps per fold.
    :param num_envs: a single learner's sub-environments.
    :param eval_every: a single learner's steps between validation passes.
    :param algo_config: a single learner's algorithm config per fold.
    :param tournament: `TournamentConfig` keys per fold (the tournament learner's budget).
    :param env_config: `EnvConfig` overrides for every fold, or an `EnvConfig`.
    :param baselines: baseline libraries ("sb3", "sb3-dummy", "finrl") trained and
        tested per fold beside the learner, under the same windows, rules and budget
        (``baseline_steps``, default the learner's), stitched like it.
    :param warm_start: fold k+1 continues from fold k's result (`WalkForwardConfig.warm_start`).
    :param compile: a single learner's ``torch.compile`` (a tournament's: ``tournament["compile"]``).
    :param time_budget: a single learner's seconds of training per fold (a tournament's:
        ``tournament["time_budget"]``); None: its ``steps`` alone.
    """
    from trader.environments import resolve_env

    name = resolve_env(dataset)
    if name.is_gym:
        raise UserError(f"walk-forward needs a market data set, not the gymnasium env {dataset!r}")
    from market_envs.config import EnvConfig

    # the rules in full, however given (keys, an EnvConfig or None), so that walkforward.toml
    # records the same rules for the same run whether the CLI or the Python API started it
    rules = env_config if isinstance(env_config, EnvConfig) else config_from_dict(EnvConfig, dict(env_config or {}))
    config = WalkForwardConfig(
        str(run_dir),
        name.value,
        folds,
        learner,
        seed,
        device,
        steps,
        num_envs,
        eval_every,
        dict(algo_config or {}),
        rules,
        dict(tournament or {}),
        tuple(baselines),
        tuple(baseline_algos),
        baseline_steps,
        warm_start,
        compile,
        time_budget,
    )
    return run(config, on_progress)


def run(config: WalkForwardConfig, on_progress: Progress | None = None) -> WalkForwardResult:
    """`walk_forward` on a resolved config."""
    from trader.environments import load_market

    say = on_progress or (lambda line: None)
    root = Path(config.run_dir)
    spec = market_spec(config.dataset, config.env_config)  # the rules, once for every fold
    data = load_market(config.dataset)
    plan = make_folds(data.timestamps, config.folds)
    if not consecutive(plan):
        raise UserError(
            "--step is longer than --test: the test windows leave gaps, and the stitched record needs them consecutive"
        )
    _claim(root, config)  # only once the folds fit the data
    records: list[dict[str, Any]] = []
    with _Cluster(config) as clients:
        for fold in plan:
            record = read_fold(root, fold.index)
            if record is None:
                books = None if not records else records[-1]["books"]
                record = _run_fold(
                    config, spec.with_windows(fold.windows), data, fold, books, clients.get(), say, len(plan)
                )
            else:
                say(f"{fold_label(fold.index, len(plan))}: finished before, kept")
            records.append(record)
    say("stitching the test windows")
    stitched, summary = _stitch(config, spec, data, plan, records)
    rundir.write_parquet(root / rundir.WF_STITCHED, stitched)
    rundir.write_json(root / rundir.WF_REPORT_JSON, summary)
    rundir.write_text(root / rundir.WF_REPORT_MD, markdown(summary))
    return WalkForwardResult(root, records, stitched, summary)


def _claim(root: Path, config: WalkForwardConfig) -> None:
    """Write the config, or check that the run directory's is the same (a resume)."""
    rundir.claim_run(root, rundir.WF_CONFIG, config.to_dict(), "a walk-forward")


# --------------------------------------------------------------------------- one fold


def _run_fold(
    config: WalkForwardConfig,
    spec: MarketSpec,
    data: Any,
    fold: Fold,
    start_books: dict[str, Any] | None,
    client: Any,
    say: Progress,
    total: int,
) -> dict[str, Any]:
    """Train, select and test one fold (``spec``: its data set, rules and windows) into a
    fresh ``folds/<k>/``; write its marker last."""
    from trader.backtesting.config import Book
    from trader.backtesting.runs import backtest_config, backtest_run, contents_trials, read_run

    folder = fold_dir(config.run_dir, fold.index)
    if folder.exists():  # a fold killed half-way: start it again from nothing
        shutil.rmtree(folder)
    periods = fold.periods(data.timestamps)
    test = periods["test"]
    say(
        f"{fold_label(fold.index, total)}: {config.learner} on train {periods['train'][0][:10]} .. "
        f"{periods['train'][1][:10]}, test {test[0][:10]} .. {test[1][:10]}"
    )
    winner = _train_fold(config, fold, spec, folder, client)
    kept_scores = _train_baselines(config, spec, folder, say)
    names = [SELECTED, *kept_scores]
    contents = read_run(folder, spec)  # the strategies the fold made; its data set, rules and windows: the spec's
    yardsticks = walked_yardsticks(data, data.take(slice(*fold.test)))
    books = {name: Book.from_dict(b) for name, b in (start_books or {}).items() if name in names}
    result = backtest_run(
        folder,
        spec=spec,
        strategies=names,
        baselines=yardsticks,
        config=backtest_config(contents, tear_sheet=False),
        device=config.device,
        initial_books=books,
        own=True,
    )
    trials = contents_trials(contents)
    sharpe = result.metrics["sharpe_ratio"]
    record = {
        "format_version": rundir.WF_FOLD_VERSION,
        "fold": fold.index,
        "windows": periods,
        "bars": {name: fold.window(name)[1] - fold.window(name)[0] for name in WINDOWS},
        "learner": config.learner,
        "seed": config.seed + fold.index,
        **winner,
        "test_sharpe": _float(sharpe.get(SELECTED)),
        **{f"{y}_test_sharpe": _float(sharpe.get(y)) for y in yardsticks},
        "baselines": {
            name: {
                "test_sharpe": _float(sharpe.get(name)),
                "validation_sharpe": _float(kept_scores[name]),
            }
            for name in names[1:]
        },
        "trial_sharpes": {
            name: [] if name not in trials else [_float(s) for s in trials[name].sharpes] for name in names
        },
        "start_books": start_books,
        "books": {name: Book.final(result, name).to_dict() for name in names},
    }
    rundir.write_json(folder / rundir.WF_FOLD, record)  # the marker: last
    say(
        f"{fold_label(fold.index, total)}: done; winner {record['algo']}, validation score "
        f"{format_value('sharpe_ratio', record['validation_sharpe'])}, test Sharpe {format_value('sharpe_ratio', record['test_sharpe'])}"
    )
    return rundir.read_json(folder / rundir.WF_FOLD)  # as a resumed run reads it: the same floats


def _train_fold(config: WalkForwardConfig, fold: Fold, spec: MarketSpec, folder: Path, client: Any) -> dict[str, Any]:
    """The fold's run directory, trained and selected on its windows (a single learner on
    ``spec`` itself; a tournament's pods on ``spec`` too, which tournament.toml records
    whole); the winner's algorithm, hyperparameters and validation score
    (`trader.agents.evaluator.market_evaluator`: the bars' Sharpe ratio; on daily bars the daily one)."""
    k = fold.index
    if config.learner == "tournament":
        from tournament import run as run_tournament

        settings = _tournament_config(config, k, spec, folder)
        if config.warm_start and k > 0:
            settings = replace(settings, warm_start=str(fold_dir(config.run_dir, k - 1)))
        result = run_tournament(settings, client=client)
        best = result.leaderboard.best()
        if best is None:
            raise UserError(f"fold {k}: no pod of the tournament finished (see {folder / rundir.PODS})")
        return {
            "algo": best.algo,
            "pod_id": best.pod_id,
            "hyperparameters": best.hyperparameters,
            "validation_sharpe": _float(best.score),
        }
    from trader.training import train

    previous = fold_dir(config.run_dir, k - 1) / rundir.CHECKPOINTS / "best" if config.warm_start and k > 0 else None
    result = train(
        config.learner,
        spec,
        dict(config.algo_config),
        folder,
        steps=config.steps,
        seed=config.seed + k,
        device=config.device,
        num_envs=config.num_envs,
        eval_every=config.eval_every,
        init_from=previous,
        compile=config.compile,
        time_budget=config.time_budget,
    )
    return {
        "algo": config.learner,
        "hyperparameters": rundir.toml_ready(config_to_dict(result.agent.config)),  # as config.toml has them
        "validation_sharpe": _float(result.best_score),
    }


def _train_baselines(
    config: WalkForwardConfig, spec: MarketSpec, folder: Path, say: Progress
) -> dict[str, float | None]:
    """The baselines of one fold, trained into ``folder/baselines/`` on the fold's spec
    (its windows and rules, `trader.baselines`): name -> the validation score of the snapshot it
    kept (None for FinRL's ensemble, which keeps one learner a window), for those that finished.
    Their seed is the walk-forward's in every fold, so each keeps one name across the folds."""
    if not config.baselines:
        return {}
    from trader.libraries import baselines

    result = baselines(
        folder,
        config.baselines,
        config.baseline_algos,
        steps=config.baseline_budget(),
        seeds=[config.seed],
        spec=spec,
        device=config.device,
        backtest=False,
        progress=lambda line: say(f"  {line}"),
    )
    return {o.name: o.validation_score for o in result.outcomes if o.status == "finished"}


def _tournament_config(config: WalkForwardConfig, k: int, spec: MarketSpec, folder: Path) -> Any:
    """Fold ``k``'s tournament on the fold's market ``spec`` (its rules and bar windows)."""
    from tournament import TournamentConfig

    return TournamentConfig.from_dict(
        {
            **config.tournament,
            "run_dir": str(folder),
            "env": spec,
            "seed": config.seed + k,
            "backtest": False,
            "device": config.device,
        }
    )


class _Cluster:
    """One dask client for every fold of a tournament learner, started when the first
    fold needs it (never for a single learner, nor when every fold is finished)."""

    def __init__(self, config: WalkForwardConfig) -> None:
        self.config = config
        self.client = None

    def __enter__(self) -> _Cluster:
        return self

    def get(self) -> Any:
        if self.client is None and self.config.learner == "tournament":
            from tournament import cluster

            market = market_spec(self.config.dataset, self.config.env_config)
            probe = _tournament_config(self.config, 0, market, fold_dir(self.config.run_dir, 0))
            self.client = cluster.connect_for(probe)
        return self.client

    def __exit__(self, *exc: Any) -> None:
        if self.client is not None:
            from tournament import cluster

            cluster.close(self.client)


# --------------------------------------------------------------------------- the stitched record


def _stitch(
    config: WalkForwardConfig, spec: MarketSpec, data: Any, plan: list[Fold], records: list[dict[str, Any]]
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Each walked strategy's test series end to end (the learner's ``best`` under the
    learner's name, and every baseline tested in every fold), the yardsticks over the
    same span (under ``spec``'s rules, every fold's), and the summary."""
    from trader import metrics
    from trader.backtesting.engine import run_backtest
    from trader.backtesting.evidence import Trials, strategy_evidence
    from trader.backtesting.runs import backtest_config, read_run

    span = data.take(slice(plan[0].test[0], plan[-1].test[1]))
    walked = [n for n in records[0]["books"] if all(n in r["books"] for r in records)]
    frames = {(config.learner if n == SELECTED else n): _walked_series(config, plan, n, span) for n in walked}
    fold_of = np.concatenate([np.full(f.test[1] - f.test[0], f.index) for f in plan])
    yardsticks = walked_yardsticks(data, span)
    rules = backtest_config(read_run(fold_dir(config.run_dir, 0), spec), tear_sheet=False)
    whole = run_backtest(span, {}, baselines=yardsticks, config=rules, device=config.device)
    frames.update({y: whole.series[y] for y in yardsticks})
    long = pd.concat(
        [
            frame.assign(strategy=name, fold=fold_of).rename_axis("timestamp").reset_index()
            for name, frame in frames.items()
        ],
        ignore_index=True,
    )
    long = long[["timestamp", "strategy", "fold", *rundir.SERIES_COLUMNS]]
    returns = pd.DataFrame({name: frame["return"] for name, frame in frames.items()})
    traded = pd.DataFrame({name: frame["traded_value"] for name, frame in frames.items()})
    values = pd.DataFrame({name: frame["value"] for name, frame in frames.items()})
    table = metrics.summary(returns, timestamps=span.timestamps, traded_value=traded, portfolio_value=values)
    daily = metrics.daily_returns(returns, span.timestamps)
    trials = {}
    for name in walked:  # every fold's trials count against the stitched record
        sharpes = np.array(
            [np.nan if s is None else s for r in records for s in r["trial_sharpes"].get(name, [])], dtype=float
        )
        if len(sharpes):
            trials[config.learner if name == SELECTED else name] = Trials(sharpes)
    evidence = strategy_evidence(daily, trials, seed=config.seed)
    summary = _summary(config, records, table, evidence, span, {name: t.count for name, t in trials.items()})
    return long, summary


def walked_yardsticks(data: Any, panel: Any) -> list[str]:
    """The yardsticks a fold's test (or the stitched span, `panel`) is set against: the benchmark
    (when the data has one), equal-weight, and each classical factor portfolio whose window fits
    the bars known (`trader.backtesting.yardsticks.applies`: its lookback and half the panel)."""
    from trader.backtesting import yardsticks

    factors = [y for y in yardsticks.YARDSTICKS if yardsticks.applies(y, panel)]
    return [y for y in YARDSTICKS if y != "benchmark" or data.benchmark is not None] + factors


def _walked_series(config: WalkForwardConfig, plan: list[Fold], name: str, span: Any) -> pd.DataFrame:
    """Strategy ``name``'s test series of every fold, end to end over ``span``."""
    from trader.backtesting.report import read_series

    parts = [read_series(fold_dir(config.run_dir, f.index) / rundir.BACKTESTS_DIR / f"{name}.parquet")[0] for f in plan]
    series = pd.concat(parts)
    if not series.index.equals(span.timestamps):
        raise UserError(f"the folds' test series of {name!r} do not cover the stitched span bar for bar")
    return series


def _summary(
    config: WalkForwardConfig,
    records: list[dict[str, Any]],
    table: pd.DataFrame,
    evidence: dict[str, Any],
    span: Any,
    n_trials: dict[str, int],
) -> dict[str, Any]:
    """``walkforward.json``: the config, the per-fold table, the stitched metrics and evidence."""
    reference = "benchmark" if "benchmark_test_sharpe" in records[0] else "equal_weight"
    beaten = [
        r["test_sharpe"] is not None
        and r[f"{reference}_test_sharpe"] is not None
        and r["test_sharpe"] > r[f"{reference}_test_sharpe"]
        for r in records
    ]
    hidden = ("format_version", "books", "start_books", "trial_sharpes")
    rows = [
        {k: v for k, v in r.items() if k not in hidden} | {"trials": len(r["trial_sharpes"][SELECTED])} for r in records
    ]
    return {
        "format_version": rundir.WF_REPORT_VERSION,
        "config": config.to_dict(),
        "folds": rows,
        "stitched": {
            "start": str(span.start),
            "end": str(span.end),
            "bars": span.num_bars,
            "days": int(pd.Index(span.timestamps.date).nunique()),
            "learner": config.learner,
            "reference": reference,
            "n_trials": n_trials,
            "metrics": {str(name): {k: _float(v) for k, v in row.items()} for name, row in table.iterrows()},
            "evidence": evidence,
            "share_of_folds_beating_reference": float(np.mean(beaten)),
        },
    }


def markdown(summary: Mapping[str, Any]) -> str:
    """``walkforward.md``: the per-fold table, the stitched metrics and their evidence."""
    cfg, stitched = summary["config"], summary["stitched"]
    reference = stitched["reference"]
    spec = cfg["folds"]
    baselines = list(summary["folds"][0]["baselines"])
    lines = [
        f"# Walk-forward: {cfg['learner']} on {Path(cfg['dataset']).stem}",
        "",
        f"Folds: train {spec['train']}, validation {spec['validation']}, test {spec['test']}, step {spec['step']}, "
        f"{'expanding' if spec['expanding'] else 'rolling'}, embargo {counted(spec['embargo'], 'bar')}; seed {cfg['seed']}.",
        "",
        f"| fold | train | validation | test | winner | validation score | test Sharpe | {reference} test Sharpe |"
        + "".join(f" {name} test Sharpe |" for name in baselines),
        "|---|---|---|---|---|---|---|---|" + "---|" * len(baselines),
    ]
    for row in summary["folds"]:
        w = row["windows"]
        cells = [
            str(row["fold"]),
            *(f"{w[n][0][:10]} .. {w[n][1][:10]}" for n in WINDOWS),
            row["algo"],
            format_value("sharpe_ratio", row["validation_sharpe"]),
            format_value("sharpe_ratio", row["test_sharpe"]),
            format_value("sharpe_ratio", row[f"{reference}_test_sharpe"]),
            *(format_value("sharpe_ratio", row["baselines"].get(name, {}).get("test_sharpe")) for name in baselines),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"## The stitched out-of-sample record ({stitched['start'][:10]} .. {stitched['end'][:10]}, "
        f"{counted(stitched['days'], 'day')})",
        "",
        "| strategy | cumulative return | annual return | Sharpe | Sortino | max drawdown |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in stitched["metrics"].items():
        columns = ("cum_returns_final", "annual_return", "sharpe_ratio", "sortino_ratio", "max_drawdown")
        lines.append(f"| {name} | " + " | ".join(format_value(c, row.get(c)) for c in columns) + " |")
    share = stitched["share_of_folds_beating_reference"]
    lines += [
        "",
        f"The learner's test Sharpe beat the {reference}'s in {share:.0%} of the folds.",
        "Trials counted for each deflated Sharpe ratio (every validation pass of every fold): "
        + ", ".join(f"{name} {count}" for name, count in stitched["n_trials"].items())
        + ".",
        "",
    ]
    lines += [f"- {name}: {row['sentence']}" for name, row in stitched["evidence"].items()]
    return "\n".join(lines) + "\n"


def _float(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


__all__ = ["LEARNERS", "WalkForwardConfig", "WalkForwardResult", "markdown", "run", "walk_forward"]
