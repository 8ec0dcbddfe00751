"""The training API: ``train(algo, env, config, run_dir, ...)`` for one pod.

One call builds the batched training env and a validation env, the agent (from the
registry in `trader.agents`), its runner (worker + learner) and an `Evaluator`, then
iterates until ``steps`` environment transitions are collected. Everything goes into
the run directory::

    run_dir/
      config.toml        the resolved configuration (algo config, env, seed, steps, ...)
      metrics.parquet    one row per runner iteration: step, wall_time, samples_per_s,
                         the runner's metrics and, on evaluation rows, val_* columns
      checkpoints/       best.{safetensors,json} (best validation score), written
                         whenever validation improves, and final.{safetensors,json}
      resume/            last.{safetensors,json}: where the run is, written at each
                         evaluation and when a signal stops it; removed at the end

The records (metrics.parquet, trials.parquet) are written at each evaluation too, so a run
that stops early keeps its best snapshot and its curves.

Interruption and resumption: inside `trader.stopping.stop_on_signals` a signal stops the loop
at the end of its iteration, saves ``resume/last`` and raises `Interrupted`;
``train(..., resume=True)`` (`resume`, ``trader train RUN --resume``) continues such a run
(`trader.resuming` says what is and is not restored).

What ``env`` may be: a market spec, a gymnasium id, a data set recipe, a `MarketData` panel or
an already built batched env (`trader.training_envs.build_envs`).

A run is a pure function of (algo config, env, seed): the agent, its sampling and the
env starts are all seeded from ``seed``.

Continuing from a checkpoint (``init_from``, how a tournament's child pod inherits its
parent): the new agent takes the checkpoint's weights, optimiser moments, observation
normaliser and counters, but keeps its own config's learning rates (a child's may
have been perturbed), and PPO moves the inherited log-std by its own ``init_log_std``
less the parent's (`Agent.adopt_parent`: a perturbed exploration noise); every other
setting (discount, reward scale, clip, epochs, ...) is read from the child's config. Its random stream continues from the checkpoint's when ``seed``
is the checkpoint's seed, and starts afresh from ``seed`` otherwise. The env is reset
as in any run, and an off-policy agent's replay buffer starts empty (it is not
checkpointed) but is filled by the inherited policy, not by random actions. So a run
of ``n`` steps continued for ``m`` more with the same seed equals one run of
``n + m`` steps exactly when that run's episodes also restart at step ``n`` (PPO, or
SAC/TD3 before learning starts; ``tests/test_train_cli.py`` checks it).
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

import trader
from market_envs.devices import resolve_device
from trader import rundir
from trader.agents import Agent, get_spec
from trader.agents.base import seeded
from trader.agents.checkpoint import (
    RNG_KEY,
    load_checkpoint,
    read_tensors,
    restore_agent,
    save_checkpoint,
    write_tensors,
)
from trader.agents.evaluator import Evaluator, GroupValidation
from trader.errors import CheckpointError, ConfigError, UserError
from trader.resuming import ResumePoint, check_same_run, rerun_arguments, restore_records
from trader.rundir import config_from_dict, config_to_dict
from trader.stopping import Interrupted, StopRequest, active_stop
from trader.training_envs import build_envs, check_dataset_periods, compile_choice

ProgressFn = Callable[[dict[str, float]], None]
"""Called after each iteration with that iteration's metrics row."""


@dataclass
class TrainResult:
    """What `train` returns."""

    run_dir: Path
    """The run directory."""
    agent: Agent
    """The agent as it is at the end of training."""
    steps: int
    """Environment transitions collected."""
    wall_time: float
    """Seconds spent."""
    best_score: float | None
    """Best validation score (None without an evaluator)."""
    metrics: pd.DataFrame = field(repr=False)
    """The rows written to metrics.parquet."""


