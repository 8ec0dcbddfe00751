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

Interruption and resumption. Inside `stop_on_signals` (the CLI's train, walk-forward and
experiment commands), a first SIGINT or SIGTERM asks the loop to stop at the end of the
iteration it is in: the run saves ``resume/last`` there and raises `Interrupted` with
the step (a second signal ends at once: the run keeps what its last evaluation saved).
``train(..., resume=True)`` (`resume`, ``trader train RUN --resume``) continues such a run: it
builds the run from the same arguments (the CLI reads them from config.toml; any that
differ from the recorded ones are refused), takes the last point through the mechanism
of ``init_from`` below (weights, optimiser moments, normaliser, counters and the random
stream: the same seed), the best snapshot, the trials and the metrics rows up to that
step, the evaluation schedule and the wall clock, and trains on to ``steps``. What is not
restored: the training env's state (it is reset, as after ``init_from``: a PPO run resumed
where its episodes restart equals the uninterrupted run bit for bit on one worker, else
its episodes restart early). An off-policy agent's replay buffer is saved where a signal
stops the run (``resume/runner.safetensors``; not at evaluations: a full buffer is large)
and restored with it; a run resumed from an evaluation's point (one killed outright) starts
with an empty buffer, refilled by the restored policy before updates resume,
``learning_starts`` transitions later.

What ``env`` may be:

- a gymnasium id ("Pendulum-v1", "Ant-v5"): trains on `GymVecEnv` with ``num_envs``
  sub-environments; validation plays ``eval_episodes`` episodes (mean return);
- a data set recipe name or path, or a `MarketData` panel: trains on the panel's
  ``train`` period with `StockTradingVecEnv` and validates on its ``validation``
  period (compounded return and Sharpe of the portfolio value; score = Sharpe);
- an already built batched env (then pass ``eval_env`` for validation, or none).

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

import trader
from market_envs.costs import NamedCosts
from market_envs.devices import resolve_device
from trader.agents import Agent, get_spec
from trader import rundir
from trader.agents.base import seeded
from trader.agents.checkpoint import (
    RNG_KEY,
    load_checkpoint,
    read_metadata,
    read_tensors,
    restore_agent,
    save_checkpoint,
    write_tensors,
)
from trader.agents.evaluator import Evaluator, market_evaluator, mean_return_score
from trader.environments import load_market, resolve_env
from trader.errors import CheckpointError, ConfigError, UserError
from trader.rundir import config_from_dict, config_to_dict
from trader.spec import MarketSpec

ProgressFn = Callable[[dict[str, float]], None]
"""Called after each iteration with that iteration's metrics row."""

COMPILE_CHOICES = ("off", "validation", "all")
"""What `train`'s ``compile`` may say: nothing compiled; the market validation pass only; the
agent's forward passes and the market steps of training and validation."""


def compile_choice(compile: bool | str) -> str:
    """``compile`` as one of `COMPILE_CHOICES` (False is "off", True is "all")."""
    if isinstance(compile, bool):
        return "all" if compile else "off"
    if compile not in COMPILE_CHOICES:
        raise ConfigError(f"compile must be True, False or one of {', '.join(COMPILE_CHOICES)}; got {compile!r}")
    return compile


@dataclass
class BuiltEnvs:
    """The training env, the validation env (or None) and what describes them."""

    train: Any
    """Batched training env."""
    evaluator: Evaluator | None
    """Evaluator on the validation env; None when there is none."""
    description: dict[str, Any]
    """JSON/TOML-able description of the env (for config.toml)."""
    data_window: dict[str, Any]
    """Data periods, for checkpoint sidecars."""
    dataset_card: dict[str, Any] | None = None
    """Market envs: `MarketData.describe()`, written as dataset.json."""


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


