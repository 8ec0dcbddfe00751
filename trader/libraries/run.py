"""`baselines(run_dir, ...)`: train the baseline libraries on a run's data and rules, then
backtest them beside the run's own strategies.

Each baseline sees what the run's agents saw: the run's data set, its train period to
learn from, its validation period to choose the snapshot (with the evaluator our runs
use), its env rules (`EnvConfig`: fills, costs, action mode, reward scale). Then one
backtest of the test period (`trader.backtesting.runs.backtest_run`) writes the
report with every strategy of the run directory: its checkpoints or tournament
pods, every baseline folder, and the built-in baselines; a report that held each strategy's
breakeven cost (`trader backtest`, a tournament's) holds them again, for the new rows too.
"""

from __future__ import annotations

import math
import os
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from market_envs.costs import check_costs_for_data
from market_envs.config import EnvConfig
from trader.rundir import config_to_dict
from trader.libraries import finrl
from trader.libraries.budget import Budget
from trader.backtesting.baseline_folder import commit, folder_name, staging, write_sidecar
from trader.errors import UserError

LIBRARIES = ("sb3", "sb3-dummy", "finrl", "rllib")
"""``sb3``: SB3 on `SB3VecEnv` over our batched env; ``sb3-dummy``: SB3 on
`GymStockTradingEnv`s in SB3's `DummyVecEnv` (how SB3 and FinRL users run it);
``finrl``: FinRL's ensemble strategy (its own three learners, ``--baseline-algos`` does not
apply); ``rllib``: RLlib PPO and SAC, in RLlib's own environment (``make rllib``)."""

LABELS = {"sb3": "SB3", "sb3-dummy": "SB3", "finrl": "FinRL", "rllib": "RLlib"}

ProgressFn = Callable[[str], None]


@dataclass
class Outcome:
    """One baseline's training: its folder name, status and figures."""

    name: str
    library: str
    algo: str
    seed: int
    status: str
    """"finished" or "failed"."""
    folder: Path
    steps: int = 0
    seconds: float = 0.0
    validation_score: float | None = None
    error: str | None = None


@dataclass
class BaselinesResult:
    """What `baselines` returns: one `Outcome` per baseline and the backtest."""

    outcomes: list[Outcome]
    budget: Budget
    report: Any = field(default=None, repr=False)
    """The `BacktestResult` of the test period (None with ``backtest=False``)."""