def with_env_layout(config: Any, env: Any) -> Any:
    """`config` (an algorithm's) with its ``actions_per_stock`` set to the env's: 2 for a market env
    under ``EnvConfig.rate_action`` (an aim and a trade rate per stock), else 1. The per-stock
    network reads its action layout from it; an env that is not a market env has one action per
    dimension. A config without that field is returned as it is."""
    if not any(f.name == "actions_per_stock" for f in dataclasses.fields(config)):
        return config
    return dataclasses.replace(config, actions_per_stock=int(getattr(env, "actions_per_stock", 1)))


def train(
    algo: str,
    env: Any,
    config: Any = None,
    run_dir: str | os.PathLike[str] = "runs/train",
    *,
    steps: int = 100_000,
    seed: int = 0,
    device: torch.device | str = "cpu",
    num_envs: int = 8,
    eval_env: Any = None,
    eval_every: int = 10_000,
    eval_episodes: int = 5,
    env_config: Any = None,
    compile: bool | str = False,
    on_iteration: ProgressFn | None = None,
    init_from: str | os.PathLike[str] | None = None,
    time_budget: float | None = None,
    periods: dict[str, Any] | None = None,
    preset: str | None = None,
    dataset_periods: dict[str, Any] | None = None,
    overwrite: bool = False,
    on_start: Callable[[dict[str, Any]], None] | None = None,
    snapshot_every: float | None = None,
    resume: bool = False,
    stop: StopRequest | None = None,
) -> TrainResult:
    """Train one agent and write the run directory (see the module docstring).

    :param algo: "ppo", "sac" or "td3".
    :param env: a `trader.spec.MarketSpec` (a market run's data set, windows and rules, as
        its entry point built them), a gymnasium id, a data set recipe, a `MarketData` or a
        batched env.
    :param config: the algo config: an instance, a dict of overrides, or None (defaults).
    :param run_dir: where config, metrics and checkpoints go (created if missing).
    :param steps: environment transitions to collect (summed over sub-environments).
    :param seed: seeds the agent, its sampling and the envs.
    :param device: "cpu", "cuda", "cuda:1", ...
    :param num_envs: sub-environments of the training env (built envs keep their own).
    :param eval_env: validation env when ``env`` is a built env.
    :param eval_every: transitions between evaluations (0: only at the end).
    :param eval_episodes: gymnasium validation episodes (market: the whole period once).
    :param env_config: market envs: an `EnvConfig` or dict of overrides.
    :param compile: which parts go through ``torch.compile`` (`COMPILE_CHOICES`): False or
        "off", none; True or "all", the agent's forward passes and the market step of the
        training and of the validation env; "validation", the market validation pass only
        (training stays eager, so its results are bit for bit those of an eager run): the pass
        compiles once per process and is reused by every later run there (a tournament
        worker's pods), while compiled networks are new objects, compiled again in each run.
    :param on_iteration: progress callback, called with each metrics row.
    :param init_from: a checkpoint (path without suffix) of the same algorithm and env
        dims to continue from (see the module docstring).
    :param time_budget: stop after the first iteration that ends past this many
        seconds of training, even before ``steps`` (then validate once more).
    :param periods: market envs: explicit train / validation / test bounds that replace
        the data set's split dates (`MarketData.with_periods`; a walk-forward fold's
        windows); recorded in config.toml, so the backtest finds them again.
    :param preset: the preset (`podracer.presets.PRESETS`) the caller built ``config`` and
        ``env_config`` with, recorded in config.toml (the rules and config themselves are
        recorded whole, so a rerun needs no preset).
    :param dataset_periods: market envs: the data set's train / validation / test
        periods as config.toml records them (``[env.dataset_periods]``); a data set
        whose periods differ now is refused (a rerun of a run on a changed data set).
    :param overwrite: replace a run already in ``run_dir`` whole (every file the library
        wrote there is removed once the inputs are checked); without it such a
        ``run_dir`` is refused (`trader.rundir.check_new_run`).
    :param on_start: called once the inputs are checked and config.toml is written,
        before the first iteration, with config.toml's values (the CLI prints them).
    :param snapshot_every: also checkpoint the agent as it is whenever another this many
        seconds of training have passed, into ``snapshots/ms<milliseconds>`` (a learning
        curve against wall-clock: `podracer.experiment`'s Figure 7). None: no snapshots.
    :param resume: continue the interrupted run in ``run_dir`` from its ``resume/last``
        (`trader.resuming`: the training env is reset, and an off-policy replay
        buffer is restored only where a signal stopped the run; everything else continues). The other arguments must resolve
        to the config.toml the run recorded (`rerun_arguments` reads them from it); a key
        that differs is refused. ``init_from`` is not loaded again (the point holds it).
    :param stop: stop at the end of the iteration in which this is requested, save where
        the run is, raise `Interrupted`; None: in the main thread, the request of the
        `trader.stopping.stop_on_signals` block open now, if any (a run in another thread is stopped by
        whoever runs it).
    """
    for name, value, low in (
        ("steps", steps, 1),
        ("num_envs", num_envs, 1),
        ("eval_every", eval_every, 0),
        ("eval_episodes", eval_episodes, 1),
    ):
        if value < low:
            raise ConfigError(f"train: {name} must be >= {low}, got {value}")
    if snapshot_every is not None and not snapshot_every > 0:
        raise ConfigError(f"train: snapshot_every must be > 0 seconds, got {snapshot_every}")
    if time_budget is not None and not time_budget > 0:
        raise ConfigError(f"train: time_budget must be > 0 seconds, got {time_budget}")
    root = Path(run_dir)
    if resume:
        if overwrite:
            raise ConfigError("train: resume continues the run in run_dir, overwrite replaces it: give one")
        point: ResumePoint | None = ResumePoint.read(root)
    else:
        point = None
        rundir.check_new_run(
            root, remedy="pass overwrite=True to replace it, or another run directory", overwrite=overwrite
        )
    spec = get_spec(algo)
    algo_config = resolve_config(spec.config_cls, config)
    compile = compile_choice(compile)
    device = resolve_device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {device} requested but CUDA is not available")
    with seeded(seed):
        envs = build_envs(env, num_envs, device, seed, eval_env, eval_episodes, env_config, compile, periods)
    algo_config = with_env_layout(algo_config, envs.train)
    agent = spec.agent_cls(envs.train.obs_dim, envs.train.act_dim, algo_config, device, seed)
    if point is not None:
        continue_from(agent, root / rundir.RESUME_POINT, seed)
    elif init_from is not None:
        continue_from(agent, init_from, seed)
    if compile == "all":
        agent.compile()
    runner = spec.runner_cls(agent, envs.train)
    if point is not None and point.runner:
        runner.load_state_dict(read_tensors(root / rundir.RESUME_RUNNER, device))
    if dataset_periods is not None:
        check_dataset_periods(envs.description.get("dataset_periods"), dataset_periods, envs.description)
    resolved = {
        "library_version": trader.__version__,
        "algo": algo,
        "preset": preset,
        "seed": seed,
        "steps": steps,
        "device": str(device),
        "num_envs": int(envs.train.num_envs),
        "eval_every": eval_every,
        "compile": compile,
        "time_budget": time_budget,
        "init_from": None if init_from is None else str(init_from),
        "env": envs.description,
        "algo_config": config_to_dict(algo_config),
    }
    written = rundir.toml_ready(resolved)  # config.toml's values, as a reader of the file gets them
    if point is not None:
        check_same_run(root, written)
        rows = restore_records(root, point, agent, envs.evaluator)
    else:
        start_run(root, written, envs.dataset_card, overwrite)
        rows = []
    if on_start is not None:
        on_start(written)
    if stop is None and threading.current_thread() is threading.main_thread():  # a worker thread's run is its pool's
        stop = active_stop()
    pod = LoopPod(root, agent, envs.evaluator, rows)
    TrainingLoop(runner, [pod], envs.data_window, point, stop).run(
        steps, eval_every, on_iteration, time_budget, snapshot_every
    )
    return finish_run(pod, envs.data_window)


