"""The orchestrator: `run(config)` keeps the cluster busy with pods until a stop.

Loop: keep ``in_flight_per_thread`` x ``group_size`` pods submitted per worker thread connected
*now* (the cluster is re-read every pass, so workers that join get pods and workers that
leave are not waited for); wait with `distributed.wait` for the first task to finish
(or for a few seconds, to notice new workers); record its pods; breed the next pods from
the leaderboard (`tournament.generator`) once there is room for ``group_size`` of them, and pack
them into tasks (`tournament.generator.groups`: with ``group_size`` P > 1, the PPO pods drawn
together that can share a program train as groups of up to P, one task each, so every thread
still has a task; every other pod is a task alone). Stop at the pod budget, the time budget or
the target score, whichever comes first. At the pod budget the pods in flight finish;
at the time budget they stop training too (each spec carries the budget as its
`PodSpec.deadline`), are validated and ranked, so their work is not lost and the
tournament overruns its budget by one training iteration and one validation pass, as
`trader.train`'s ``time_budget`` does; at the target score they are cancelled.

State and files (all in the run directory, see docs/contracts.md):

- ``events.jsonl`` is the log (`tournament.events`): a pod's spec is logged when it is
  submitted, its result when it ends. It is written first, so it is the truth.
- ``leaderboard.json`` and ``pods.parquet`` are rewritten atomically from the state
  after every change.
- ``--resume`` replays the log: pods with a result are not run again, pods that were
  in flight are submitted again with their logged spec. A kill between two writes
  can therefore neither lose a finished pod nor enter one twice. A resume keeps the
  tournament's settings and takes anew only its stops and its cluster
  (`tournament.config.RESUME_KEYS`, `resume_config`).

An interrupt (``KeyboardInterrupt``: Ctrl-C's SIGINT, or SIGTERM where the caller turns it
into one, as `trader tournament` does) at any stage, the pods, the selection of the result
or the final backtest, ends `run` with `Interrupted`, which says where it stopped; the log
records it (``stopped``, reason ``interrupted``) and a resume continues from there.

A pod whose worker dies is run again by dask; its result is recorded once, when its
future resolves. After dask's ``allowed-failures`` the pod is recorded as failed.
Dask runs a task at least once, not exactly once: two runs of one pod commit its
folder once (`tournament.pod.train_pod`, the first to finish wins, the other returns
the winner's result) and `TournamentState.ended` records a pod's first result only.
When the loop stops, the staged folders of pods whose worker was killed are removed.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from tournament import cluster
from tournament.config import CLUSTER_KEYS, RESUME_KEYS, STOP_KEYS, TournamentConfig
from tournament.events import EventLog
from tournament.generator import PodGenerator, groups, pod_group_key
from tournament.leaderboard import Entry, Leaderboard, lineage
from tournament.pod import PodResult, PodSpec, pod_dir, spec_json, train_pod, train_pod_group
from trader import rundir
from trader.errors import ConfigError, UserError

CONFIG_FILE = rundir.TOURNAMENT
LEADERBOARD_FILE = rundir.LEADERBOARD
PODS_FILE = rundir.PODS
EVENTS_FILE = rundir.EVENTS
RECHECK_SECONDS = 5.0
"""Longest wait for a pod before the cluster's workers are counted again."""


@dataclass
class Progress:
    """What the live display shows, passed to ``on_progress`` after every change."""

    done: int
    failed: int
    in_flight: int
    workers: int
    best_score: float | None
    best_algo: str | None
    elapsed: float
    """Seconds since this session started (a resumed run's clock starts again at its resume)."""
    done_here: int
    """Pods finished in this session; ``done`` also counts those a resumed run had finished before."""
    resumed: bool
    """This session resumed a tournament."""

    @property
    def pods_per_hour(self) -> float:
        """Pods finished in this session per hour of this session (a resumed run's earlier pods
        are not divided by its new clock)."""
        return 3600.0 * self.done_here / self.elapsed if self.elapsed > 0 else 0.0