def baselines(
    run_dir: str | os.PathLike[str],
    libraries: Sequence[str] = ("sb3",),
    algos: Sequence[str] = ("ppo",),
    *,
    steps: int | None = None,
    time_budget: float | None = None,
    seeds: int | Sequence[int] = 1,
    dataset: str | None = None,
    env_config: EnvConfig | dict[str, Any] | None = None,
    preset: str = "sb3",
    num_envs: int = 1,
    eval_every: int = 10_000,
    windows: int = 4,
    device: str = "cpu",
    backtest: bool = True,
    tear_sheet: bool = True,
    costs: Any = None,
    overwrite: bool = False,
    progress: ProgressFn | None = None,
    spec: Any = None,
) -> BaselinesResult:
    """Train each (library, algorithm, seed) on the run's data and rules; backtest them all.

    :param run_dir: a run directory (`trader train`, `trader tournament`) or a new
        folder (then give ``dataset``); baselines go to ``run_dir/baselines/``.
    :param libraries: any of `LIBRARIES`.
    :param algos: SB3 algorithms (ppo, sac, td3, a2c, ddpg) for the ``sb3`` libraries.
    :param steps: every learner gets this many env steps (equal work); default
        100,000 when no ``time_budget`` is given.
    :param time_budget: every learner gets this many seconds of training (equal
        wall-clock); FinRL's ensemble shares it over its windows and learners.
    :param seeds: K: seeds 0 .. K-1 of each baseline; or the seeds themselves.
    :param dataset: a data set recipe; default the run's.
    :param env_config: the env rules (an `EnvConfig` or overrides of its defaults);
        default the run's (the defaults when it records none).
    :param preset: SB3 hyperparameters: "sb3" (SB3's defaults) or "finrl" (FinRL's).
    :param num_envs: sub-environments SB3 steps at once.
    :param eval_every: env steps between validations (0: at the end only).
    :param windows: trading windows of FinRL's ensemble over the test period.
    :param device: where the envs and SB3's networks run.
    :param backtest: backtest everything in the run directory on the test period.
    :param tear_sheet: draw the pyfolio tear sheet in that backtest.
    :param costs: a `market_envs.costs.NamedCosts` the baselines train under and every strategy
        is backtested under, instead of the rules' own (None: the rules' own, as the run's agents).
    :param overwrite: train again a baseline whose folder holds a finished one (replaced
        whole once the new one finishes); without it such a baseline is refused before any
        training. A failed one is always trained again.
    :param progress: called with one line of text per validation and per baseline.
    :param spec: the run's `trader.spec.MarketSpec` when the caller holds it (a walk-forward
        fold's): the data set, windows and rules as they are, none read from the run's files
        (``dataset`` and ``env_config`` do not apply beside it).
    """
    budget = Budget(steps=steps if steps is not None or time_budget is not None else 100_000, seconds=time_budget)
    jobs = _jobs(libraries, algos, seeds)
    from trader.libraries.sb3 import hyperparameters

    for library, algo, _ in jobs:  # SB3's hyperparameters: a bad preset is refused before any training
        if library in ("sb3", "sb3-dummy"):
            hyperparameters(algo, preset)
    from trader.backtesting.runs import read_run

    if spec is not None and (dataset is not None or env_config is not None):
        raise UserError("a spec carries the data set and the env rules: give no dataset or env_config beside it")
    root = Path(run_dir)
    contents = read_run(root, spec)
    recipe = dataset or contents.dataset
    if not recipe:
        raise UserError(f"no data set: {root} records none (config.toml or tournament.toml); pass --dataset RECIPE")
    rules = _rules(env_config) if env_config is not None else contents.env_config or EnvConfig()
    if costs is not None:
        rules = costs.apply(rules)
    check_finished(root, jobs, overwrite=overwrite, backtest=backtest)
    if backtest:
        from trader.backtesting.runs import check_checkpoints

        check_checkpoints(contents)  # a strategy of the run that is gone: now, not after the training
    data = _load(recipe, contents)
    check_costs_for_data(rules.costs, data)  # before any training: a cap on close-only data is bad input
    say = progress or (lambda line: None)
    outcomes = []
    for library, algo, seed in jobs:
        outcome = _train_one(
            library,
            algo,
            seed,
            data,
            recipe,
            rules,
            budget,
            root,
            preset=preset,
            num_envs=num_envs,
            eval_every=eval_every,
            windows=windows,
            device=device,
            say=say,
        )
        outcomes.append(outcome)
    report = None
    if backtest:
        from trader.backtesting.runs import backtest_config, backtest_run, report_has_breakeven

        say("backtesting every strategy of the run directory on the test period")
        from market_envs.costs import NamedCosts

        # the baselines' model: the one they trained under, which is the run's unless `costs` replaced it
        named = costs if costs is not None else NamedCosts.from_config(rules)
        # the report rewritten keeps its breakeven column: computed again, for the new rows too
        config = backtest_config(contents, tear_sheet=tear_sheet, costs=named, breakeven=report_has_breakeven(root))
        report = backtest_run(
            root, dataset=recipe, config=config, device=device, spec=spec, overwrite=True
        )  # the run's strategies grew: its report (or the one under `costs`) with them
    return BaselinesResult(outcomes, budget, report)