def start_run(root: Path, written: dict[str, Any], dataset_card: dict[str, Any] | None, overwrite: bool) -> None:
    """The start of a new run directory: cleared first (``overwrite``), its checkpoints folder,
    config.toml (``written``) and, for a market, dataset.json."""
    if overwrite:
        rundir.clear_run(root)
    rundir.make_folder(root / rundir.CHECKPOINTS)
    rundir.write_toml(root / rundir.CONFIG, written)
    if dataset_card is not None:
        rundir.write_json(root / rundir.DATASET, dataset_card)


def finish_run(pod: LoopPod, data_window: dict[str, Any]) -> TrainResult:
    """The end of a run directory: its metrics, final checkpoint and trials; no resume point."""
    frame = pd.DataFrame(pod.rows)
    rundir.write_parquet(pod.root / rundir.METRICS, frame)
    save_checkpoint(
        pod.agent,
        pod.root / rundir.CHECKPOINTS / "final",
        data_window=data_window,
        info={"step": int(frame["step"].iloc[-1])},
    )
    _write_trials(pod.root, pod.evaluator)
    shutil.rmtree(pod.root / rundir.RESUME_DIR, ignore_errors=True)  # finished: nothing to resume
    best = None
    if pod.evaluator is not None and pod.evaluator.best_state is not None:
        best = pod.evaluator.best_score  # its snapshot was saved when it was found
    steps, wall_time = int(frame["step"].iloc[-1]), float(frame["wall_time"].iloc[-1])
    return TrainResult(pod.root, pod.agent, steps, wall_time, best, frame)