STAGES = {"pods": "training pods", "ensemble": "the selection of the result", "backtest": "the final backtest"}
"""A tournament's stages, in order, as `Interrupted` names them."""


class Interrupted(KeyboardInterrupt):
    """A tournament stopped by an interrupt, and where: its stage (a key of `STAGES`) and its pods.

    Nothing it finished is lost: the log holds every pod that ended, a pod in flight runs again
    on resume (`run` with ``resume=True``), and a stage after the pods is run again whole."""

    def __init__(self, run_dir: Path, stage: str, done: int, failed: int, in_flight: int) -> None:
        self.run_dir, self.stage, self.done, self.failed, self.in_flight = run_dir, stage, done, failed, in_flight
        super().__init__(f"tournament in {run_dir} interrupted {self.where()}")

    def where(self) -> str:
        """Where it stopped, in words: the stage and the pods."""
        pods = f"{self.done} pod{'s' if self.done != 1 else ''} finished, {self.failed} failed"
        if self.stage == "pods":
            return f"while training pods ({pods}, {self.in_flight} in flight, run again on resume)"
        return f"during {STAGES[self.stage]} ({pods}; none left to train)"


@dataclass
class TournamentResult:
    """What `run` returns."""

    run_dir: Path
    leaderboard: Leaderboard
    pods: pd.DataFrame = field(repr=False)
    stop_reason: str
    seconds: float
    """Wall-clock of the tournament itself, from the first submission to the stop
    (the final backtest excluded)."""
    backtest: Any = None
    """The `BacktestResult` of the best pod, the ensemble and the baselines (market envs)."""
    selection: Any = None
    """The `tournament.selection.Selection`: the ensemble's members and the result (market envs)."""


class TournamentState:
    """Specs, results and the leaderboard of one run directory, and their files."""

    def __init__(self, config: TournamentConfig) -> None:
        self.config = config
        self.root = Path(config.run_dir)
        self.log = EventLog(self.root / EVENTS_FILE)
        self.board = Leaderboard(config.population)
        self.specs: dict[str, PodSpec] = {}
        self.results: dict[str, PodResult] = {}
        self.cancelled: set[str] = set()

    # -- what is where
    @property
    def next_index(self) -> int:
        return 1 + max((spec.index for spec in self.specs.values()), default=-1)

    def in_flight(self) -> list[PodSpec]:
        """Pods submitted without a result yet, oldest first."""
        return [s for s in self.specs.values() if s.pod_id not in self.results]

    def counts(self) -> tuple[int, int]:
        """(finished, failed) pods."""
        failed = sum(r.status == "failed" for r in self.results.values())
        return len(self.results) - failed, failed

    # -- changes (log first, then the snapshots)
    def submitted(self, spec: PodSpec) -> None:
        parent = self.board.get(spec.parent_id) if spec.parent_id else None
        self.log.append(
            "submitted",
            pod_id=spec.pod_id,
            spec=spec.to_dict(),
            parent_id=spec.parent_id,
            parent_hyperparameters=parent.hyperparameters if parent else None,
        )
        self.specs[spec.pod_id] = spec
        self.cancelled.discard(spec.pod_id)
        self.write_pods()

    def ended(self, result: PodResult) -> bool:
        """Record a pod's result; False (and nothing recorded) when the pod has one
        already: a pod that ran twice is recorded once."""
        if result.pod_id in self.results:
            return False
        self.log.append(result.status, pod_id=result.pod_id, result=result.to_dict())
        self._apply(result, log=True)
        self.write_snapshots()
        return True

    def _apply(self, result: PodResult, log: bool) -> None:
        self.results[result.pod_id] = result
        if result.status != "finished":
            return
        spec = self.specs[result.pod_id]
        entry = Entry(
            pod_id=spec.pod_id,
            index=spec.index,
            algo=spec.algo,
            score=float(result.score),
            generation=spec.generation,
            parent_id=spec.parent_id,
            hyperparameters=spec.algo_config,
            checkpoint=str(result.checkpoint),
            score_history=result.score_history,
            steps=result.steps,
            seconds=result.seconds,
            worker=result.worker,
        )
        entered, evicted = self.board.consider(entry)
        if not log:
            return
        if entered:
            rank = [e.pod_id for e in self.board.ranked()].index(entry.pod_id) + 1
            self.log.append("entered", pod_id=entry.pod_id, score=entry.score, rank=rank)
        for gone in evicted:
            self.log.append("evicted", pod_id=gone.pod_id, score=gone.score)

    def cancel(self, spec: PodSpec) -> None:
        self.log.append("cancelled", pod_id=spec.pod_id)
        self.cancelled.add(spec.pod_id)

    # -- files
    def write_snapshots(self) -> None:
        self.board.save(self.root / LEADERBOARD_FILE)
        self.write_pods()

    def write_pods(self) -> None:
        rundir.write_parquet(self.root / PODS_FILE, pods_frame(self.specs, self.results, self.cancelled))

    @classmethod
    def replay(cls, config: TournamentConfig) -> TournamentState:
        """The state a run directory's ``events.jsonl`` describes."""
        state = cls(config)
        for event in state.log.read():
            kind = event["kind"]
            if kind == "submitted":
                state.specs[event["pod_id"]] = PodSpec.from_dict(event["spec"])
                state.cancelled.discard(event["pod_id"])
            elif kind in ("finished", "failed") and event["pod_id"] not in state.results:
                state._apply(PodResult.from_dict(event["result"]), log=False)
            elif kind == "cancelled":
                state.cancelled.add(event["pod_id"])
        return state

    def referenced_pods(self) -> set[str]:
        """Pods whose weights must stay: board entries, pods in flight, and their ancestors."""
        parents = {pid: spec.parent_id for pid, spec in self.specs.items()}
        roots = [e.pod_id for e in self.board.ranked()] + [s.pod_id for s in self.in_flight()]
        return {pid for root in roots for pid in lineage(root, parents)}

    def prune_checkpoints(self) -> None:
        """Delete the weights of finished pods no longer referenced (see `keep_checkpoints`)."""
        keep = self.referenced_pods()
        for pid, result in self.results.items():
            if pid in keep or result.status != "finished":
                continue
            for weights in (pod_dir(self.root, pid) / "checkpoints").glob("*.safetensors"):
                weights.unlink()