def _jobs(libraries: Sequence[str], algos: Sequence[str], seeds: int | Sequence[int]) -> list[tuple[str, str, int]]:
    """(library, algo, seed) for every baseline asked for; bad names fail before any work."""
    from trader.adapters.sb3 import ALGOS, sb3_version

    unknown = [lib for lib in libraries if lib not in LIBRARIES]
    if unknown or not libraries:
        raise UserError(f"unknown library {unknown or '(none)'}; choose from {', '.join(LIBRARIES)}")
    from trader.libraries import rllib

    bad = [a for a in algos if a not in ALGOS]
    if bad or not algos:
        raise UserError(f"unknown algorithm {bad or '(none)'}; SB3 baselines take {', '.join(ALGOS)}")
    if isinstance(seeds, int) and seeds < 1:
        raise UserError(f"--seeds must be at least 1, got {seeds}")
    chosen_seeds = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
    if not chosen_seeds or min(chosen_seeds) < 0:
        raise UserError(f"seeds must be non-negative integers, got {seeds}")
    if "rllib" in libraries:
        if not set(algos) & set(rllib.ALGOS):
            raise UserError(f"RLlib baselines take {', '.join(rllib.ALGOS)}; --baseline-algos gives none of them")
        rllib.rllib_python()  # not installed: say how, before any training
    if set(libraries) - {"rllib"}:
        sb3_version()  # these train through SB3: say how to install it now, not after the first job
    jobs = []
    for library in dict.fromkeys(libraries):
        chosen = {"finrl": ["ensemble"], "rllib": [a for a in algos if a in rllib.ALGOS]}.get(library, algos)
        for algo in dict.fromkeys(chosen):
            jobs.extend((library, algo, seed) for seed in dict.fromkeys(chosen_seeds))
    return jobs


def check_finished(root: Path, jobs: list[tuple[str, str, int]], *, overwrite: bool, backtest: bool) -> None:
    """Refuse, before any training, to replace a finished baseline without ``overwrite``; and
    ``overwrite`` without the backtest when a report of the run lists the baseline replaced
    (it would keep the old model's figures)."""
    from trader.rundir import read_baseline, reports

    for library, algo, seed in jobs:
        name = folder_name(library, algo, seed)
        folder = root / "baselines" / name
        if not folder.is_dir() or read_baseline(folder).get("status") != "finished":
            continue
        if not overwrite:
            raise UserError(
                f"{folder} holds a finished baseline already: pass --overwrite to train it again "
                "(and redo the report with it)"
            )
        if not backtest:
            listed = [
                r.path / "report.json"
                for r in reports(root)
                if name in {s.get("name") for s in read_report_strategies(r.path)}
            ]
            if listed:
                raise UserError(
                    f"--overwrite with --no-backtest would leave {listed[0]} with the old {name}'s "
                    "figures; drop --no-backtest"
                )


def read_report_strategies(folder: Path) -> list[dict[str, Any]]:
    """The ``strategies`` entries of a report's ``report.json``."""
    from trader.rundir import REPORT_JSON, read_json

    values = read_json(folder / REPORT_JSON)
    return [s for s in values.get("strategies", []) if isinstance(s, dict)] if isinstance(values, dict) else []


def _rules(values: EnvConfig | dict[str, Any]) -> EnvConfig:
    from trader.rundir import config_from_dict

    return values if isinstance(values, EnvConfig) else config_from_dict(EnvConfig, values)


def _load(recipe: str, contents: Any) -> Any:
    """The data set as the run saw it: its own periods (a walk-forward fold's) when it
    records some, else the recipe's split dates."""
    data = contents.data(recipe)
    data.period("train")  # a data set without split dates: one clear DataError now
    return data


