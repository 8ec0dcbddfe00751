"""`trader walkforward RUN_DIR --dataset NAME`: retrain per fold, trade the next window, stitch.

A thin layer over `podracer.walkforward.walk_forward`: the fold lengths, the learner and
its budget per fold (the flags of `trader train` for a single learner, those of
`trader tournament` for the tournament); one line per fold as it starts and ends; the
report at the end. Run it again on the same RUN_DIR with the same flags to resume. A signal
(SIGINT, SIGTERM) or a place that cannot be written stops it with one line: the fold it was
in, the folds it keeps, and that command (`stopped_line`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from podracer.cli.root import app
from podracer.cli.options import (
    AlgosOption,
    PresetOption,
    BaselineAlgosOption,
    BaselinesOption,
    CommissionOption,
    CompileOption,
    CostSetOption,
    CostsOption,
    DatasetOption,
    DeviceOption,
    EnsembleWeightingOption,
    GpusOption,
    InitialCashOption,
    InsecureOption,
    NoTradeBandOption,
    NumEnvsOption,
    SchedulerOption,
    SearchOption,
    SeedOption,
    TargetScoreOption,
    TlsCaOption,
    TlsCertOption,
    TlsKeyOption,
    TradeRateOption,
    WeightsMapOption,
    WorkersOption,
    PopulationOption,
    cluster_flags,
    cost_flags,
    tournament_keys,
    with_rule_flags,
)
from trader.names import name_list
from podracer.cli.interrupts import same_command, signal_name
from trader.errors import UnwritableError, UserError
from trader.names import PRESET_COST

WALK_PODS = 4
"""The tournament learner's pods per fold when no stop is given: a walk-forward trains one
tournament per fold (6 on synthetic-edge-daily at 3y/1y/1y), so the tournament's own 12 pods
of 50,000 transitions, 6 times over, were more than a first run should cost."""

WALK_POD_STEPS = 16_384
"""The tournament learner's transitions per pod when ``--pod-steps`` is not given (the
tournament's own 50,000 otherwise; ``--preset market`` scales its algo configs to it)."""