def pods_frame(specs: dict[str, PodSpec], results: dict[str, PodResult], cancelled: set[str]) -> pd.DataFrame:
    """pods.parquet: one row per pod (see docs/contracts.md)."""
    rows = []
    for pid, spec in specs.items():
        result = results.get(pid)
        status = result.status if result else ("cancelled" if pid in cancelled else "in_flight")
        score = result.score if result and result.score is not None else math.nan
        rows.append(
            {
                "pod_id": pid,
                "index": spec.index,
                "generation": spec.generation,
                "parent_id": spec.parent_id,
                "algo": spec.algo,
                "hyperparameters": json.dumps(spec.algo_config, sort_keys=True),
                "worker": result.worker if result else "",
                "device": spec.device,
                "start": result.start if result else math.nan,
                "end": result.end if result else math.nan,
                "steps": result.steps if result else 0,
                "seconds": result.seconds if result else math.nan,
                "score": score,
                "status": status,
                "error": result.error if result else None,
                "spec": spec_json(spec),
            }
        )
    columns = [
        "pod_id",
        "index",
        "generation",
        "parent_id",
        "algo",
        "hyperparameters",
        "worker",
        "device",
        "start",
        "end",
        "steps",
        "seconds",
        "score",
        "status",
        "error",
        "spec",
    ]
    return pd.DataFrame(rows, columns=columns)


# --------------------------------------------------------------------------- the loop