class Interrupted(KeyboardInterrupt):
    """A run stopped by a signal (`stop_on_signals`). A `KeyboardInterrupt`, so that no
    ``except Exception`` on the way swallows it.

    :param signal: the signal's number (SIGINT, SIGTERM); the CLI exits with 128 + it.
    :param step: the step a training run stopped at, its state saved there (``resume/last``);
        None when the signal ended the program at once (a second signal, or outside a
        training loop): then only what was saved before is kept.
    :param run_dir: the training run it stopped (None when unknown).
    """

    def __init__(self, signal: int, step: int | None = None, run_dir: Path | None = None) -> None:
        super().__init__(signal, step, run_dir)
        self.signal = int(signal)
        self.step = step
        self.run_dir = run_dir

    @property
    def exit_code(self) -> int:
        """128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as a shell reports it."""
        return 128 + self.signal


class StopRequest:
    """A request to stop training at the end of the iteration in progress.

    `stop_on_signals` makes one from SIGINT and SIGTERM; a caller (a test) may also `request`
    it itself. While no training loop is `listening`, a signal ends the program at once
    (`Interrupted` without a step), since nothing would look at the request."""

    def __init__(self) -> None:
        self.signal: int | None = None
        """The signal that asked (None: not asked)."""
        self.listening = 0
        """How many training loops are running and look at the request after each iteration."""

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def request(self, signum: int = signal.SIGINT) -> None:
        """Ask the running loop to stop, as signal ``signum`` would."""
        self.signal = int(signum)

    def handle(self, signum: int, frame: Any) -> None:
        """The signal handler: the first signal during a loop is a request; else stop now."""
        if self.requested or not self.listening:
            raise Interrupted(signum)
        self.request(signum)


_ACTIVE: list[StopRequest] = []
"""The requests of the `stop_on_signals` blocks now open (the innermost last)."""


