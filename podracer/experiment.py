"""The seed paper's trading experiment, end to end, on any data set (`trader experiment podracer`).

The paper trains a tournament of PPO, SAC and TD3 agents (1:1:1) on NASDAQ-100 minute
bars and compares it, in its Table 2, with one vanilla PPO run, Stable-Baselines3,
RLlib, FinRL's ensemble and QQQ over a held-out backtest, at $1,000,000 of capital and
0.2% per trade; its Figure 7 plots the backtest return of training snapshots against
wall-clock. `run_experiment` runs that protocol with the library's own pieces:

1. **Data and periods.** The data set (a recipe) is written into the run directory as
   ``dataset.toml`` with the experiment's window and split, so that every learner, pod
   and backtest reads the same data. Where the data covers the paper's dates the split
   is the paper's: training from 2016-01-04, backtest 2019-05-13 .. 2021-05-26 (our
   test period). The paper does not say on what its tournament ranked pods; here the
   last year of its training window is the validation period every learner selects on
   (2018-05-14 .. 2019-05-10), so the test period is never read before the backtest.
   On a data set that does not cover those dates (the synthetic stand-in), the window
   (its last ``years`` when given) is split in the paper's proportions: the last 37.8%
   of its days are the test period, the 18.5% before them validation, the rest
   training (the paper's 3.4 years of training and 2.0 of backtest).
2. **Rules.** A preset's env rules (`podracer.presets.apply_preset`; by default
   ``market-costs``, the action that can hold, since the paper's 0.2% per trade is a cost
   that decides) at ``cost`` per side and ``initial_cash`` ($1,000,000): what every
   learner trains under and every strategy is backtested under.
3. **Learners, at equal wall-clock** (``minutes`` each; or equal work: ``pods`` x
   ``pod_steps`` transitions each): the tournament (PPO:SAC:TD3 = 1:1:1, on
   ``workers`` local processes, its result chosen by `tournament.selection`), vanilla
   PPO (one `trader.train` run, snapshotted every ``snapshot_every`` seconds), and the
   baseline libraries (`trader.baselines`: SB3 PPO, FinRL's ensemble, and RLlib PPO
   where ``.venv-rllib`` exists), each in its own folder of the run directory.
4. **The backtest** of the test period (`trader.backtesting.run_backtest`): every
   learner's selected strategy beside the benchmark (QQQ) and equal weight, with the
   evidence (interval, PSR, DSR with each learner's own trials); once more under each
   of ``extra_costs`` (named cost models), whose Sharpe ratios are extra columns.
5. **Table 2** (`table2.md`, `experiment.json`): cumulative return, annual return,
   annual volatility, max drawdown and Sharpe ratio of every row, our evidence
   columns, and the paper's published rows beside them, marked as the paper's.
6. **Figure 7** (`figure7.parquet`, `figure7.png`): the test-period cumulative return of
   vanilla PPO's snapshots and of the tournament's best pod at each snapshot time,
   against training wall-clock.

Resume: the config is written first (``experiment.toml``); the same command on the same
run directory skips every finished stage (a tournament resumes from its log, a vanilla
PPO run that did not finish is trained again from scratch) and ends with the same table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from trader import rundir
from trader.errors import UserError
from trader.rundir import config_from_dict, config_to_dict

EXPERIMENT = rundir.EXPERIMENT
DATASET_RECIPE = rundir.EXPERIMENT_DATASET
TABLE_MD = rundir.EXPERIMENT_TABLE
TABLE_JSON = rundir.EXPERIMENT_JSON
FIGURE_DATA = rundir.EXPERIMENT_FIGURE
FIGURE_PNG = rundir.EXPERIMENT_PLOT
EXPERIMENT_VERSION = rundir.EXPERIMENT_VERSION

PAPER_START = pd.Timestamp("2016-01-04")
PAPER_VALIDATION = pd.Timestamp("2018-05-14")
PAPER_TEST = pd.Timestamp("2019-05-13")
PAPER_END = pd.Timestamp("2021-05-27")  # exclusive: the backtest ends on 2021-05-26
TEST_SHARE = 2.04 / 5.40
VALIDATION_SHARE = 1.0 / 5.40

PAPER_ROWS = {
    "Tournament (the paper)": {"cum_returns_final": 3.62, "sharpe_ratio": 2.42},
    "Vanilla PPO (the paper)": {"cum_returns_final": 2.32, "sharpe_ratio": 2.05},
}
"""The paper's Table 2 as quoted in our issue tracker (cumulative return and Sharpe ratio
of its two headline rows); its other rows and columns are not transcribed here."""

COLUMNS = rundir.EXPERIMENT_COLUMNS

LIBRARIES = ("sb3", "finrl", "rllib")
POD_ENVS = 64
"""Sub-environments of every pod and of the vanilla PPO run (the demo's)."""

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ExperimentConfig:
    """One experiment (written as ``RUN_DIR/experiment.toml``; a run resumes under the same one)."""

    run_dir: str
    """Where everything goes."""
    dataset: str
    """The data set recipe (name or path)."""
    minutes: float | None = None
    """Wall-clock of each learner in minutes (equal wall-clock); give it or ``pods``
    (every field that may be None defaults to None, so the TOML round trip keeps it)."""
    pods: int | None = None
    """Equal work instead of wall-clock: the tournament's pod budget; vanilla PPO and
    each baseline get ``pods x pod_steps`` transitions."""
    pod_steps: int = 50_000
    """Transitions per tournament pod."""
    workers: int = 2
    """Local worker processes of the tournament (each other learner runs in one)."""
    tickers: int | None = None
    """A synthetic data set's number of tickers (a laptop-sized run); None: the recipe's."""
    years: float | None = None
    """Only the data set's last ``years`` (the window is then split in the paper's proportions)."""
    cost: float = 0.002
    """Commission per side (the paper's 0.2%)."""
    preset: str = "market-costs"
    """The env rules' preset (`podracer.presets.PRESETS`): ``market-costs`` trades toward an aim
    at a rate each stock's policy chooses and can hold; ``market`` re-targets the whole book every bar."""
    initial_cash: float = 1_000_000.0
    """Capital of every strategy (the paper's $1,000,000)."""
    extra_costs: tuple[str, ...] = ()
    """Named cost models (`market_envs.costs.COST_MODELS`) to backtest under as well."""
    libraries: tuple[str, ...] = ("sb3", "finrl", "rllib")
    """Baseline libraries; RLlib runs only where ``.venv-rllib`` exists (`make rllib`)."""
    snapshot_every: float | None = None
    """Seconds between Figure 7's snapshots; default a tenth of the wall-clock budget."""
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra_costs", tuple(self.extra_costs))
        object.__setattr__(self, "libraries", tuple(self.libraries))
        if (self.minutes is None) == (self.pods is None):
            raise UserError("give --minutes (equal wall-clock) or --pods (equal work), not both or neither")
        if self.minutes is not None and not self.minutes > 0:
            raise UserError(f"--minutes must be > 0, got {self.minutes}")
        if self.pods is not None and self.pods < 1:
            raise UserError(f"--pods must be >= 1, got {self.pods}")
        for flag, value in (("--pod-steps", self.pod_steps), ("--workers", self.workers)):
            if value < 1:
                raise UserError(f"{flag} must be >= 1, got {value}")
        if self.tickers is not None and self.tickers < 2:
            raise UserError(f"--tickers must be >= 2, got {self.tickers}")
        if self.years is not None and not self.years > 0:
            raise UserError(f"--years must be > 0, got {self.years}")
        if not 0 <= self.cost < 1:
            raise UserError(f"--commission must be in [0, 1), got {self.cost}")
        if self.snapshot_every is not None and not self.snapshot_every > 0:
            raise UserError(f"--snapshot-every must be > 0 seconds, got {self.snapshot_every}")
        from podracer.presets import PRESETS

        if self.preset not in PRESETS:
            raise UserError(f"--preset: unknown preset {self.preset!r}; choose {', '.join(PRESETS)}")
        unknown = [name for name in self.libraries if name not in LIBRARIES]
        if unknown:
            raise UserError(f"--baselines: unknown {unknown}; choose from {', '.join(LIBRARIES)}")

    @property
    def seconds(self) -> float | None:
        return None if self.minutes is None else 60.0 * self.minutes

    @property
    def steps(self) -> int | None:
        """Equal work: every learner's transitions (None at equal wall-clock)."""
        return None if self.pods is None else self.pods * self.pod_steps

    @property
    def snapshot_seconds(self) -> float:
        if self.snapshot_every is not None:
            return self.snapshot_every
        return (self.seconds or 600.0) / 10.0

    def to_dict(self) -> dict[str, Any]:
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> ExperimentConfig:
        return config_from_dict(cls, values)


@dataclass
class ExperimentResult:
    """What `run_experiment` returns (``experiment.json`` holds the same numbers)."""

    run_dir: Path
    table: pd.DataFrame
    """Table 2: one row per strategy (ours, then the paper's), the `COLUMNS` and evidence."""
    figure: pd.DataFrame = field(repr=False)
    """Figure 7's points: learner, seconds, cum_return."""
    backtest: Any = field(repr=False)
    """The `BacktestResult` of the test period."""


def run_experiment(config: ExperimentConfig, on_progress: Progress | None = None) -> ExperimentResult:
    """Run (or resume) the experiment; see the module docstring."""
    say = on_progress or (lambda line: None)
    root = Path(config.run_dir)
    chosen = experiment_recipe(config)  # bad input is refused before the run directory is touched
    config = claim(config, root)
    recipe = root / DATASET_RECIPE
    data = _write_dataset(chosen, recipe, config.dataset)
    rules, algo_configs = _rules(config, str(recipe))
    say(
        f"data set {data.name}: {data.num_tickers} tickers; test period {data.period('test').start} .. "
        f"{data.period('test').end}; every learner gets {_budget_text(config)}"
    )
    tournament = _tournament(config, root, str(recipe), rules, algo_configs, say)
    ppo = _vanilla_ppo(config, root, str(recipe), rules, algo_configs["ppo"], say)
    _libraries(config, ppo, say)
    say("backtesting every learner on the test period ...")
    result, extra = _backtest(config, root, data, rules, tournament, ppo)
    table = table2(result, extra, labels=learner_labels(tournament))
    figure = _figure(config, root, data, rules, tournament, ppo)
    write_outputs(root, config, table, figure)
    return ExperimentResult(root, table, figure, result)


# --------------------------------------------------------------------------- set-up


def claim(config: ExperimentConfig, root: Path) -> ExperimentConfig:
    """Write ``experiment.toml`` into a new run directory, or check that a resumed one
    holds the same config (a different one is refused: its stages would not fit)."""
    rundir.claim_run(root, EXPERIMENT, config.to_dict(), "an experiment")
    return config


def experiment_recipe(config: ExperimentConfig) -> Any:
    """The experiment's data set recipe: ``config.dataset`` with the experiment's window and
    split (and a synthetic data set's tickers). A data set without a benchmark, a window
    the data does not hold, or tickers of a real universe: one `UserError`."""
    from market_envs.data.recipes import find_recipe

    recipe = find_recipe(config.dataset).resolved()
    if recipe.benchmark is None and recipe.source != "synthetic":
        raise UserError(f"--dataset {config.dataset}: it has no benchmark, and Table 2 compares with one (QQQ)")
    overrides: dict[str, Any] = {}
    if config.tickers is not None:
        if recipe.source != "synthetic":
            raise UserError("--tickers sizes a synthetic data set only; a real universe is the index's members")
        overrides["n_tickers"] = config.tickers
    overrides.update(experiment_dates(recipe.start, recipe.end, config.years))
    return recipe.with_overrides(name=f"{recipe.name}-experiment", **overrides)


def _write_dataset(recipe: Any, path: Path, asked: str) -> Any:
    """Write ``recipe`` to ``path`` (once: a resumed run keeps its file) and load it."""
    from market_envs.data import load
    from market_envs.data.recipes import write_recipe

    if not path.is_file():
        write_recipe(recipe, path)
    data = load(str(path))
    if data.benchmark is None:
        raise UserError(f"--dataset {asked}: it has no benchmark, and Table 2 compares with one (QQQ)")
    return data


def experiment_dates(start: str, end: str, years: float | None) -> dict[str, str]:
    """The window and split (`start`, `train_end`, `val_end`, `end`) of the module docstring."""
    lo, hi = pd.Timestamp(start), pd.Timestamp(end)
    if years is not None:
        first = hi - pd.Timedelta(days=round(365.25 * years))
        if first < lo:
            raise UserError(
                f"--years {years:g}: the data set holds {(hi - lo).days / 365.25:.1f} years ({start} .. {end})"
            )
        lo = first
    if lo <= PAPER_START and hi >= PAPER_END:
        cuts = (PAPER_START, PAPER_VALIDATION, PAPER_TEST, PAPER_END)
    else:
        days = (hi - lo).days
        test = hi - pd.Timedelta(days=round(TEST_SHARE * days))
        validation = test - pd.Timedelta(days=round(VALIDATION_SHARE * days))
        cuts = (lo, validation, test, hi)
    if not cuts[0] < cuts[1] < cuts[2] < cuts[3] or (cuts[1] - cuts[0]).days < 7:
        raise UserError(f"the window {start} .. {end} is too short for a training, validation and test period")
    return dict(zip(("start", "train_end", "val_end", "end"), (f"{c:%Y-%m-%d}" for c in cuts)))


def _rules(config: ExperimentConfig, recipe: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The preset's env rules at the experiment's cost and capital (rewards kept the same share of
    it, `podracer.presets.rules_at_capital`), and its algorithm configs."""
    from podracer.presets import apply_preset, rules_at_capital

    steps = config.steps or config.pod_steps
    rules, algo_configs = apply_preset(
        config.preset, recipe, config.cost, ("ppo", "sac", "td3"), steps=steps, num_envs=POD_ENVS
    )
    return rules_at_capital(rules, config.initial_cash), algo_configs


def _budget_text(config: ExperimentConfig) -> str:
    if config.seconds is not None:
        return f"{config.minutes:g} minutes of wall-clock (the tournament on {config.workers} processes, the others on one)"
    return f"{config.steps:,} transitions (the tournament's {config.pods} pods of {config.pod_steps:,})"


# --------------------------------------------------------------------------- the learners


def _tournament(
    config: ExperimentConfig,
    root: Path,
    recipe: str,
    rules: dict[str, Any],
    algo_configs: dict[str, dict[str, Any]],
    say: Progress,
) -> Path:
    """The tournament, PPO:SAC:TD3 = 1:1:1, in ``RUN_DIR/tournament`` (resumed from its log)."""
    from tournament import TournamentConfig, run
    from trader.spec import market_spec

    folder = root / "tournament"
    if (folder / rundir.SELECTION).is_file():
        return folder
    settings = TournamentConfig(
        run_dir=str(folder),
        env=market_spec(recipe, rules),
        algos=("ppo", "sac", "td3"),
        algo_configs=algo_configs,
        pod_steps=config.pod_steps,
        num_envs=POD_ENVS,
        pods=config.pods,
        time_budget=config.seconds,
        workers=config.workers,
        seed=config.seed,
        device=config.device,
        backtest=False,
        keep_checkpoints=True,
    )
    resume = (folder / rundir.EVENTS).is_file()
    say(f"tournament: {'resuming' if resume else 'starting'} in {folder} ...")
    run(settings, resume=resume)
    return folder


def _vanilla_ppo(
    config: ExperimentConfig, root: Path, recipe: str, rules: dict[str, Any], algo_config: dict[str, Any], say: Progress
) -> Path:
    """One PPO run with the preset, in ``RUN_DIR/ppo``, snapshotted for Figure 7; an unfinished
    one (no final checkpoint: the best one is written as it is found) is replaced whole
    (`trader.train`'s ``overwrite``), so that a resumed experiment ends with the table of an
    uninterrupted one."""
    from trader.training import train

    folder = root / "ppo"
    if (folder / rundir.CHECKPOINTS / "final.json").is_file():
        return folder
    say(f"vanilla PPO: training in {folder} ...")
    train(
        "ppo",
        recipe,
        algo_config,
        folder,
        steps=config.steps or 10**12,
        seed=config.seed,
        device=config.device,
        num_envs=POD_ENVS,
        eval_every=0,
        env_config=rules,
        time_budget=config.seconds,
        snapshot_every=config.snapshot_seconds,
        overwrite=True,
    )  # an unfinished run of ours: replaced whole
    return folder


def _libraries(config: ExperimentConfig, ppo: Path, say: Progress) -> None:
    """SB3 PPO, FinRL's ensemble and RLlib PPO (where installed) in ``RUN_DIR/ppo/baselines``:
    the vanilla PPO run's data, rules and periods, each at the same budget."""
    from trader.libraries import baselines

    for library in config.libraries:
        if library == "rllib" and not _rllib_available():
            say("RLlib: left out (no .venv-rllib; `make rllib` builds it)")
            continue
        name = {"sb3": "sb3-ppo", "finrl": "finrl-ensemble", "rllib": "rllib-ppo"}[library]
        if (ppo / rundir.BASELINES_DIR / f"{name}-s{config.seed}" / rundir.BASELINE_SIDECAR).is_file():
            continue
        say(f"{library}: training ...")
        baselines(
            ppo,
            [library],
            ["ppo"],
            steps=config.steps,
            time_budget=config.seconds,
            seeds=[config.seed],
            device=config.device,
            backtest=False,
            progress=say,
        )


def _rllib_available() -> bool:
    from trader.libraries.rllib import rllib_python

    try:
        rllib_python()
    except UserError:
        return False
    return True


# --------------------------------------------------------------------------- the backtest


def _backtest(
    config: ExperimentConfig, root: Path, data: Any, rules: dict[str, Any], tournament: Path, ppo: Path
) -> tuple[Any, dict[str, pd.Series]]:
    """The test period: every learner's selected strategy, the benchmark and equal weight,
    under the experiment's costs (report in the run directory) and under each extra cost
    model (their Sharpe ratios, by strategy)."""
    from market_envs.costs import cost_model
    from trader.backtesting.config import BacktestConfig
    from trader.backtesting.engine import run_backtest
    from trader.backtesting.runs import contents_trials, read_run, run_strategies

    policies, trials = {}, {}
    for label, folder, pick in (("tournament", tournament, None), ("ppo", ppo, "best")):
        contents = read_run(folder)
        found = run_strategies(contents, config.device)
        chosen = pick or contents.result or "best"
        if chosen not in found:  # a budget too small for one pod (or one validation) to finish
            budget = f"--minutes {config.minutes:g}" if config.minutes else f"--pods {config.pods}"
            raise UserError(
                f"{folder} holds no {chosen!r} strategy: the {label} finished nothing to select within {budget} "
                f"(--pod-steps {config.pod_steps}); give more --minutes or fewer --pod-steps"
            )
        policies[label] = found[chosen]
        trials[label] = contents_trials(contents)[chosen]
        for name in (n for n in found if n not in ("best", "final", "ensemble")):  # the baselines
            policies[name] = found[name]
            if name in contents_trials(contents):
                trials[name] = contents_trials(contents)[name]
    base = BacktestConfig(
        initial_cash=config.initial_cash,
        buy_cost=config.cost,
        sell_cost=config.cost,
        tear_sheet=False,
        policy_env=_env_config(rules),
    )
    yardsticks = ["benchmark", "equal_weight"] if data.benchmark is not None else ["equal_weight"]
    result = run_backtest(
        data,
        policies,
        baselines=yardsticks,
        period="test",
        config=base,
        run_dir=root,
        device=config.device,
        trials=trials,
    )
    extra = {}
    for name in config.extra_costs:
        other = run_backtest(
            data,
            policies,
            baselines=yardsticks,
            period="test",
            config=base.with_costs(cost_model(name)),
            device=config.device,
        )
        extra[name] = other.metrics["sharpe_ratio"]
    return result, extra


def _env_config(rules: dict[str, Any]) -> Any:
    from market_envs.config import EnvConfig

    return config_from_dict(EnvConfig, rules)


def learner_labels(tournament: Path) -> dict[str, str]:
    """Table 2's names of our two learners: the tournament with its result, vanilla PPO."""
    from trader.backtesting.runs import read_run

    contents = read_run(tournament)
    if contents.result == "ensemble":
        what = f"ensemble of {len(contents.ensemble)} pods"
    else:
        best = contents.checkpoints.get("best")
        algo = rundir.read_json(best.with_suffix(".json")).get("algo", "") if best is not None else ""
        what = f"best pod, {str(algo).upper()}"
    return {"tournament": f"Tournament ({what})", "ppo": "Vanilla PPO"}


def table2(
    result: Any, extra: Mapping[str, pd.Series] | None = None, labels: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """Table 2: our rows (the backtest's metrics, labelled, with the evidence columns and a
    Sharpe column per extra cost model), then the paper's rows (marked, where we have them).
    ``labels`` replace the backtest's labels of some strategies."""
    labels = {**result.labels(), **(labels or {})}
    rows = []
    for name in result.metrics.index:
        metrics, evidence = result.metrics.loc[name], result.evidence.get(str(name), {})
        row = {"strategy": labels.get(name, name), "source": "ours", **{c: float(metrics[c]) for c in COLUMNS}}
        interval = evidence.get("interval_bootstrap") or [None, None]
        row.update(
            {
                "sharpe_low": interval[0],
                "sharpe_high": interval[1],
                "psr": evidence.get("psr"),
                "dsr": evidence.get("dsr_null"),
                "trials": evidence.get("n_trials"),
            }
        )
        for model, sharpes in (extra or {}).items():
            row[f"sharpe_{model}"] = float(sharpes.get(name, math.nan))
        rows.append(row)
    for label, values in PAPER_ROWS.items():
        rows.append({"strategy": label, "source": "the paper", **{c: values.get(c, math.nan) for c in COLUMNS}})
    return pd.DataFrame(rows).set_index("strategy")


# --------------------------------------------------------------------------- Figure 7


def _figure(
    config: ExperimentConfig, root: Path, data: Any, rules: dict[str, Any], tournament: Path, ppo: Path
) -> pd.DataFrame:
    """Test-period cumulative return of each snapshot: vanilla PPO's (``ppo/snapshots``) and
    the tournament's best pod at the same marks (`best_pods_over_time`), one backtest."""
    from trader.backtesting.config import BacktestConfig
    from trader.backtesting.engine import run_backtest
    from trader.training import snapshot_name, snapshot_seconds

    points: dict[str, tuple[str, float]] = {}
    policies: dict[str, Path] = {}
    for path in sorted((ppo / rundir.SNAPSHOTS).glob("ms*.json")):
        points[f"ppo-{path.stem}"] = ("vanilla PPO", snapshot_seconds(path.stem))
        policies[f"ppo-{path.stem}"] = path.with_suffix("")
    for seconds, checkpoint in best_pods_over_time(tournament, config.snapshot_seconds).items():
        name = f"tournament-{snapshot_name(seconds)}"
        points[name] = ("tournament", seconds)
        policies[name] = tournament / checkpoint
    if not policies:
        return pd.DataFrame(columns=["learner", "seconds", "cum_return"])
    base = BacktestConfig(
        initial_cash=config.initial_cash,
        buy_cost=config.cost,
        sell_cost=config.cost,
        tear_sheet=False,
        record_positions="day",
        policy_env=_env_config(rules),
    )
    result = run_backtest(data, policies, baselines=[], period="test", config=base, device=config.device)
    rows = [
        {"learner": learner, "seconds": seconds, "cum_return": float(result.metrics.loc[name, "cum_returns_final"])}
        for name, (learner, seconds) in points.items()
    ]
    return pd.DataFrame(rows).sort_values(["learner", "seconds"]).reset_index(drop=True)


def best_pods_over_time(tournament: Path, every: float) -> dict[float, str]:
    """At each multiple of ``every`` seconds from the tournament's (first) start to its
    (last) stop, the checkpoint of the best pod that had finished by then (the
    ``entered`` events of ``events.jsonl``); marks before the first pod are left out."""
    events = rundir.read_json_lines(tournament / rundir.EVENTS)
    started = next((e["time"] for e in events if e["kind"] == "started"), None)
    stopped = max((e["time"] for e in events if e["kind"] == "stopped"), default=None)
    if started is None or stopped is None:
        return {}
    entered = [(e["time"] - started, e["pod_id"], e["score"]) for e in events if e["kind"] == "entered"]
    out = {}
    for mark in (every * k for k in range(1, int((stopped - started) // every) + 1)):
        seen = [(score, pod) for seconds, pod, score in entered if seconds <= mark and score is not None]
        if seen:
            pod = max(seen)[1]
            out[mark] = f"{rundir.PODS_DIR}/{pod}/{rundir.CHECKPOINTS}/best"
    return out


# --------------------------------------------------------------------------- outputs


def write_outputs(root: Path, config: ExperimentConfig, table: pd.DataFrame, figure: pd.DataFrame) -> None:
    """Write Table 2 (``experiment.json``, ``table2.md``) and Figure 7 (``figure7.parquet``, and
    ``figure7.png`` when it has points) into ``root``, each whole or not at all."""
    rundir.write_json(
        root / TABLE_JSON,
        {
            "format_version": EXPERIMENT_VERSION,
            "config": config.to_dict(),
            "table": _json_rows(table),
            "paper_rows": PAPER_ROWS,
        },
    )
    rundir.write_text(root / TABLE_MD, table_markdown(table))
    rundir.write_parquet(root / FIGURE_DATA, figure)
    if len(figure):
        rundir.write_atomic(root / FIGURE_PNG, lambda tmp: _plot(figure, tmp))


def _json_rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    rows = []
    for name, row in table.iterrows():
        rows.append(
            {"strategy": name, **{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}}
        )
    return rows


def table_markdown(table: pd.DataFrame) -> str:
    """Table 2 as Markdown: percentages for the return columns, "-" where a figure is missing."""
    from trader.metrics import METRIC_LABELS, PERCENT_METRICS

    extra = [
        c for c in table.columns if c.startswith("sharpe_") and c not in ("sharpe_ratio", "sharpe_low", "sharpe_high")
    ]
    header = [
        "Strategy",
        *(METRIC_LABELS[c] for c in COLUMNS),
        "95% interval",
        "PSR",
        "DSR",
        "Trials",
        *(f"Sharpe ({c.removeprefix('sharpe_')})" for c in extra),
    ]

    def cell(value: Any, percent: bool = False) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        return f"{100 * value:.2f}%" if percent else f"{value:.2f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, row in table.iterrows():
        interval = "-" if pd.isna(row.get("sharpe_low")) else f"[{row['sharpe_low']:.2f}, {row['sharpe_high']:.2f}]"
        cells = [
            str(name),
            *(cell(row[c], c in PERCENT_METRICS) for c in COLUMNS),
            interval,
            cell(row.get("psr")),
            cell(row.get("dsr")),
            cell(None if pd.isna(row.get("trials")) else int(row["trials"])),
            *(cell(row[c]) for c in extra),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    note = (
        '\nRows marked "(the paper)" are the seed paper\'s published Table 2 figures (cumulative return and '
        "Sharpe ratio of its two headline rows), not ours; the other cells of its table are not transcribed.\n"
    )
    return "\n".join(lines) + "\n" + note


def _plot(figure: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for learner, rows in figure.groupby("learner"):
        ax.plot(rows["seconds"], 100 * rows["cum_return"], marker="o", label=learner)
    ax.set_xlabel("training wall-clock (s)")
    ax.set_ylabel("test-period cumulative return (%)")
    ax.set_title("Snapshots against wall-clock (the paper's Figure 7)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


__all__ = [
    "ExperimentConfig",
    "ExperimentResult",
    "best_pods_over_time",
    "claim",
    "experiment_dates",
    "learner_labels",
    "run_experiment",
    "table2",
    "table_markdown",
    "write_outputs",
]