def run(
    config: TournamentConfig,
    *,
    resume: bool = False,
    client: Any = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> TournamentResult:
    """Run (or resume) a tournament; see the module docstring.

    :param config: the tournament; on ``resume`` the run directory's own
        ``tournament.toml`` is used and only the stops (``pods``, ``time_budget``,
        ``target_score``) and the cluster keys of ``config`` apply.
    :param resume: continue the tournament in ``config.run_dir``.
    :param client: a dask `Client` to use (and not close); None starts one from
        ``config`` (`tournament.cluster.connect`) and closes it at the end.
    :param on_progress: called with a `Progress` after every change.
    :raises Interrupted: on ``KeyboardInterrupt``, at any stage (see the module docstring).
    """
    config = resolve_config(config, resume)
    state = TournamentState.replay(config) if resume else TournamentState(config)
    stage = "pods"
    try:
        _prepare_data(config)
        reason, seconds = _session(config, state, client, resume, on_progress)
        rundir.remove_staged(state.root / rundir.PODS_DIR)
        gather_trials(state)
        market = config.market is not None
        stage = "ensemble"
        chosen = select_result(config, state) if market else None
        stage = "backtest"
        backtest = _final_backtest(config, state) if config.backtest and market else None
    except Interrupted:
        raise
    except KeyboardInterrupt:
        done, failed = state.counts()
        raise Interrupted(state.root, stage, done, failed, len(state.in_flight())) from None
    return TournamentResult(
        Path(config.run_dir),
        state.board,
        pods_frame(state.specs, state.results, state.cancelled),
        reason,
        seconds,
        backtest,
        chosen,
    )


def _session(
    config: TournamentConfig,
    state: TournamentState,
    client: Any,
    resume: bool,
    on_progress: Callable[[Progress], None] | None,
) -> tuple[str, float]:
    """The pods of this session on ``client`` (None: a cluster of ``config``'s own, closed at
    the end); (why it stopped, its seconds). An interrupt is logged, then raised."""
    own_client = client is None
    client = cluster.connect_for(config) if own_client else client
    start = time.monotonic()
    try:
        _write_config(config)
        state.log.append("started", resume=resume)
        state.write_snapshots()
        try:
            reason = _loop(config, state, PodGenerator(config), client, start, on_progress, resume)
        except KeyboardInterrupt:
            state.log.append("stopped", reason="interrupted")
            raise
        seconds = time.monotonic() - start
        state.log.append("stopped", reason=reason)
    finally:
        if own_client:
            cluster.close(client)
    return reason, seconds


def _loop(
    config: TournamentConfig,
    state: TournamentState,
    generator: PodGenerator,
    client: Any,
    start: float,
    on_progress: Callable[[Progress], None] | None,
    resume: bool = False,
) -> str:
    from distributed import wait

    pending: dict[Any, list[PodSpec]] = {}
    done_before = state.counts()[0]
    root = str(Path(config.run_dir).resolve())

    def logged(spec: PodSpec) -> PodSpec:
        spec = _with_deadline(spec, config, start)
        state.submitted(spec)
        return spec

    def submit(specs: list[PodSpec]) -> None:
        """The specs (logged) as tasks: a pod alone is `train_pod`, a group `train_pod_group` (in a
        grouped tournament a groupable pod left without peers too: a group of one)."""
        for task in groups(specs, config.group_size):
            if len(task) == 1 and (config.group_size == 1 or pod_group_key(task[0]) is None):
                key, function, argument = f"pod-{task[0].pod_id}-{id(state)}", train_pod, task[0]
            else:
                key, function, argument = f"group-{task[0].pod_id}-{task[-1].pod_id}-{id(state)}", train_pod_group, task
            pending[client.submit(function, argument, root, key=key, pure=False)] = task

    def pods_in_flight() -> int:
        return sum(len(task) for task in pending.values())

    submit([logged(spec) for spec in state.in_flight()])  # a resumed run's pods that were in flight or cancelled
    while True:
        reason = _stop_reason(config, state, start)
        threads = cluster.worker_threads(client)
        free = max(threads, 1) * config.in_flight_per_thread * config.group_size - pods_in_flight()
        if reason is None and free >= config.group_size:  # a group's worth of room: pods drawn together group
            drawn: list[PodSpec] = []
            while len(drawn) < free and _may_submit(config, state):
                drawn.append(logged(generator.next_spec(state.next_index, state.board)))
            submit(drawn)
        _report(on_progress, state, pods_in_flight(), threads, start, done_before, resume)
        if reason == "target_score" or not pending:  # at the other stops the pods in flight end by themselves
            for future, task in pending.items():
                future.cancel()
                for spec in task:
                    state.cancel(spec)
            if pending:
                state.write_pods()
            return reason or "pods"
        try:
            done, _ = wait(list(pending), timeout=_wait_seconds(config, start), return_when="FIRST_COMPLETED")
        except TimeoutError:  # nothing finished: count the workers again, check the clock
            continue
        for future in done:
            task = pending.pop(future)
            for spec, result in zip(task, _results_of(future, task), strict=True):
                record(state, spec, result)
        if done and not config.keep_checkpoints:
            state.prune_checkpoints()


def record(state: TournamentState, spec: PodSpec, result: PodResult) -> None:
    """Enter a pod's result; a pod that started past its deadline is cancelled instead
    (it trained nothing, and a resumed run submits it again)."""
    if result.status == "cancelled":
        state.cancel(spec)
        state.write_pods()
    else:
        state.ended(result)


def _with_deadline(spec: PodSpec, config: TournamentConfig, start: float) -> PodSpec:
    """The spec with the time budget's end as its Unix-time deadline (None without a budget)."""
    if config.time_budget is None:
        return spec
    left = config.time_budget - (time.monotonic() - start)
    return replace(spec, deadline=time.time() + left)


def _may_submit(config: TournamentConfig, state: TournamentState) -> bool:
    return config.pods is None or len(state.specs) - len(state.cancelled) < config.pods


def _stop_reason(config: TournamentConfig, state: TournamentState, start: float) -> str | None:
    best = state.board.best()
    if config.target_score is not None and best is not None and best.score >= config.target_score:
        return "target_score"
    if config.time_budget is not None and time.monotonic() - start >= config.time_budget:
        return "time_budget"
    if config.pods is not None and len(state.results) >= config.pods:
        return "pods"
    return None


def _wait_seconds(config: TournamentConfig, start: float) -> float:
    """Until the next pod ends, the next worker count or the time budget, whichever is first."""
    left = math.inf if config.time_budget is None else config.time_budget - (time.monotonic() - start)
    return min(RECHECK_SECONDS, left) if left > 0 else RECHECK_SECONDS


def _results_of(future: Any, task: list[PodSpec]) -> list[PodResult]:
    """The results of a task's pods (one for `train_pod`, one per pod for `train_pod_group`); a
    task that dask gave up on (its workers died) or that raised is a failed result for each pod."""
    from distributed import KilledWorker

    try:
        outcome = future.result()
        return outcome if isinstance(outcome, list) else [outcome]
    except KilledWorker as err:
        message = f"its worker died on every try ({err})"
    except Exception as err:  # noqa: BLE001 - any task error is a failed pod
        message = f"{type(err).__name__}: {err}".splitlines()[0]
    now = time.time()
    return [PodResult(spec.pod_id, "failed", start=now, end=now, device=spec.device, error=message) for spec in task]


def _report(
    on_progress: Callable[[Progress], None] | None,
    state: TournamentState,
    in_flight: int,
    workers: int,
    start: float,
    done_before: int,
    resumed: bool,
) -> None:
    if on_progress is None:
        return
    done, failed = state.counts()
    best = state.board.best()
    on_progress(
        Progress(
            done,
            failed,
            in_flight,
            workers,
            best.score if best else None,
            best.algo if best else None,
            time.monotonic() - start,
            done - done_before,
            resumed,
        )
    )


# --------------------------------------------------------------------------- set-up


def resolve_config(config: TournamentConfig, resume: bool) -> TournamentConfig:
    """The config a run uses: ``config`` for a new run directory, the saved one (with
    ``config``'s stops and cluster) for ``resume``; a clear error when the directory
    does not fit (a tournament already there, or none to resume)."""
    return _resume_config(config) if resume else _check_fresh(config)


def _check_fresh(config: TournamentConfig) -> TournamentConfig:
    """A new tournament starts in a new or empty folder (`trader.rundir.check_new_run`)."""
    root = Path(config.run_dir)
    held = (root / EVENTS_FILE).exists() or (root / CONFIG_FILE).exists()
    remedy = "pass --resume to continue it, or another run directory" if held else "give another run directory"
    rundir.check_new_run(root, remedy=remedy, what="a tournament" if held else "a run")
    return config


def _resume_config(config: TournamentConfig) -> TournamentConfig:
    """The run directory's own config, with all of ``config``'s stops and cluster
    (`tournament.config.RESUME_KEYS`)."""
    return resume_config(config.run_dir, {k: getattr(config, k) for k in RESUME_KEYS})


def saved_settings(run_dir: str | Path) -> dict[str, Any]:
    """The tournament.toml of the tournament in ``run_dir``, as saved; one line when the folder
    holds no tournament (no tournament.toml and events.jsonl)."""
    root = Path(run_dir)
    if not (root / CONFIG_FILE).is_file() or not (root / EVENTS_FILE).is_file():
        raise UserError(f"--resume: {root} holds no tournament (no {CONFIG_FILE} and {EVENTS_FILE})")
    return rundir.read_toml(root / CONFIG_FILE)


def resume_config(run_dir: str | Path, given: dict[str, Any] | None = None) -> TournamentConfig:
    """The config that resumes the tournament in ``run_dir``: its saved tournament.toml, with
    the stops and the cluster (`tournament.config.RESUME_KEYS`) that ``given`` names.

    Each of the two comes whole from ``given`` when it names any of its keys (a stop given
    alone is the only stop; a cluster given replaces the saved one, its other keys at their
    defaults), else as saved: a resume runs to the stops and on the cluster the run had
    (``trader tournament RUN_DIR --resume`` with no option: its worker count too). The keys are
    merged before the config is checked, so a saved cluster that today's rules refuse, such
    as plain TCP off loopback, is replaced, not checked."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(RESUME_KEYS))
    if unknown:
        raise ConfigError(f"a resume keeps {', '.join(unknown)}: it takes only {', '.join(RESUME_KEYS)}")
    root = Path(run_dir)
    saved = saved_settings(root)
    values = {**saved, "run_dir": str(root), **{k: saved.get(k) for k in STOP_KEYS}}  # TOML drops a stop of None
    defaults = TournamentConfig()
    if any(k in given for k in STOP_KEYS):
        values.update({k: given.get(k) for k in STOP_KEYS})
    if any(k in given for k in CLUSTER_KEYS):
        values.update({k: given.get(k, getattr(defaults, k)) for k in CLUSTER_KEYS})
    return TournamentConfig.from_dict(values)


def _write_config(config: TournamentConfig) -> None:
    rundir.write_toml(Path(config.run_dir) / CONFIG_FILE, config.to_dict())


def _prepare_data(config: TournamentConfig) -> None:
    """Build (or find) the market's data set once before any pod needs it (the pods get it by
    the name its `MarketSpec` holds: a recipe file by its absolute path)."""
    if config.market is not None:
        from market_envs.data import load

        load(config.market.dataset)  # builds and caches the panel, so two workers never build it at once


def gather_trials(state: TournamentState) -> int:
    """The tournament's ``trials.parquet``: every finished pod's validation passes
    (its own ``trials.parquet``), with a ``pod_id`` column, in pod order; returns the
    trial count. Every pass is a trial: a pod keeps its best snapshot and the
    tournament then keeps its best pod, so both choices inflate the winner's score."""
    keys, daily = [], []
    for pod_id, result in sorted(state.results.items()):
        path = pod_dir(state.root, pod_id) / rundir.TRIALS
        if result.status != "finished" or not path.is_file():
            continue
        pod_keys, returns = rundir.read_trials(path)
        keys.append(pod_keys.assign(pod_id=pod_id)[list(rundir.TRIAL_KEYS)])
        daily.extend(row.dropna() for _, row in returns.iterrows())
    if not daily:
        return 0
    rundir.write_parquet(state.root / rundir.TRIALS, rundir.trials_frame(pd.concat(keys), daily))
    return len(daily)


