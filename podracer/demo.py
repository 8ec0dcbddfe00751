"""The main job of `make demo`: the whole pipeline on one laptop, in minutes.

1. Build (or load from the cache) the data set, by default ``synthetic-edge-daily``
   (an embedded market with a planted edge whose oracle survives 5 bp of costs per
   side), and print its summary.
2. Run a small tournament of PPO, SAC and TD3 pods on a local dask cluster (2 worker
   processes) for a wall-clock budget, into the run directory (`tournament.run`).
3. Train an SB3 PPO baseline on the same data, rules and periods for the wall-clock
   the tournament took (`trader.baselines`; one process, where the tournament had two).
4. Backtest everything in the run directory on the held-out test period: the
   tournament's best pod and its ensemble (when at least two pods cleared the
   membership bar, `tournament.selection`), the SB3 baseline, the benchmark,
   equal-weight and (on planted-edge data) the oracle (`trader.backtesting.runs`), with
   each strategy's costs broken down and its breakeven cost (backtests at several
   multiples of the cost model in the same pass); print the tables and the command
   that opens the dashboard on the run.

Every stage trains and scores through the library's own entry points, with the
rules and configs of `podracer.presets`; the run directory is an ordinary tournament
run directory (docs/contracts.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from market_envs.data import load
from trader import rundir
from trader.names import DEMO_COST, DEMO_POD_STEPS, DEMO_RECIPE, counted
from podracer.presets import apply_preset

POD_ENVS = 64
SB3_ENVS = 8
"""SB3 PPO steps 8 sub-environments, as SB3 users run it with ``make_vec_env``."""


@dataclass(frozen=True)
class DemoResult:
    """What the demo produced: the data summary, the tournament, the baseline and the backtest."""

    summary: dict
    tournament: Any = field(repr=False)
    """The `tournament.TournamentResult`."""
    baselines: Any = field(repr=False)
    """The `trader.libraries.BaselinesResult` (None when ``baseline_seconds`` is 0)."""
    backtest: Any = field(repr=False)
    """The `BacktestResult` of the test period: every strategy of the run directory."""


def run_demo(
    recipe: str = DEMO_RECIPE,
    run_dir: str | os.PathLike[str] = "runs/demo",
    *,
    tournament_seconds: float = 180.0,
    pods: int | None = None,
    baseline_seconds: float | None = None,
    workers: int = 2,
    algos: tuple[str, ...] = ("ppo", "sac", "td3"),
    pod_steps: int = DEMO_POD_STEPS,
    num_envs: int = POD_ENVS,
    group_size: int = 1,
    cost: float = DEMO_COST,
    seed: int = 0,
    device: str = "cpu",
    tear_sheet: bool = True,
    client: Any = None,
    log=print,
    on_progress=None,
    data_bar=None,
) -> DemoResult:
    """Data, a tournament, an SB3 baseline and the test-period backtest, into `run_dir`.

    :param recipe: the data set recipe (name or path).
    :param run_dir: the run directory; must not hold a run yet.
    :param tournament_seconds: the tournament's wall-clock budget.
    :param pods: also stop the tournament after this many pods (None: time only).
    :param baseline_seconds: SB3 PPO's wall-clock budget (default: the wall-clock the
        tournament took; 0 skips the baseline).
    :param workers: local dask worker processes (one thread each).
    :param algos: the algorithms of the tournament's pool.
    :param pod_steps: transitions per pod.
    :param num_envs: sub-environments per pod.
    :param group_size: PPO pods trained as one group (`TournamentConfig.group_size`).
    :param cost: costs per side, in training and in the backtest.
    :param seed: the tournament's and the baseline's seed.
    :param device: "cpu" or "cuda".
    :param tear_sheet: draw a tear sheet per agent in the backtest.
    :param client: a dask `Client` to run the tournament on (default: a new
        `LocalCluster` of ``workers`` processes, closed at the end).
    :param log: where progress lines go.
    :param on_progress: called with the tournament's `Progress` after every change.
    :param data_bar: a `market_envs.data.chunks.DownloadBar` shown while a vendor
        (alpaca, polygon) downloads the data set.
    """
    from tournament import TournamentConfig, run
    from trader.spec import market_spec
    from trader.backtesting.runs import backtest_config, backtest_run, read_run
    from trader.libraries import baselines

    run_dir = Path(run_dir)
    rundir.check_new_run(run_dir, remedy="give another run directory (the demo never overwrites a run)")
    data = load(recipe, progress=log, bar=data_bar)
    summary = data.summary()
    log("data set: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()))
    rules, algo_configs = apply_preset("market", recipe, cost, algos, steps=pod_steps, num_envs=num_envs)
    config = TournamentConfig(
        run_dir=str(run_dir),
        env=market_spec(recipe, rules),
        algos=tuple(algos),
        algo_configs=algo_configs,
        population=4,
        pod_steps=pod_steps,
        num_envs=num_envs,
        pods=pods,
        time_budget=tournament_seconds,
        workers=workers,
        group_size=group_size,
        seed=seed,
        ensemble_k=3,
        device=device,
        backtest=False,
    )
    log(
        f"tournament: {', '.join(algos)} pods of {pod_steps:,} transitions on {counted(workers, 'local worker')}, "
        f"group size {group_size}, for {tournament_seconds:.0f} s ..."
    )
    outcome = run(config, client=client, on_progress=on_progress)
    log(_tournament_line(outcome))
    if outcome.selection is not None:
        log(f"tournament {outcome.selection.sentence()}")
    trained = None
    seconds = outcome.seconds if baseline_seconds is None else baseline_seconds
    if seconds > 0:
        log(f"baseline: SB3 PPO for {seconds:.0f} s on the same data, rules and periods ...")
        trained = baselines(
            run_dir,
            ["sb3"],
            ["ppo"],
            time_budget=seconds,
            seeds=[seed],
            num_envs=SB3_ENVS,
            eval_every=10_000,
            device=device,
            backtest=False,
        )  # no line per validation pass (45 of them in 3 minutes): the one below says how it went
        done = trained.outcomes[0]
        what = f"{done.steps:,} steps in {done.seconds:.0f} s" if done.error is None else done.error
        log(f"baseline: SB3 PPO {done.status}: {what}")
    log("backtesting every strategy on the test period ...")
    contents = read_run(run_dir)
    config = backtest_config(contents, tear_sheet=tear_sheet, breakeven=True)  # the cost breakdown and breakeven
    result = backtest_run(run_dir, config=config, device=device)
    return DemoResult(summary=summary, tournament=outcome, baselines=trained, backtest=result)


def _tournament_line(outcome: Any) -> str:
    """One line: pods by status, the stop, the best pod."""
    counts = outcome.pods["status"].value_counts()
    line = f"tournament: stopped ({outcome.stop_reason}) after {outcome.seconds:.0f} s, " + ", ".join(
        f"{n} {status}" for status, n in counts.items()
    )
    best = outcome.leaderboard.best()
    if best is not None:
        line += (
            f"; best validation score {best.score:.2f} ({best.algo} pod {best.pod_id}, generation {best.generation})"
        )
    return line