def _train_one(
    library: str,
    algo: str,
    seed: int,
    data: Any,
    recipe: str,
    rules: EnvConfig,
    budget: Budget,
    root: Path,
    *,
    say: ProgressFn,
    **options: Any,
) -> Outcome:
    """Train one baseline into its folder; a crash is reported, never raised."""
    name = folder_name(library, algo, seed)
    staged = staging(root, name)
    started = time.perf_counter()
    say(f"[{name}] training ({budget})")
    common = {
        "library": library,
        "algo": algo,
        "seed": seed,
        "dataset": recipe,
        "env_config": config_to_dict(rules),
        "budget": budget.as_dict(),
        "periods": {p: [str(data.period(p).start), str(data.period(p).end)] for p in ("train", "validation")},
    }
    try:
        trained = {"finrl": _train_finrl, "rllib": _train_rllib}.get(library, _train_sb3)
        sidecar = trained(
            library,
            algo,
            seed,
            data,
            rules,
            budget,
            staged,
            say=lambda line: say(f"[{name}] {line}"),
            recipe=recipe,
            **options,
        )
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as err:  # a baseline that crashes is reported; the others still run
        message = f"{type(err).__name__}: {err}"
        failed = staging(root, f"{name}")
        write_sidecar(
            failed,
            {
                **common,
                "status": "failed",
                "error": message,
                "traceback": traceback.format_exc(),
                "seconds": time.perf_counter() - started,
            },
        )
        commit(failed, name)
        say(f"[{name}] failed: {message}")
        return Outcome(name, library, algo, seed, "failed", root / "baselines" / name, error=message)
    sidecar = {**common, **sidecar, "status": "finished"}
    write_sidecar(staged, sidecar)
    folder = commit(staged, name)
    say(f"[{name}] done: {sidecar['steps']:,} steps in {sidecar['seconds']:.0f} s")
    return Outcome(
        name,
        library,
        algo,
        seed,
        "finished",
        folder,
        sidecar["steps"],
        sidecar["seconds"],
        (sidecar.get("selection") or {}).get("score"),
    )


def _validation_line(row: dict[str, Any]) -> str:
    return f"{int(row['step']):,} steps, {row['seconds']:.0f} s, validation score {row['score']:.2f}"


def _train_sb3(
    library: str,
    algo: str,
    seed: int,
    data: Any,
    rules: EnvConfig,
    budget: Budget,
    folder: Path,
    *,
    say: ProgressFn,
    preset: str,
    num_envs: int,
    eval_every: int,
    device: str,
    **_: Any,
) -> dict[str, Any]:
    """One SB3 model on the train period, its best validation snapshot in ``model.zip``."""
    from trader.adapters.sb3 import sb3_version
    from trader.libraries.sb3 import fit, hyperparameters, make_model
    from trader.agents.evaluator import market_evaluator

    params = hyperparameters(algo, preset)
    venv = _vec_env(library, data.period("train"), rules, num_envs, device)
    model = make_model(algo, venv, params, seed, device)
    evaluator = market_evaluator(data.period("validation"), rules, device)
    result = fit(
        model,
        evaluator,
        budget,
        folder / "model.zip",
        eval_every=eval_every,
        progress=lambda row: say(_validation_line(row)),
    )
    suffix = ", DummyVecEnv" if library == "sb3-dummy" else ""
    return {
        "library_version": sb3_version(),
        "trained_with": f"stable-baselines3 {sb3_version()}",
        "label": f"SB3 {algo.upper()}{suffix} (seed {seed})",
        "preset": preset,
        "hyperparameters": params,
        "num_envs": num_envs,
        "vec_env": "DummyVecEnv of GymStockTradingEnv"
        if library == "sb3-dummy"
        else "SB3VecEnv over StockTradingVecEnv",
        "steps": result.steps,
        "seconds": result.seconds,
        "samples_per_s": result.steps / max(result.seconds, 1e-9),
        "models": [{"file": "model.zip", "algo": algo, "start": None}],
        "selection": {"step": result.best_step, "score": result.best_score, "validation": result.best_metrics},
        "validation": result.history,
    }


def _train_rllib(
    library: str,
    algo: str,
    seed: int,
    data: Any,
    rules: EnvConfig,
    budget: Budget,
    folder: Path,
    *,
    say: ProgressFn,
    recipe: str,
    eval_every: int,
    **_: Any,
) -> dict[str, Any]:
    """RLlib in its own environment (`trader.libraries.rllib`); the exported actor in ``policy.safetensors``."""
    from trader.libraries.rllib import train_rllib

    return train_rllib(algo, seed, recipe, config_to_dict(rules), budget, folder, eval_every, say)