def select_result(config: TournamentConfig, state: TournamentState) -> Any:
    """The tournament's result (`tournament.selection`): the ensemble of the pods that
    clear the bar, validated as one more trial (appended to ``trials.parquet``), and the
    best pod unless it beats the ensemble on validation by more than luck explains;
    written as ``selection.json``, with the result's standing among the finished pods on validation
    (`trader.backtesting.spread`). None when no pod finished."""
    from tournament import selection
    from trader.backtesting.spread import spread

    def validate(members: list[Any], weights: list[float]) -> tuple[float, Any]:
        return validate_ensemble(config, state.root, members, weights)

    found = selection.select(state.root, state.board.ranked(), config.ensemble_k, config.ensemble_weighting, validate)
    if found is None:
        return None
    chosen, daily = found
    if chosen.has_ensemble:
        _append_trial(state.root, chosen.ensemble_score, daily)
    score = chosen.ensemble_score if chosen.result == "ensemble" else chosen.best_score
    result = (chosen.result, chosen.candidates[0].pod_id, score)
    rundir.write_json(state.root / rundir.SELECTION, {**chosen.to_dict(), "spread": spread(state.root, result=result)})
    state.log.append(
        "selected",
        result=chosen.result,
        members=[m.pod_id for m in chosen.members],
        ensemble_score=chosen.to_dict()["ensemble_score"],
    )
    return chosen


