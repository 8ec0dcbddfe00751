"""The generator: the next pod, built from the leaderboard (exploit, then explore).

For pod number ``index`` (all its randomness comes from the tournament seed and the
index, through `numpy.random.SeedSequence`, so a pod is the same whatever order the
others finish in):

1. **Algorithm**: assigned by the configured mix (PPO:SAC:TD3 = 1:1:1 by default) in a fixed
   rotation (`algorithm_of`: each pod goes to the algorithm furthest below its share of the pods
   before it), so the pool keeps every algorithm however well one of them does, and a short
   tournament has each algorithm in its share: drawn at random, 2 of 10 tournaments of 4 or 5
   pods had no PPO pod at all (benchmarks/RESULTS.md, "Tournament value").
2. **Exploit** (truncation selection, as in population based training): the
   leaderboard's entries of that algorithm are ranked best first and the parent is
   drawn uniformly from the top ``ceil(top_fraction x count)`` of them (at least
   one). The ranking is the leaderboard's own (higher score first), never a sort
   written again here, so the bottom of the board can never be picked as "best".
3. **Explore**: the parent's hyperparameters listed in the algorithm's
   ``MUTATION_BOUNDS`` are each moved by a Gaussian step of ``mutation_scale`` x the
   bound's width (in log space for log-scaled ones), clipped into the bound and
   rounded for integers. A value outside its bound was set there on purpose (a
   discount of 0 for a bandit-like market, say) and is kept, never pulled into the
   bound. The child starts from the parent's best checkpoint.
4. **Fresh**: with probability ``fresh_probability``, or when the leaderboard holds no
   entry of the algorithm, the pod is a fresh agent of the base config instead.
5. **Random search** (``search = "random"``): every pod is fresh, and each bounded
   hyperparameter of the base config is drawn uniformly from its bound (log-uniformly
   for log-scaled ones; integers rounded), the others kept as they are, values set
   outside their bound included. No pod inherits weights: the same budget spent on
   exploration alone, the control arm that tells what exploitation adds.
6. **Groups** (``group_size`` P > 1): `groups` packs the specs of one pass into tasks: PPO
   pods that share a `pod_group_key` (network shape, rollout length, minibatch count, market,
   length) train as one group of up to P pods, the others alone. So that pods keep finding
   peers, the hyperparameters that define a group (`group_fields`, PPO's ``num_minibatches``)
   are never mutated or drawn then: every PPO pod keeps its base config's value.
7. **Warm start** (``warm_start``: a finished tournament's run directory, e.g. the
   previous walk-forward fold's): a pod that is not fresh but finds no entry of its
   algorithm on this leaderboard draws its parent, as in 2, from that tournament's
   leaderboard instead, and continues training it (continual learning). Its
   ``parent_id`` is ``<that run directory's name>/<pod id>``; this tournament's own
   ranking still rests on its own validation scores only.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tournament.config import TournamentConfig
from tournament.leaderboard import Entry, Leaderboard
from tournament.pod import GROUP_COMPILE, PodSpec
from trader.agents import get_spec, make_config
from trader.agents.base import Bound
from trader import rundir
from trader.group_training import group_fields, group_key, trains_in_groups
from trader.rundir import config_to_dict
from trader.spec import MarketSpec


def pod_seed_sequence(seed: int, index: int) -> np.random.SeedSequence:
    """The seed sequence of pod ``index``: child ``index`` of the tournament's seed."""
    return np.random.SeedSequence(seed, spawn_key=(index,))


def pod_id(index: int) -> str:
    return f"p{index:04d}"


def select_parent(board: Leaderboard, algo: str, top_fraction: float, rng: np.random.Generator) -> Entry | None:
    """A parent drawn uniformly from the top fraction of ``algo``'s entries, or None."""
    ranked = board.top(len(board), algo)
    if not ranked:
        return None
    count = max(1, math.ceil(top_fraction * len(ranked)))
    return ranked[int(rng.integers(count))]


def algorithm_of(index: int, mix: tuple[float, ...]) -> int:
    """The algorithm (its position in `mix`) of pod number `index`: a smooth weighted round-robin.

    Pod k goes to the algorithm whose share of pods 0..k falls furthest short of its share of the mix,
    ``mix[a] x (k + 1) - count[a]`` largest, the first such on a tie; so after any number of pods
    each algorithm's count is within one of its share (1:1:1 gives 0, 1, 2, 0, 1, 2, ...)."""
    counts = [0] * len(mix)
    for k in range(index + 1):
        shortfall = [share * (k + 1) - count for share, count in zip(mix, counts, strict=True)]
        chosen = shortfall.index(max(shortfall))
        counts[chosen] += 1
    return chosen


def perturb(
    values: Mapping[str, Any], bounds: Mapping[str, Bound], scale: float, rng: np.random.Generator
) -> dict[str, Any]:
    """``values`` with every bounded key moved by a clipped Gaussian step (see module doc)."""
    out = dict(values)
    for key in sorted(bounds):
        value = out.get(key)
        if value is None or not bounds[key].low <= float(value) <= bounds[key].high:
            continue  # set outside the search range on purpose (e.g. gamma = 0): kept
        out[key] = _step(float(value), bounds[key], scale, rng)
    return out


def sample(values: Mapping[str, Any], bounds: Mapping[str, Bound], rng: np.random.Generator) -> dict[str, Any]:
    """``values`` with every bounded key drawn afresh from its bound (random search; see
    the module docstring). A key whose value lies outside its bound is kept, as `perturb` does."""
    out = dict(values)
    for key in sorted(bounds):
        value, bound = out.get(key), bounds[key]
        if value is None or not bound.low <= float(value) <= bound.high:
            continue
        if bound.scale == "log":
            drawn = math.exp(rng.uniform(math.log(bound.low), math.log(bound.high)))
        else:
            drawn = rng.uniform(bound.low, bound.high)
        drawn = min(max(drawn, bound.low), bound.high)
        out[key] = int(round(drawn)) if bound.integer else float(drawn)
    return out