@contextmanager
def stop_on_signals(signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[StopRequest]:
    """Catch ``signals`` for the block as one `StopRequest`: every `train` inside stops at its
    next iteration's end, saves where it is and raises `Interrupted` with the step; a second
    signal, or one outside a training loop, raises `Interrupted` at once. The previous
    handlers come back at the end. Outside the main thread (where Python cannot catch
    signals) nothing is installed, and the request is only set by `StopRequest.request`."""
    request = StopRequest()
    installed: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        installed = {sig: signal.signal(sig, request.handle) for sig in signals}
    _ACTIVE.append(request)
    try:
        yield request
    finally:
        _ACTIVE.remove(request)
        for sig, handler in installed.items():
            signal.signal(sig, handler)


def active_stop() -> StopRequest | None:
    """The request of the innermost `stop_on_signals` block open now (None outside any)."""
    return _ACTIVE[-1] if _ACTIVE else None


@dataclass(frozen=True)
class ResumePoint:
    """Where a run stopped, as ``resume/last.json``'s ``info`` records it."""

    step: int
    """Transitions collected."""
    last_eval: int
    """The step of the last evaluation (the schedule of the next ones continues from it)."""
    wall_time: float
    """Seconds of training so far (``time_budget`` and ``snapshot_every`` count on from it)."""
    runner: bool = False
    """The runner's state (an off-policy replay buffer) was saved beside it (``resume/runner``:
    only where a signal stopped the run)."""

    @classmethod
    def read(cls, root: Path) -> ResumePoint:
        """The resume point of the run in ``root``; one `UserError` when it has none."""
        if not (root / rundir.CONFIG).is_file():
            raise UserError(f"--resume: {root} holds no training run (no {rundir.CONFIG})")
        sidecar = root / f"{rundir.RESUME_POINT}.json"
        if not sidecar.is_file():
            done = (root / rundir.CHECKPOINTS / "final.json").is_file()
            why = "it finished" if done else "it stopped before its first evaluation saved one"
            raise UserError(f"--resume: {root} has no point to resume from ({sidecar} is missing: {why})")
        info = read_metadata(sidecar).get("info", {})
        try:
            return cls(
                int(info["step"]), int(info["last_eval"]), float(info["wall_time"]), bool(info.get("runner", False))
            )
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{sidecar}: info lacks step, last_eval or wall_time") from None


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
        (see the module docstring: the training env is reset, and an off-policy replay
        buffer is restored only where a signal stopped the run; everything else continues). The other arguments must resolve
        to the config.toml the run recorded (`rerun_arguments` reads them from it); a key
        that differs is refused. ``init_from`` is not loaded again (the point holds it).
    :param stop: stop at the end of the iteration in which this is requested, save where
        the run is, raise `Interrupted`; None: in the main thread, the request of the
        `stop_on_signals` block open now, if any (a run in another thread is stopped by
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
    algo_config = _resolve_config(spec.config_cls, config)
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
        rows = _restore(root, point, agent, envs.evaluator)
    else:
        if overwrite:
            rundir.clear_run(root)
        rundir.make_folder(root / rundir.CHECKPOINTS)
        rundir.write_toml(root / rundir.CONFIG, written)
        if envs.dataset_card is not None:
            rundir.write_json(root / rundir.DATASET, envs.dataset_card)
        rows = []
    if on_start is not None:
        on_start(written)
    if stop is None and threading.current_thread() is threading.main_thread():  # a worker thread's run is its pool's
        stop = active_stop()
    loop = _Loop(runner, envs, root, rows, point, stop)
    rows = loop.run(steps, eval_every, on_iteration, time_budget, snapshot_every)
    frame = pd.DataFrame(rows)
    rundir.write_parquet(root / rundir.METRICS, frame)
    save_checkpoint(
        agent,
        root / rundir.CHECKPOINTS / "final",
        data_window=envs.data_window,
        info={"step": int(frame["step"].iloc[-1])},
    )
    _write_trials(root, envs.evaluator)
    shutil.rmtree(root / rundir.RESUME_DIR, ignore_errors=True)  # finished: nothing to resume
    best = None
    if envs.evaluator is not None and envs.evaluator.best_state is not None:
        best = envs.evaluator.best_score  # its snapshot was saved when it was found
    return TrainResult(root, agent, int(frame["step"].iloc[-1]), float(frame["wall_time"].iloc[-1]), best, frame)


def check_same_run(root: Path, written: dict[str, Any]) -> None:
    """A resume's resolved config must be the one the run recorded in config.toml (the
    library version aside): one `UserError` naming the keys that differ."""
    saved = rundir.read_toml(root / rundir.CONFIG)
    keys = sorted(k for k in set(saved) | set(written) if k != "library_version" and saved.get(k) != written.get(k))
    if keys:
        listing = ", ".join(f"{k} (recorded {saved.get(k)!r}, now {written.get(k)!r})" for k in keys[:2])
        raise UserError(
            f"--resume: the run in {root} was started with another config: {listing}"
            f"{', ...' if len(keys) > 2 else ''}; give no option that changes it"
        )


def _restore(root: Path, point: ResumePoint, agent: Agent, evaluator: Evaluator | None) -> list[dict[str, float]]:
    """The metrics rows of the run in ``root`` up to ``point`` (the rows past it are trained
    again), and its evaluator's best snapshot and trials up to there."""
    frame = rundir.read_parquet(root / rundir.METRICS) if (root / rundir.METRICS).is_file() else pd.DataFrame()
    rows = [
        {key: float(value) for key, value in row.items() if not pd.isna(value)}
        for row in frame.to_dict("records")
        if row["step"] <= point.step
    ]
    if evaluator is None:
        return rows
    trials = []
    if (root / rundir.TRIALS).is_file():
        keys, returns = rundir.read_trials(root / rundir.TRIALS)
        for i, (step, score) in enumerate(zip(keys["step"], keys["score"], strict=True)):
            if step <= point.step:
                trials.append((int(step), float(score), returns.iloc[i].dropna().rename(None)))
    best = None
    if (root / rundir.CHECKPOINTS / "best.json").is_file():
        state, meta = load_checkpoint(root / rundir.CHECKPOINTS / "best", agent.device)
        info = meta.get("info", {})
        metrics = {k: math.nan if v is None else float(v) for k, v in (info.get("validation") or {}).items()}
        best = (int(info["step"]), metrics, state)
    evaluator.restore(agent, best, trials)
    return rows


class _Loop:
    """The training loop of one run: iterate the runner; evaluate every ``eval_every``
    transitions and at the end; save the best snapshot when validation improves, and the
    records and the resume point at each evaluation; snapshot every ``snapshot_every``
    seconds; stop at an iteration's end when ``stop`` is requested."""

    def __init__(
        self,
        runner: Any,
        envs: BuiltEnvs,
        root: Path,
        rows: list[dict[str, float]],
        point: ResumePoint | None,
        stop: StopRequest | None,
    ) -> None:
        self.runner, self.envs, self.root, self.rows, self.stop = runner, envs, root, rows, stop
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
    ) -> list[dict[str, float]]:
        if self.stop is not None:
            self.stop.listening += 1
        try:
            return self._iterate(steps, eval_every, on_iteration, time_budget, snapshot_every)
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
    ) -> list[dict[str, float]]:
        runner, envs, rows = self.runner, self.envs, self.rows
        start = time.perf_counter() - self.offset
        deadline = math.inf if time_budget is None else start + time_budget
        next_snapshot = math.inf
        if snapshot_every is not None:
            next_snapshot = snapshot_every * (math.floor(self.offset / snapshot_every) + 1) if rows else snapshot_every
        while self.done_steps < steps and time.perf_counter() < deadline:
            tick = time.perf_counter()
            metrics = runner.iteration()
            elapsed = time.perf_counter() - tick
            self.done_steps += int(metrics["env_steps"])
            done_steps = self.done_steps
            row = {"step": float(done_steps), "wall_time": time.perf_counter() - start}
            row["samples_per_s"] = metrics["env_steps"] / max(elapsed, 1e-9)
            row.update(metrics)
            due = eval_every > 0 and done_steps - self.last_eval >= eval_every
            last = done_steps >= steps or time.perf_counter() >= deadline
            if due or last:
                self.last_eval = done_steps
                improved = False
                if envs.evaluator is not None:
                    scores, improved = envs.evaluator.consider(runner.agent, done_steps)
                    row.update({f"val_{key}": value for key, value in scores.items()})
                    row["wall_time"] = time.perf_counter() - start
                rows.append(row)
                self.save(improved)
            else:
                rows.append(row)
            if row["wall_time"] >= next_snapshot:  # one snapshot, named by the latest mark it passed
                mark = snapshot_every * math.floor(row["wall_time"] / snapshot_every)
                save_checkpoint(
                    runner.agent,
                    self.root / rundir.SNAPSHOTS / snapshot_name(mark),
                    data_window=envs.data_window,
                    info={"step": done_steps, "seconds": row["wall_time"]},
                )
                next_snapshot = mark + snapshot_every
            if on_iteration is not None:
                on_iteration(row)
            if self.stop is not None and self.stop.requested and not last:  # a last iteration ends the run anyway
                self.save(False, with_runner=True)
                raise Interrupted(self.stop.signal or signal.SIGINT, done_steps, self.root)
        return rows

    def save(self, improved: bool, with_runner: bool = False) -> None:
        """The records, the best snapshot (when ``improved``), the runner's state (``with_runner``:
        where a signal stops the run) and the resume point, in this order: the point's sidecar,
        written last, marks everything before it as written."""
        envs, root = self.envs, self.root
        rundir.write_parquet(root / rundir.METRICS, pd.DataFrame(self.rows))
        _write_trials(root, envs.evaluator)
        if improved:
            envs.evaluator.save_best(root / rundir.CHECKPOINTS / "best", data_window=envs.data_window)
        state = self.runner.state_dict() if with_runner else {}
        if state:
            write_tensors(root / rundir.RESUME_RUNNER, state)
        info = {"step": self.done_steps, "last_eval": self.last_eval, "wall_time": self.rows[-1]["wall_time"]}
        info["runner"] = bool(state)
        save_checkpoint(self.runner.agent, root / rundir.RESUME_POINT, data_window=envs.data_window, info=info)
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