@dataclass
class LoopPod:
    """One run directory a training loop writes: a lone run's, or one pod of a group's."""

    root: Path
    agent: Agent
    evaluator: Evaluator | None
    rows: list[dict[str, float]] = field(default_factory=list)
    """Its metrics rows (written to metrics.parquet)."""


class TrainingLoop:
    """The training loop of one run or one pod group: iterate the runner; evaluate every
    ``eval_every`` transitions and at the end; save each pod's best snapshot when its validation
    improves, and its records and (a lone run) its resume point at each evaluation; snapshot
    every ``snapshot_every`` seconds; stop at an iteration's end when ``stop`` is requested.

    A lone run's runner returns one metrics row an iteration; a group's runner (``agents``,
    ``write_agents``) one per pod, and its pods are validated by one pass (``validation``,
    `trader.agents.evaluator.GroupValidation`) after their rows are written into their agents."""

    def __init__(
        self,
        runner: Any,
        pods: list[LoopPod],
        data_window: dict[str, Any],
        point: ResumePoint | None,
        stop: StopRequest | None,
        validation: GroupValidation | None = None,
    ) -> None:
        self.runner, self.pods, self.data_window, self.stop = runner, pods, data_window, stop
        self.validation = validation
        self.group = hasattr(runner, "write_agents")
        self.done_steps = 0 if point is None else point.step
        self.last_eval = 0 if point is None else point.last_eval
        self.offset = 0.0 if point is None else point.wall_time
        """Seconds trained before this process (a resumed run's clock counts on)."""

    def run(
        self,
        steps: int,
        eval_every: int,
        on_iteration: ProgressFn | None,
        time_budget: float | None,
        snapshot_every: float | None,
    ) -> None:
        if self.stop is not None:
            self.stop.listening += 1
        try:
            self._iterate(steps, eval_every, on_iteration, time_budget, snapshot_every)
        finally:
            if self.stop is not None:
                self.stop.listening -= 1

    def _iterate(
        self,
        steps: int,
        eval_every: int,
        on_iteration: ProgressFn | None,
        time_budget: float | None,
        snapshot_every: float | None,
    ) -> None:
        runner, pods = self.runner, self.pods
        start = time.perf_counter() - self.offset
        deadline = math.inf if time_budget is None else start + time_budget
        next_snapshot = math.inf
        if snapshot_every is not None:
            had_rows = bool(pods[0].rows)
            next_snapshot = (
                snapshot_every * (math.floor(self.offset / snapshot_every) + 1) if had_rows else snapshot_every
            )
        while self.done_steps < steps and time.perf_counter() < deadline:
            tick = time.perf_counter()
            results = runner.iteration()
            elapsed = time.perf_counter() - tick
            results = results if isinstance(results, list) else [results]
            self.done_steps += int(results[0]["env_steps"])
            done_steps = self.done_steps
            now = time.perf_counter() - start
            rows = []
            for metrics in results:
                row = {"step": float(done_steps), "wall_time": now}
                row["samples_per_s"] = metrics["env_steps"] / max(elapsed, 1e-9)
                row.update(metrics)
                rows.append(row)
            due = eval_every > 0 and done_steps - self.last_eval >= eval_every
            last = done_steps >= steps or time.perf_counter() >= deadline
            improved = [False] * len(pods)
            if due or last:
                self.last_eval = done_steps
                improved = self._validate(done_steps, rows, start)
            for pod, row in zip(pods, rows, strict=True):
                pod.rows.append(row)
            if due or last:
                self.save(improved)
            if rows[0]["wall_time"] >= next_snapshot:  # one snapshot, named by the latest mark it passed
                mark = snapshot_every * math.floor(rows[0]["wall_time"] / snapshot_every)
                self._write_agents()
                for pod in pods:
                    save_checkpoint(
                        pod.agent,
                        pod.root / rundir.SNAPSHOTS / snapshot_name(mark),
                        data_window=self.data_window,
                        info={"step": done_steps, "seconds": rows[0]["wall_time"]},
                    )
                next_snapshot = mark + snapshot_every
            if on_iteration is not None:
                on_iteration(rows[0])
            if self.stop is not None and self.stop.requested and not last:  # a last iteration ends the run anyway
                self.save([False] * len(pods), with_runner=True)
                raise Interrupted(self.stop.signal or signal.SIGINT, done_steps, pods[0].root)

    def _write_agents(self) -> None:
        if self.group:
            self.runner.write_agents()

    def _validate(self, done_steps: int, rows: list[dict[str, float]], start: float) -> list[bool]:
        """Score every pod now (one pass for a group), record the scores in ``rows``; which improved."""
        pods = self.pods
        if pods[0].evaluator is None:
            return [False] * len(pods)
        self._write_agents()
        records = [None] * len(pods) if self.validation is None else self.validation.records([p.agent for p in pods])
        improved = []
        for pod, row, record in zip(pods, rows, records, strict=True):
            scores, better = pod.evaluator.consider(pod.agent, done_steps, record)
            row.update({f"val_{key}": value for key, value in scores.items()})
            improved.append(better)
        wall_time = time.perf_counter() - start
        for row in rows:
            row["wall_time"] = wall_time
        return improved

    def save(self, improved: list[bool], with_runner: bool = False) -> None:
        """Each pod's records and best snapshot (where ``improved``); a lone run's runner state
        (``with_runner``: where a signal stops the run) and resume point, in this order: the point's
        sidecar, written last, marks everything before it as written. A group's pods keep no
        resume point (a group does not resume yet: its pods' best snapshots and records stay)."""
        for pod, better in zip(self.pods, improved, strict=True):
            rundir.write_parquet(pod.root / rundir.METRICS, pd.DataFrame(pod.rows))
            _write_trials(pod.root, pod.evaluator)
            if better:
                pod.evaluator.save_best(pod.root / rundir.CHECKPOINTS / "best", data_window=self.data_window)
        if self.group:
            return
        root, agent = self.pods[0].root, self.pods[0].agent
        state = self.runner.state_dict() if with_runner else {}
        if state:
            write_tensors(root / rundir.RESUME_RUNNER, state)
        info = {"step": self.done_steps, "last_eval": self.last_eval, "wall_time": self.pods[0].rows[-1]["wall_time"]}
        info["runner"] = bool(state)
        save_checkpoint(agent, root / rundir.RESUME_POINT, data_window=self.data_window, info=info)
        if not state:  # a runner state of an older point is stale now
            (root / rundir.RESUME_RUNNER).unlink(missing_ok=True)


