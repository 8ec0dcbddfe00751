"""A pod: one agent trained by `trader.train` into its own run directory.

`PodSpec` says everything a pod needs (algorithm, config, env, steps, seed, parent),
so `train_pod(spec, run_dir)` is a pure function of its arguments: on the CPU the
same spec gives the same result (a spec without a deadline: one with a deadline stops
where the clock says). It runs on a dask worker or in-process alike and
returns a small `PodResult` (scores, timings, where its checkpoint is): weights stay
on disk, nothing large crosses the wire.

`train_pod_group(specs, run_dir)` trains several PPO pods as one program
(`trader.group_training.train_group`, issue 77), each into its own run directory as
`train_pod` writes it, with the same at-least-once safety per pod; a dask task trains one
group and returns one `PodResult` per pod.

A child pod continues from its parent's ``best`` checkpoint (weights, optimiser
moments, observation normaliser; see `trader.train`'s ``init_from``) with its own,
possibly perturbed, config and its own seed.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import time
import traceback
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from trader import rundir
from trader.errors import ConfigError
from trader.spec import MarketSpec, resolve_market

POD_DIR = rundir.PODS_DIR
"""Pods live in ``RUN_DIR/pods/<pod_id>/``, each a `trader.train` run directory."""
MIN_BUDGET_SECONDS = 1e-3
"""The training budget of a pod whose deadline passed between its start and its training:
one iteration, then its validation."""


@dataclass(frozen=True)
class PodSpec:
    """What to train: a pure description, JSON-able, small enough to send to a worker."""

    pod_id: str
    """Unique within the tournament, e.g. "p0007"; names the pod's run directory."""
    index: int
    """Order of creation (0, 1, ...); the pod's seed derives from it."""
    algo: str
    """"ppo", "sac" or "td3"."""
    algo_config: dict[str, Any]
    """The algorithm's config as a dict (what `trader.agents.make_config` takes)."""
    env: MarketSpec | str
    """The market (`trader.spec.MarketSpec`: data set, env rules, bar windows;
    `TournamentConfig.env` as it is) or a gymnasium id."""
    steps: int
    """Environment transitions to collect."""
    seed: int
    """Seed of the agent and its envs."""
    num_envs: int = 64
    """Sub-environments of the training env."""
    eval_every: int = 0
    """Transitions between validations (0: once, at the end)."""
    device: str = "cpu"
    """Where the pod trains ("cuda" on a dask-cuda worker means that worker's GPU)."""
    compile: bool | str = False
    """What to ``torch.compile``: False, True or "validation" (`trader.train`'s ``compile``)."""
    generation: int = 0
    """0 for a fresh agent, the parent's generation + 1 for a child."""
    parent_id: str | None = None
    """The pod whose checkpoint this one continues from, or None."""
    parent_checkpoint: str | None = None
    """The parent's checkpoint, relative to the run directory (e.g. pods/p0003/checkpoints/best)."""
    deadline: float | None = None
    """Unix time of the tournament's time budget (None: no budget). The pod stops training
    after the first iteration that ends past it, is validated and returns a finished result
    (`trader.train`'s ``time_budget``); a pod that would start past it does not train at all
    (status "cancelled"). The orchestrator sets it at each submission, so a resumed pod gets
    the new run's deadline; the hosts' clocks are taken to agree (NTP)."""

    def to_dict(self) -> dict[str, Any]:
        """The spec as a JSON-able dict, the market as `MarketSpec.to_dict` writes it."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["env"] = self.env.to_dict() if isinstance(self.env, MarketSpec) else self.env
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PodSpec:
        """The spec `to_dict` wrote, or one of the older form (``env`` a recipe name beside
        ``env_config``, ``periods`` and ``windows``: pods.parquet and events.jsonl of older runs)."""
        values = dict(values)
        loose = {key: values.pop(key) for key in ("env_config", "periods", "windows") if key in values}
        env = values["env"]
        if isinstance(env, dict):
            values["env"] = MarketSpec.from_dict(env)
        elif loose:
            values["env"] = resolve_market(
                env,
                loose.get("env_config") or None,
                periods=loose.get("periods") or None,
                windows=loose.get("windows") or None,
            )
        return cls(**values)


@dataclass(frozen=True)
class PodResult:
    """What a pod returns to the orchestrator (small: no tensors)."""

    pod_id: str
    status: str
    """"finished" (a validation score and a checkpoint exist), "failed", or "cancelled" (it
    would have started past its `PodSpec.deadline`: nothing trained, nothing written)."""
    score: float | None = None
    """Best validation score (the evaluator's; NaN when it is not finite, e.g. a
    validation period with no trade has no Sharpe ratio; None when failed)."""
    score_history: list[tuple[float, float]] = field(default_factory=list)
    """(step, validation score) of every evaluation."""
    steps: int = 0
    """Environment transitions collected."""
    seconds: float = 0.0
    """Wall-clock of the pod, data loading included."""
    start: float = 0.0
    """Unix time the pod started on its worker."""
    end: float = 0.0
    """Unix time it ended."""
    worker: str = ""
    """Address of the dask worker (or host:pid when run in-process)."""
    device: str = "cpu"
    checkpoint: str | None = None
    """Best checkpoint, relative to the run directory."""
    error: str | None = None
    """One line: why it failed."""

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["score_history"] = [list(pair) for pair in self.score_history]
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PodResult:
        values = dict(values)
        nan = float("nan")
        if values["status"] == "finished" and values.get("score") is None:
            values["score"] = nan  # JSON has no NaN; a finished pod's score is a float
        values["score_history"] = [
            (float(step), nan if score is None else float(score)) for step, score in values.get("score_history", [])
        ]
        return cls(**values)


def pod_dir(run_dir: str | os.PathLike[str], pod_id: str) -> Path:
    """The run directory of one pod."""
    return Path(run_dir) / POD_DIR / pod_id


def train_pod(spec: PodSpec, run_dir: str) -> PodResult:
    """Train one pod into ``RUN_DIR/pods/<pod_id>/`` and describe the outcome.

    An error inside training is a failed pod (recorded, never raised): the tournament
    goes on. A worker that dies is dask's business: the task is run again elsewhere.

    At-least-once made safe: the pod trains into a staged folder of its own and commits
    it with `trader.rundir.commit_folder_once`, so of several runs of one spec (dask
    may run a task twice) the first to finish is the pod, whole, and every other run
    returns that run's `PodResult` (its ``pod.json``) without touching its files. A run
    that starts after a copy is committed returns it at once.
    """
    final = pod_dir(run_dir, spec.pod_id)
    done = committed_result(final)
    if done is not None:
        return done
    if spec.deadline is not None and time.time() >= spec.deadline:
        return _cancelled(spec)
    staged = rundir.stage_folder(final, unique=True)
    try:
        return _commit(_train_into(spec, run_dir, staged), staged, final)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def train_pod_group(specs: list[PodSpec], run_dir: str) -> list[PodResult]:
    """Train pods as one group (`trader.group_training.train_group`) and describe each, in order.

    ``specs`` share a `tournament.generator.pod_group_key` (the orchestrator packs them so:
    `tournament.generator.groups`). Specs that do not train in groups (`trader.group_training.group_key`
    None: an algorithm or a network no group stacks) go through `train_pod` each; one spec of one that does is a group of one (a grouped tournament's pod left
    without peers: so that what a pod gives depends on its spec alone, not on how it was packed).
    Otherwise, with `train_pod`'s at-least-once safety per
    pod: a pod already committed is returned from its ``pod.json`` and not trained again; the
    others train as one group, each into a staged folder of its own, each committed with
    `trader.rundir.commit_folder_once` (of two runs of a pod the first to commit is the pod). A
    pod of a group equals the same pod in any other group (`train_group`), so a group run again
    with some of its pods committed gives the others as the whole group gave them. An error is a
    "failed" result for each pod trained (one line), never raised; a deadline already past gives
    "cancelled" results; the time budget is the earliest deadline's, as `train_pod` takes it.
    """
    if _group_key(specs[0]) is None:
        return [train_pod(spec, run_dir) for spec in specs]
    finals = {spec.pod_id: pod_dir(run_dir, spec.pod_id) for spec in specs}
    results = {spec.pod_id: committed_result(finals[spec.pod_id]) for spec in specs}
    todo = [spec for spec in specs if results[spec.pod_id] is None]
    deadline = min((spec.deadline for spec in todo if spec.deadline is not None), default=None)
    if todo and deadline is not None and time.time() >= deadline:
        results.update({spec.pod_id: _cancelled(spec) for spec in todo})
        todo = []
    staged = {spec.pod_id: rundir.stage_folder(finals[spec.pod_id], unique=True) for spec in todo}
    try:
        if todo:
            trained = _train_group_into(todo, run_dir, [staged[spec.pod_id] for spec in todo], deadline)
            for spec, result in zip(todo, trained, strict=True):
                results[spec.pod_id] = _commit(result, staged[spec.pod_id], finals[spec.pod_id])
    finally:
        for folder in staged.values():
            shutil.rmtree(folder, ignore_errors=True)
    return [results[spec.pod_id] for spec in specs]


def _group_key(spec: PodSpec) -> tuple | None:
    """`trader.group_training.group_key` of a spec; None for a config that does not build (the
    pod then fails alone, its error recorded as any pod's)."""
    from trader.group_training import group_key

    try:
        return group_key(spec.algo, spec.algo_config)
    except ConfigError:
        return None


def _commit(result: PodResult, staged: Path, final: Path) -> PodResult:
    """Write ``result`` as the staged folder's ``pod.json`` and commit the folder once; the
    result of the copy that was committed first (this one, or another run's)."""
    rundir.write_json(staged / rundir.POD_RESULT, {"format_version": rundir.POD_RESULT_VERSION, **result.to_dict()})
    if rundir.commit_folder_once(staged, final):
        return result
    done = committed_result(final)
    if done is not None:
        return done
    rundir.commit_folder(staged, final)  # a folder from before pod.json existed: not a finished copy
    return result


def _cancelled(spec: PodSpec) -> PodResult:
    """The result of a pod that would start past its deadline: nothing trained, nothing written."""
    now = time.time()
    return PodResult(spec.pod_id, "cancelled", start=now, end=now, worker=_worker_name(), device=spec.device)


def committed_result(folder: Path) -> PodResult | None:
    """The `PodResult` of a committed pod folder (None when there is none yet)."""
    path = folder / rundir.POD_RESULT
    if not path.is_file():
        return None
    values = rundir.read_json(path, version=rundir.POD_RESULT_VERSION)
    values.pop("format_version")
    return PodResult.from_dict(values)


def _train_into(spec: PodSpec, run_dir: str, out: Path) -> PodResult:
    """Train ``spec`` into ``out`` (a staged folder); paths in the result point at the
    pod's final folder."""
    import torch

    from trader.training import train

    torch.set_num_threads(1)  # one torch thread per worker process
    start = time.time()
    try:
        result = train(
            spec.algo,
            spec.env,
            spec.algo_config,
            out,
            steps=spec.steps,
            seed=spec.seed,
            device=spec.device,
            num_envs=spec.num_envs,
            eval_every=spec.eval_every,
            init_from=_init_from(spec, run_dir),
            compile=spec.compile,
            time_budget=_time_budget(spec.deadline),
        )
    except Exception as err:  # noqa: BLE001 - a failed pod is a result, not a crash
        return _failed(spec, out, start, err)
    return _outcome(spec, run_dir, out, result, start, time.time())


def _train_group_into(specs: list[PodSpec], run_dir: str, outs: list[Path], deadline: float | None) -> list[PodResult]:
    """Train ``specs`` as one group, pod i into ``outs[i]`` (staged folders); `_train_into`'s
    results, one per pod."""
    import torch

    from trader.group_training import train_group

    torch.set_num_threads(1)  # one torch thread per worker process
    start = time.time()
    first = specs[0]
    try:
        shared = {(s.algo, s.steps, s.num_envs, s.eval_every, s.device, s.compile, spec_env(s)) for s in specs}
        if len(shared) != 1 or first.compile not in GROUP_COMPILE:
            raise ConfigError(
                "the pods of a group task need one algorithm, market, length, envs and device, and no compile "
                "but the validation pass's"
            )
        trained = train_group(
            first.algo,
            first.env,
            [spec.algo_config for spec in specs],
            outs,
            seeds=[spec.seed for spec in specs],
            steps=first.steps,
            device=first.device,
            num_envs=first.num_envs,
            eval_every=first.eval_every,
            init_from=[_init_from(spec, run_dir) for spec in specs],
            time_budget=_time_budget(deadline),
            compile=first.compile,
        )
    except Exception as err:  # noqa: BLE001 - a failed group is a failed result per pod, not a crash
        return [_failed(spec, out, start, err) for spec, out in zip(specs, outs, strict=True)]
    end = time.time()  # the group's: its pods ran as one program
    return [
        _outcome(spec, run_dir, out, result, start, end) for spec, out, result in zip(specs, outs, trained, strict=True)
    ]


GROUP_COMPILE = (False, "off", "validation")
"""What a group task's pods may compile (`trader.group_training.train_group`'s ``compile``)."""


def _init_from(spec: PodSpec, run_dir: str) -> Path | None:
    """The checkpoint a child continues from (its parent's), None for a fresh pod."""
    return None if spec.parent_checkpoint is None else Path(run_dir) / spec.parent_checkpoint


def _time_budget(deadline: float | None) -> float | None:
    """The training budget left before ``deadline`` (None: no budget)."""
    return None if deadline is None else max(deadline - time.time(), MIN_BUDGET_SECONDS)


def _failed(spec: PodSpec, out: Path, start: float, err: Exception) -> PodResult:
    """A pod whose training raised ``err``: its traceback in ``out``, one line in its result."""
    line = f"{type(err).__name__}: {err}".splitlines()[0]
    _write_failure(out, traceback.format_exc())
    end = time.time()
    return PodResult(
        spec.pod_id,
        "failed",
        start=start,
        end=end,
        seconds=end - start,
        worker=_worker_name(),
        device=spec.device,
        error=line,
    )


def _outcome(spec: PodSpec, run_dir: str, out: Path, result: Any, start: float, end: float) -> PodResult:
    """The `PodResult` of a pod trained into ``out`` from ``start`` to ``end`` (``result``: its
    `trader.training.TrainResult`)."""
    history = _score_history(result.metrics)
    if result.best_score is None or not (out / "checkpoints" / "best.json").is_file():
        return PodResult(
            spec.pod_id,
            "failed",
            steps=result.steps,
            start=start,
            end=end,
            seconds=end - start,
            worker=_worker_name(),
            device=spec.device,
            error="the pod has no validation score (no evaluator ran)",
        )
    score = float(result.best_score)
    checkpoint = pod_dir(run_dir, spec.pod_id) / "checkpoints" / "best"
    return PodResult(
        spec.pod_id,
        "finished",
        score=score if math.isfinite(score) else math.nan,
        score_history=history,
        steps=result.steps,
        seconds=end - start,
        start=start,
        end=end,
        worker=_worker_name(),
        device=spec.device,
        checkpoint=str(checkpoint.relative_to(run_dir)),
    )


def spec_env(spec: PodSpec) -> str:
    """The spec's market (or gymnasium id) as one JSON string, to compare specs by."""
    return json.dumps(spec.to_dict()["env"], sort_keys=True)


def _score_history(metrics: Any) -> list[tuple[float, float]]:
    if "val_score" not in metrics:
        return []
    rows = metrics[["step", "val_score"]].dropna()
    return [(float(step), float(score)) for step, score in rows.itertuples(index=False)]


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return f"{socket.gethostname()}:{os.getpid()}"


def _write_failure(out: Path, text: str) -> None:
    rundir.write_text(out / rundir.ERROR, text)


def spec_json(spec: PodSpec) -> str:
    """The spec as one JSON line (pods.parquet keeps it, `--resume` rebuilds from it)."""
    return json.dumps(spec.to_dict(), sort_keys=True)