@app.command("walkforward")
def walkforward_command(
    context: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="Run directory (created; the same one with the same flags resumes).")],
    train: Annotated[str, typer.Option("--train", help="Training window per fold: 5y, 18m (months), 2w, 10d.")],
    validation: Annotated[str, typer.Option("--validation", help="Validation window per fold (the fold's selection).")],
    test: Annotated[str, typer.Option("--test", help="Test window per fold (traded once).")],
    dataset: DatasetOption = None,
    step: Annotated[
        str | None,
        typer.Option(
            "--step", help="How far each fold moves on (default: --test; the stitched record needs it equal)."
        ),
    ] = None,
    expanding: Annotated[
        bool, typer.Option("--expanding", help="Training windows all start at the first session.")
    ] = False,
    embargo: Annotated[
        int, typer.Option("--embargo", help="Bars purged between train | validation and validation | test.")
    ] = 0,
    learner: Annotated[str, typer.Option("--learner", help="tournament, ppo, sac or td3.")] = "tournament",
    seed: SeedOption = None,
    device: DeviceOption = None,
    steps: Annotated[
        int | None, typer.Option("--steps", help="ppo/sac/td3: transitions per fold (default 100,000).")
    ] = None,
    num_envs: NumEnvsOption = None,
    eval_every: Annotated[
        int | None,
        typer.Option(
            "--eval-every", help="ppo/sac/td3: transitions between validations (0: only at the end; default 10,000)."
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="ppo/sac/td3: TOML file of algo config keys (or a run's config.toml)."),
    ] = None,
    compile: CompileOption = None,
    algos: AlgosOption = None,
    population: PopulationOption = None,
    pod_steps: Annotated[
        int | None, typer.Option("--pod-steps", help="tournament: transitions per pod (default 16,384).")
    ] = None,
    pods: Annotated[
        int | None,
        typer.Option("--pods", help="tournament: pod budget per fold (default 4 unless another stop is given)."),
    ] = None,
    time_budget: Annotated[
        str | None, typer.Option("--time-budget", help="tournament: wall-clock budget per fold: 90s, 30m, 2h.")
    ] = None,
    target_score: TargetScoreOption = None,
    search: SearchOption = None,
    ensemble_weighting: EnsembleWeightingOption = None,
    workers: WorkersOption = None,
    gpus: GpusOption = None,
    scheduler: SchedulerOption = None,
    tls_ca: TlsCaOption = None,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    insecure: InsecureOption = False,
    baselines: BaselinesOption = None,
    baseline_algos: BaselineAlgosOption = None,
    baseline_steps: Annotated[
        int | None,
        typer.Option(
            "--baseline-steps",
            help="With --baselines: env steps of each baseline per fold (default: the learner's: --steps, or --pods x --pod-steps).",
        ),
    ] = None,
    warm_start: Annotated[
        bool,
        typer.Option(
            "--warm-start",
            help="Fold k+1 continues from fold k: a single learner from its best checkpoint, a tournament's pods from its leaderboard (default: a fresh start per fold).",
        ),
    ] = False,
    preset: PresetOption = None,
    commission: CommissionOption = None,
    costs: CostsOption = None,
    cost_set: CostSetOption = [],
    trade_rate: TradeRateOption = None,
    no_trade_band: NoTradeBandOption = None,
    weights_map: WeightsMapOption = None,
    initial_cash: InitialCashOption = None,
) -> None:
    """Walk a learner forward: per fold train, select on validation, test; stitch the test windows.

    --dataset is required (every fold is a window of a market). The learner's options are
    those of trader train (ppo, sac, td3) and trader tournament, less --env, --eval-episodes
    (gymnasium envs only) and --resume (the same command resumes)."""
    from trader.folds import FoldSpec
    from trader.spec import market_spec
    from podracer.walkforward import LEARNERS, walk_forward
    from trader.stopping import Interrupted, stop_on_signals

    if dataset is None:
        raise UserError("give --dataset RECIPE: a walk-forward's folds are windows of a market data set")
    if learner not in LEARNERS:
        raise UserError(f"--learner must be one of {', '.join(LEARNERS)}, got {learner!r}")
    folds = FoldSpec(train, validation, test, step, expanding, embargo)
    single = learner != "tournament"
    if not single and config is not None:
        raise UserError("--config sets a single learner's algo config; a tournament takes --algos and --preset")
    tournament_only = {
        "--algos": algos,
        "--population": population,
        "--pod-steps": pod_steps,
        "--pods": pods,
        "--time-budget": time_budget,
        "--target-score": target_score,
        "--search": search,
        "--ensemble-weighting": ensemble_weighting,
        "--workers": workers,
        "--gpus": gpus,
        "--scheduler": scheduler,
        "--tls-ca": tls_ca,
        "--tls-cert": tls_cert,
        "--tls-key": tls_key,
        "--insecure": insecure or None,
    }
    given = [option for option, value in tournament_only.items() if value is not None]
    if single and given:
        raise UserError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to --learner tournament")
    if not single and (steps is not None or eval_every is not None):
        raise UserError(
            "--steps and --eval-every apply to a single learner (ppo, sac, td3); a tournament's "
            "pods take --pod-steps and validate once, at their end"
        )
    if baselines is None and (baseline_algos is not None or baseline_steps is not None):
        raise UserError("--baseline-algos and --baseline-steps apply with --baselines LIBRARIES")
    if baseline_algos is not None and not {"sb3", "sb3-dummy"} & set(name_list(baselines, "--baselines")):
        raise UserError("--baseline-algos applies to the sb3 and sb3-dummy baselines (finrl has its own learners)")
    cost, named = cost_flags(commission, costs, cost_set)
    cluster = cluster_flags(workers, scheduler, gpus, device, (tls_ca, tls_cert, tls_key), insecure)
    steps, eval_every = 100_000 if steps is None else steps, 10_000 if eval_every is None else eval_every
    algo_config = _read_config(config) if config is not None else {}
    tournament: dict[str, Any] = {}
    if not single:  # each fold's TournamentConfig keys, the walk-forward's own pod budget and length by default
        tournament = tournament_keys(
            algos=algos,
            population=population,
            pod_steps=pod_steps,
            pods=pods,
            time_budget=time_budget,
            target_score=target_score,
            num_envs=num_envs,
            search=search,
            ensemble_weighting=ensemble_weighting,
            compile=compile,
            cluster=cluster,
        )
        tournament.setdefault("pods", WALK_PODS)
        tournament.setdefault("pod_steps", WALK_POD_STEPS)
    env_config: dict[str, Any] = {}
    if preset is not None:
        env_config, algo_config, tournament = _preset(
            preset, dataset, PRESET_COST if cost is None else cost, learner, algo_config, tournament, steps, num_envs
        )
    env_config = (
        with_rule_flags(
            env_config or None,
            trade_rate=trade_rate,
            no_trade_band=no_trade_band,
            weights_map=weights_map,
            initial_cash=initial_cash,
        )
        or {}
    )
    rules = market_spec(dataset, env_config, cost=cost, costs=named).rules  # --costs set on the rules as objects
    if learner == "ppo" and algo_config.get("anneal_lr") and algo_config.get("total_steps") is None:
        algo_config["total_steps"] = steps  # the schedule runs over one fold's --steps
    seed, device = seed or 0, device or "cpu"
    console = Console(stderr=True)
    header = [
        f"[bold]walk-forward[/bold] {learner} on {dataset}: train {train}, validation {validation}, "
        f"test {test}{', expanding' if expanding else ''}, embargo {embargo}; run directory {run_dir}"
    ]

    said: list[str] = []

    def say(line: str) -> None:  # the header with the first news: the folds fit and the folder is claimed
        while header:
            console.print(header.pop())
        console.print(line, markup=False, highlight=False)
        said.append(line)

    try:
        with stop_on_signals():
            result = walk_forward(
                run_dir,
                dataset,
                folds,
                learner,
                seed=seed,
                device=device,
                steps=steps,
                num_envs=num_envs or 8,
                eval_every=eval_every,
                algo_config=algo_config,
                env_config=rules,
                tournament=tournament,
                baselines=name_list(baselines, "--baselines"),
                baseline_algos=name_list(baseline_algos or "ppo", "--baseline-algos"),
                baseline_steps=baseline_steps,
                warm_start=warm_start,
                compile=bool(compile) and single,
                on_progress=say,
            )
    except Interrupted as stop:
        console.print(
            stopped_line(context, run_dir, f"interrupted ({signal_name(stop.signal)})", said),
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
        raise typer.Exit(stop.exit_code) from None
    except UnwritableError as err:
        raise UserError(stopped_line(context, run_dir, str(err), said)) from None
    from trader import rundir

    print((result.run_dir / rundir.WF_REPORT_MD).read_text(encoding="utf-8"))
    print(f"wrote {result.run_dir / rundir.WF_REPORT_MD}, {rundir.WF_REPORT_JSON}, {rundir.WF_STITCHED} and folds/")


def stopped_line(context: typer.Context, run_dir: Path, what: str, said: list[str]) -> str:
    """One line for a walk-forward that ``what`` stopped (a signal, a full disk): the fold it
    was in, the folds it keeps (each finished one: its ``fold.json``), and the command that
    resumes it (the same one: a fold that did not finish trains again from its start, so the
    resumed record is the uninterrupted one)."""
    from trader import rundir

    finished = sum(rundir.read_fold(run_dir, int(f.name)) is not None for f in rundir.fold_folders(run_dir))
    if said and said[-1].startswith("stitching"):
        where, kept = "while stitching", "every fold is finished and kept"
    else:
        where = f"in fold {finished + 1}"
        kept = {0: "no fold had finished", 1: "fold 1 is finished and kept"}.get(
            finished, f"folds 1-{finished} are finished and kept"
        ) + f", fold {finished + 1} trains again from its start"
    return f"{what} {where}; {kept}: resume with the same command: {same_command(context)}"


def _preset(
    name: str,
    dataset: str,
    cost: float,
    learner: str,
    algo_config: dict[str, Any],
    tournament: dict[str, Any],
    steps: int,
    num_envs: int | None,
) -> tuple[dict, dict, dict]:
    """The preset's env rules and algo configs, under the keys given."""
    from podracer.presets import apply_preset

    if learner != "tournament":
        env_config, configs = apply_preset(
            name, dataset, cost, [learner], steps=steps, num_envs=num_envs or 8, algo_configs={learner: algo_config}
        )
        return env_config, configs[learner], tournament
    from tournament import TournamentConfig

    defaults = TournamentConfig()
    algos = tournament.get("algos", defaults.algos)
    env_config, configs = apply_preset(
        name,
        dataset,
        cost,
        algos,
        steps=tournament.get("pod_steps", defaults.pod_steps),
        num_envs=tournament.get("num_envs", defaults.num_envs),
    )
    return env_config, algo_config, {**tournament, "algo_configs": configs}


def _read_config(path: Path) -> dict[str, Any]:
    from podracer.cli.train import read_algo_config

    return read_algo_config(path)