# --------------------------------------------------------------------------- envs


def build_envs(
    env: Any,
    num_envs: int,
    device: torch.device,
    seed: int,
    eval_env: Any = None,
    eval_episodes: int = 5,
    env_config: Any = None,
    compile: bool | str = False,
    periods: dict[str, Any] | None = None,
) -> BuiltEnvs:
    """Training env + evaluator for a market spec, a gymnasium id, a recipe, a panel or a built env."""
    if isinstance(env, MarketSpec):
        if env_config is not None or periods:
            raise ConfigError(
                "a MarketSpec carries the env rules and the windows; give no env_config or periods beside it"
            )
        name = resolve_env(env.dataset)
        return _market_envs(
            env.data(), num_envs, device, env.rules, compile, recipe=name.value if name.kind == "recipe_file" else None
        )
    if isinstance(env, str):
        name = resolve_env(env)
        if name.is_gym:
            if env_config is not None or periods:
                raise ConfigError("env_config and periods apply to market envs only, not to gymnasium ids")
            return _gym_envs(name.value, num_envs, device, seed, eval_episodes)
        return _market_envs(
            load_market(name.value, periods),
            num_envs,
            device,
            env_config,
            compile,
            recipe=name.value if name.kind == "recipe_file" else None,
        )
    if _is_market_data(env):
        return _market_envs(env.with_periods(periods), num_envs, device, env_config, compile)
    if periods:
        raise ConfigError("periods apply to market envs only (a recipe or a MarketData)")
    for attribute in ("num_envs", "obs_dim", "act_dim", "reset", "step"):
        if not hasattr(env, attribute):
            raise ConfigError(
                f"env must be a gymnasium id, a data set recipe, a MarketData or a batched env; "
                f"{type(env).__name__} has no '{attribute}'"
            )
    evaluator = None if eval_env is None else Evaluator(eval_env, seed=seed + 10_000)
    return BuiltEnvs(env, evaluator, {"kind": "custom", "repr": repr(env)}, {"env": repr(env)})