def validate_ensemble(
    config: TournamentConfig, root: Path, members: list[Any], weights: list[float]
) -> tuple[float, Any]:
    """(score, daily returns) of the ensemble's pass over the validation period of the
    tournament's market (its windows), by the evaluator every pod was scored by, under the
    members' own env rules."""
    from trader.agents.ensemble import ensemble_rules, load_ensemble
    from trader.agents.evaluator import market_evaluator

    if config.market is None:
        raise ConfigError(f"an ensemble is validated on a market; {config.env!r} is a gymnasium env")
    paths = [root / member.checkpoint for member in members]
    data = config.market.data().period("validation")
    evaluator = market_evaluator(data, ensemble_rules(paths), config.pod_device)
    metrics = evaluator.evaluate(load_ensemble(paths, config.pod_device, weights))
    return float(metrics["score"]), evaluator.score_fn.daily


def _append_trial(root: Path, score: float, daily: Any) -> None:
    """The ensemble's validation pass as one more row of the tournament's ``trials.parquet``."""
    path = root / rundir.TRIALS
    row = rundir.trials_frame(pd.DataFrame({"pod_id": [rundir.ENSEMBLE_TRIAL], "step": [0], "score": [score]}), [daily])
    if path.is_file():
        frame = rundir.read_parquet(path)
        row = pd.concat([frame[frame["pod_id"] != rundir.ENSEMBLE_TRIAL], row], ignore_index=True)
    rundir.write_parquet(path, row)


def _final_backtest(config: TournamentConfig, state: TournamentState) -> Any:
    """Best pod and top-k ensemble on the test period, beside the baselines (built-in, and
    any baseline library's models already in RUN_DIR/baselines); report in RUN_DIR.

    The same reader and defaults as `trader backtest RUN_DIR` (`trader.backtesting.runs`), so
    both write the same rows: the cost breakdown and each strategy's breakeven cost included."""
    from trader.backtesting.runs import backtest_config, backtest_run, read_run

    if not state.board.top(config.ensemble_k):
        return None
    rules = backtest_config(read_run(config.run_dir), breakeven=True)
    return backtest_run(
        config.run_dir, dataset=config.market.dataset, config=rules, device=config.pod_device, overwrite=True
    )  # a resumed tournament's leaderboard has changed: its report with it


__all__ = [
    "Interrupted",
    "Progress",
    "TournamentResult",
    "TournamentState",
    "pods_frame",
    "resolve_config",
    "resume_config",
    "run",
    "validate_ensemble",
]