def snapshot_name(seconds: float) -> str:
    """A snapshot's checkpoint name: ``ms`` and the mark in whole milliseconds (sortable)."""
    return f"ms{round(1000 * seconds):010d}"


def snapshot_seconds(name: str) -> float:
    """The mark of a snapshot named by `snapshot_name`, in seconds."""
    return int(name.removeprefix("ms")) / 1000.0


def continue_from(agent: Agent, path: str | os.PathLike[str], seed: int) -> None:
    """Load checkpoint ``path`` into the freshly built ``agent`` (see the module docstring)."""
    state, meta = load_checkpoint(path, agent.device)
    if meta["algo"] != agent.algo:
        raise CheckpointError(f"init_from {path}: a {meta['algo']} checkpoint cannot start a {agent.algo} run")
    dims = (int(meta["obs_dim"]), int(meta["act_dim"]))
    if dims != (agent.obs_dim, agent.act_dim):
        raise CheckpointError(
            f"init_from {path}: checkpoint dims (obs, act) {dims} differ from the env's "
            f"{(agent.obs_dim, agent.act_dim)}"
        )
    rates = {name: [g["lr"] for g in opt.param_groups] for name, opt in agent.optimizers().items()}
    if int(meta.get("seed", -1)) != seed:
        state.pop(RNG_KEY, None)
    restore_agent(agent, state)
    for name, optimizer in agent.optimizers().items():
        for group, rate in zip(optimizer.param_groups, rates[name], strict=True):
            group["lr"] = rate
    agent.adopt_parent(meta["config"])