def _is_market_data(value: Any) -> bool:
    from market_envs.data import MarketData

    return isinstance(value, MarketData)


def _gym_envs(env_id: str, num_envs: int, device: torch.device, seed: int, eval_episodes: int) -> BuiltEnvs:
    from market_envs.gym_vec import GymVecEnv

    train_env = GymVecEnv(env_id, num_envs, device, seed)
    validation = GymVecEnv(env_id, eval_episodes, device, seed + 10_000)
    evaluator = Evaluator(validation, mean_return_score, seed=seed + 10_000)
    description = {"kind": "gymnasium", "id": env_id, "eval_episodes": eval_episodes}
    return BuiltEnvs(train_env, evaluator, description, {"env": env_id})


def _market_envs(
    data: Any, num_envs: int, device: torch.device, env_config: Any, compile: bool | str, recipe: str | None = None
) -> BuiltEnvs:
    """Train on the panel's train period, validate deterministically on its validation period.

    config.toml names the data set so that the run directory finds it again: a recipe
    file by its absolute path (``recipe``), a recipe of datasets/ (or a panel) by its name."""
    from market_envs.env import EnvConfig, StockTradingVecEnv

    train_data, val_data = data.period("train"), data.period("validation")
    cfg = env_config if isinstance(env_config, EnvConfig) else config_from_dict(EnvConfig, env_config or {})
    compile = compile_choice(compile)
    train_env = StockTradingVecEnv(train_data, num_envs, device, cfg, compile=compile == "all")
    evaluator = market_evaluator(val_data, cfg, device, compile=compile != "off")
    window = {
        "dataset": data.name,
        "interval": data.interval,
        "train": [str(train_data.start), str(train_data.end)],
        "validation": [str(val_data.start), str(val_data.end)],
        "tickers": list(data.tickers),
        "env_config": config_to_dict(cfg),
    }
    card = data.describe()
    description = {
        "kind": "market",
        "dataset": recipe or data.name,
        "env_config": config_to_dict(cfg),
        "cost_model": NamedCosts.from_config(cfg).name,
        "dataset_periods": {name: [part["start"], part["end"]] for name, part in card.get("periods", {}).items()},
    }
    if "periods" in data.meta:
        description["periods"] = data.meta["periods"]
        window["periods"] = data.meta["periods"]
    return BuiltEnvs(train_env, evaluator, description, window, card)