def _vec_env(library: str, panel: Any, rules: EnvConfig, num_envs: int, device: str) -> Any:
    """The SB3 `VecEnv` a library trains on (over `panel`, under `rules`)."""
    from market_envs.env import StockTradingVecEnv

    if library == "sb3-dummy":
        from stable_baselines3.common.vec_env import DummyVecEnv

        from market_envs.gym_adapter import GymStockTradingEnv

        cpu_panel = panel.to("cpu")
        return DummyVecEnv([lambda: GymStockTradingEnv(cpu_panel, rules) for _ in range(num_envs)])
    from trader.libraries.sb3_env import SB3VecEnv

    return SB3VecEnv(StockTradingVecEnv(panel, num_envs, device, rules))


def _train_finrl(
    library: str,
    algo: str,
    seed: int,
    data: Any,
    rules: EnvConfig,
    budget: Budget,
    folder: Path,
    *,
    say: ProgressFn,
    num_envs: int,
    windows: int,
    device: str,
    **_: Any,
) -> dict[str, Any]:
    """FinRL's ensemble over the test period: per window, the chosen learner's model file."""
    from trader.adapters.sb3 import SB3Policy, load_model, sb3_version
    from trader.libraries.sb3 import fit, hyperparameters, make_model
    from trader.agents.evaluator import market_evaluator

    train, test = data.period("train"), data.period("test")
    upto = data.take(slice(0, int(data.timestamps.searchsorted(test.end, "right"))))  # nothing after the test period
    full = upto.with_normalization(train.feature_mean, train.feature_std)  # every window sees the run's features
    plan = finrl.rolling_windows(full, test.start, windows)
    share = budget.split(len(plan) * len(finrl.LEARNERS))
    spent = {"steps": 0, "seconds": 0.0}

    def fit_one(learner: str, panel: Any, validation: Any, k: int) -> tuple[Any, dict[str, Any]]:
        params = hyperparameters(learner, "finrl-ensemble")
        model = make_model(learner, _vec_env("sb3", panel, rules, num_envs, device), params, seed, device)
        path = folder / f"window-{k:02d}-{learner}.zip"
        # FinRL validates each learner once, after its training: no snapshot selection inside a learner;
        # it picks the learner by the Sharpe ratio of the daily returns.
        evaluator = market_evaluator(validation, rules, device, score_by="sharpe")
        result = fit(model, evaluator, share, path, eval_every=0)
        spent["steps"] += result.steps
        spent["seconds"] += result.seconds
        say(
            f"window {k + 1}/{len(plan)} {learner}: {result.steps:,} steps, {result.seconds:.0f} s, "
            f"validation Sharpe {result.best_score if result.best_score is not None else float('nan'):.2f}"
        )
        sharpe = math.nan if result.best_score is None else result.best_score
        details = {"file": path.name, "steps": result.steps, "seconds": result.seconds, "hyperparameters": params}
        return SB3Policy(load_model(learner, path, device)), sharpe, details

    choices = finrl.run_ensemble(full, plan, fit_one)
    for choice in choices:  # keep the chosen learners' model files only
        for learner, details in choice.details.items():
            if learner != choice.chosen:
                (folder / details["file"]).unlink(missing_ok=True)
    return {
        "library_version": sb3_version(),
        "trained_with": f"stable-baselines3 {sb3_version()} (FinRL's procedure, trader.libraries.finrl)",
        "label": f"FinRL ensemble (seed {seed})",
        "preset": "finrl-ensemble",
        "hyperparameters": {learner: hyperparameters(learner, "finrl-ensemble") for learner in finrl.LEARNERS},
        "num_envs": num_envs,
        "vec_env": "SB3VecEnv over StockTradingVecEnv",
        "steps": spent["steps"],
        "seconds": spent["seconds"],
        "samples_per_s": spent["steps"] / max(spent["seconds"], 1e-9),
        "models": [
            {"file": c.details[c.chosen]["file"], "algo": c.chosen, "start": str(c.window.trade[0])} for c in choices
        ],
        "windows": [
            {**c.window.as_dict(), "scores": c.scores, "chosen": c.chosen, "learners": c.details} for c in choices
        ],
        "selection": {"score": None, "rule": "per window, the learner with the best validation Sharpe"},
    }