def _step(value: float, bound: Bound, scale: float, rng: np.random.Generator) -> float | int:
    if bound.scale == "log":
        low, high = math.log(bound.low), math.log(bound.high)
        x = math.log(value)
    else:
        low, high, x = bound.low, bound.high, value
    x = min(max(x + rng.normal(0.0, scale * (high - low)), low), high)
    moved = math.exp(x) if bound.scale == "log" else x
    moved = min(max(moved, bound.low), bound.high)  # exp/log round-off
    return int(round(moved)) if bound.integer else float(moved)


def pod_group_key(spec: PodSpec) -> tuple | None:
    """What pods must share to train as one group task: the algorithm's group key
    (`trader.group_training.group_key`), the market, the length, the envs, the validation
    cadence, the device and what it compiles; None for a pod that trains alone (an algorithm or
    network that does not group, an env that does not: `trains_in_groups`, a pod that compiles
    its networks)."""
    key = group_key(spec.algo, spec.algo_config)
    if key is None or spec.compile not in GROUP_COMPILE or not trains_in_groups(spec.env):
        return None
    env = json.dumps(spec.env.to_dict(), sort_keys=True) if isinstance(spec.env, MarketSpec) else spec.env
    return (*key, env, spec.steps, spec.num_envs, spec.eval_every, spec.device, spec.compile)


def frozen_by_groups(algo: str, group_size: int) -> tuple[str, ...]:
    """The hyperparameters of ``algo`` that pods keep at their base value because they define a
    group (``group_size`` > 1; `trader.group_training.group_fields`), sorted; () otherwise."""
    return group_fields(algo) if group_size > 1 else ()


def groups(specs: Sequence[PodSpec], size: int) -> list[list[PodSpec]]:
    """``specs`` packed into tasks, in order of their first pod: pods of one `pod_group_key` in
    groups of at most ``size`` (the last one of a key may be smaller), every other pod alone.
    ``size`` 1: each pod alone, as tasks were before groups."""
    tasks: list[list[PodSpec]] = []
    open_groups: dict[tuple, list[PodSpec]] = {}
    for spec in specs:
        key = pod_group_key(spec) if size > 1 else None
        if key is None:
            tasks.append([spec])
            continue
        group = open_groups.get(key)
        if group is None or len(group) >= size:
            group = open_groups[key] = []
            tasks.append(group)
        group.append(spec)
    return tasks


class PodGenerator:
    """Builds `PodSpec` number ``index`` from the leaderboard (see the module docstring)."""

    def __init__(self, config: TournamentConfig) -> None:
        self.config = config
        self.warm = (
            None if config.warm_start is None else Leaderboard.load(Path(config.warm_start) / rundir.LEADERBOARD)
        )
        """The warm-start tournament's leaderboard (None without ``warm_start``)."""

    def next_spec(self, index: int, board: Leaderboard) -> PodSpec:
        cfg = self.config
        sequence = pod_seed_sequence(cfg.seed, index)
        rng = np.random.default_rng(sequence)
        seed = int(sequence.generate_state(1)[0])
        algo = cfg.algos[algorithm_of(index, cfg.mix)]
        common = dict(
            pod_id=pod_id(index),
            index=index,
            algo=algo,
            env=cfg.env,
            steps=cfg.pod_steps,
            seed=seed,
            num_envs=cfg.num_envs,
            eval_every=cfg.eval_every,
            device=cfg.pod_device,
            compile=cfg.compile,
        )
        bounds = self.bounds(algo)
        if cfg.search == "random":
            base = config_to_dict(make_config(algo, cfg.base_config(algo)))
            config = config_to_dict(make_config(algo, sample(base, bounds, rng)))
            return PodSpec(algo_config=config, **common)
        fresh = rng.random() < cfg.fresh_probability
        parent = None if fresh else select_parent(board, algo, cfg.top_fraction, rng)
        warm = parent is None and not fresh and self.warm is not None
        if warm:
            parent = select_parent(self.warm, algo, cfg.top_fraction, rng)
        if parent is None:
            config = config_to_dict(make_config(algo, cfg.base_config(algo)))
            return PodSpec(algo_config=config, **common)
        child = perturb(parent.hyperparameters, bounds, cfg.mutation_scale, rng)
        config = config_to_dict(make_config(algo, child))  # validated by the algo's config
        if warm:
            return PodSpec(
                algo_config=config,
                generation=parent.generation + 1,
                parent_checkpoint=self._warm_path(parent),
                parent_id=f"{Path(cfg.warm_start).name}/{parent.pod_id}",
                **common,
            )
        return PodSpec(
            algo_config=config,
            generation=parent.generation + 1,
            parent_id=parent.pod_id,
            parent_checkpoint=parent.checkpoint,
            **common,
        )

    def bounds(self, algo: str) -> dict[str, Bound]:
        """The hyperparameters of ``algo`` that pods mutate or draw: its ``mutation_bounds``, less
        those that define a group when pods train in groups (`frozen_by_groups`)."""
        frozen = frozen_by_groups(algo, self.config.group_size)
        return {key: bound for key, bound in get_spec(algo).mutation_bounds.items() if key not in frozen}

    def _warm_path(self, parent: Entry) -> str:
        """A warm-start parent's checkpoint, relative to this run directory (as pods take it)."""
        target = Path(self.config.warm_start).resolve() / parent.checkpoint
        return os.path.relpath(target, Path(self.config.run_dir).resolve())