def check_dataset_periods(found: Any, recorded: Any, description: dict[str, Any]) -> None:
    """A rerun's data set must have the periods its run recorded (``[env.dataset_periods]``
    of config.toml): otherwise the data set changed since, and the rerun would not reproduce."""
    if found != recorded:
        raise UserError(
            f"data set {description.get('dataset')!r} has other periods than the run recorded "
            f"(now {found}, recorded {recorded}): it changed since the run"
        )


def resume(run_dir: str | os.PathLike[str], **options: Any) -> TrainResult:
    """Continue the interrupted run in ``run_dir`` under the config its config.toml records
    (`rerun_arguments`; see the module docstring for what is and is not restored): the Python
    side of ``trader train RUN_DIR --resume``. ``options``: `train`'s callbacks and the like
    (``on_iteration``, ``on_start``, ``stop``); a key that changes the config is refused."""
    root = Path(run_dir)
    ResumePoint.read(root)  # one line when there is nothing to resume
    arguments = rerun_arguments(rundir.read_toml(root / rundir.CONFIG))
    arguments.update(options)
    return train(arguments.pop("algo"), arguments.pop("env"), run_dir=root, resume=True, **arguments)


def rerun_arguments(values: dict[str, Any]) -> dict[str, Any]:
    """`train`'s arguments from a run's config.toml (as `train` writes it): the same call
    trains the same run again, bit for bit on one worker (same library version, device
    and data). Keys of older config.toml files that are missing take `train`'s defaults."""
    env = values.get("env")
    if not isinstance(env, dict) or env.get("kind") not in ("market", "gymnasium"):
        raise ConfigError(f"config.toml: [env] must describe a market data set or a gymnasium env, got {env!r}")
    arguments: dict[str, Any] = {"algo": values.get("algo"), "config": values.get("algo_config") or {}}
    if env["kind"] == "market":
        arguments.update(
            env=env["dataset"],
            env_config=env.get("env_config"),
            periods=env.get("periods"),
            dataset_periods=env.get("dataset_periods"),
        )
    else:
        arguments.update(env=env["id"], eval_episodes=env.get("eval_episodes", 5))
    for key in ("steps", "seed", "device", "num_envs", "eval_every", "compile", "time_budget", "init_from", "preset"):
        if values.get(key) is not None:
            arguments[key] = values[key]
    return arguments


# --------------------------------------------------------------------------- configs


def _write_trials(root: Path, evaluator: Evaluator | None) -> None:
    """``trials.parquet``: the daily validation returns of every pass that competed
    for the best snapshot (market runs; picking the best snapshot is a selection)."""
    if evaluator is None or not evaluator.trials:
        return
    steps, scores, daily = zip(*evaluator.trials, strict=True)
    keys = pd.DataFrame({"step": list(steps), "score": list(scores)})
    rundir.write_parquet(root / rundir.TRIALS, rundir.trials_frame(keys, list(daily)))


def _resolve_config(config_cls: type, config: Any) -> Any:
    if config is None or isinstance(config, dict):
        return config_from_dict(config_cls, config or {})
    if not isinstance(config, config_cls):
        raise ConfigError(f"config must be a {config_cls.__name__} or a dict, got {type(config).__name__}")
    return config