def resume(run_dir: str | os.PathLike[str], **options: Any) -> TrainResult:
    """Continue the interrupted run in ``run_dir`` under the config its config.toml records
    (`trader.resuming.rerun_arguments`; `trader.resuming` says what is and is not restored): the Python
    side of ``trader train RUN_DIR --resume``. ``options``: `train`'s callbacks and the like
    (``on_iteration``, ``on_start``, ``stop``); a key that changes the config is refused."""
    root = Path(run_dir)
    ResumePoint.read(root)  # one line when there is nothing to resume
    arguments = rerun_arguments(rundir.read_toml(root / rundir.CONFIG))
    arguments.update(options)
    return train(arguments.pop("algo"), arguments.pop("env"), run_dir=root, resume=True, **arguments)


def _write_trials(root: Path, evaluator: Evaluator | None) -> None:
    """``trials.parquet``: the daily validation returns of every pass that competed
    for the best snapshot (market runs; picking the best snapshot is a selection)."""
    if evaluator is None or not evaluator.trials:
        return
    steps, scores, daily = zip(*evaluator.trials, strict=True)
    keys = pd.DataFrame({"step": list(steps), "score": list(scores)})
    rundir.write_parquet(root / rundir.TRIALS, rundir.trials_frame(keys, list(daily)))


def resolve_config(config_cls: type, config: Any) -> Any:
    if config is None or isinstance(config, dict):
        return config_from_dict(config_cls, config or {})
    if not isinstance(config, config_cls):
        raise ConfigError(f"config must be a {config_cls.__name__} or a dict, got {type(config).__name__}")
    return config
