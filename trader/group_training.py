"""Training a pod group: ``train_group(algo, env, configs, run_dirs, seeds=...)`` trains P pods
of one algorithm side by side as one program (issue 77) and writes P run directories.

Each run directory is what `trader.train` writes for one run (config.toml, metrics.parquet,
checkpoints/best and final, trials.parquet, dataset.json), so `trader backtest`, `trader act`
and `trader paper` load a pod of a group alone; config.toml also records the group
(``[group]``: its size and the pod's row). The pods share one market env of P x E rows (each
pod its own E rows and random streams), one rollout and update program (`GROUP_RUNNERS`:
`trader.agents.ppo_group`, `trader.agents.offpolicy_group`) and one validation pass of their P
policies (`trader.agents.evaluator.GroupValidation`); each keeps its own best snapshot, trials and
records, chosen by its own scores. The loop is `trader.training.TrainingLoop`, the loop of a
lone run.

What a group is, by algorithm: PPO pods (either network) of one network shape, rollout length and minibatch
count (`trader.agents.ppo_group.group_key`), on a market env. Their seeds, learning rates and
the other perturbed hyperparameters (`trader.agents.ppo_group.GROUP_ROW_FIELDS`) are per pod.
SAC and TD3 pods (the flat MLP) of one network shape, batch size, replay size and update schedule
(`trader.agents.offpolicy_group.group_key`), their rates, discount, tau and noises per pod.
A pod trained in a group of P equals the pod trained in a group of one with the same seed and
config (tests/test_group_training.py); a group of one is not today's lone `trader.train` run,
whose random streams are the agent's generator (docs/missing.md).

On a gymnasium id (SAC and TD3 pods: ``trader train --population P --env Ant-v5``) the group's env
is one `market_envs.gym_vec.GymVecEnv` of P x E sub-environments, pod p's E seeded from its seed as a
lone run's are, and each pod validates on its own seed's episodes, one pod after another.

Not yet: resuming an interrupted group (each pod keeps the best snapshot
and records written at its last validation), ``compile="all"``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import trader
from market_envs.devices import resolve_device
from trader import rundir
from trader.agents import get_spec, make_config, offpolicy_group, ppo_group
from trader.agents.base import seeded
from trader.agents.evaluator import GroupValidation
from trader.agents.offpolicy_group import GROUP_RUNNERS as OFF_POLICY_GROUP_RUNNERS
from trader.agents.population import config_key
from trader.agents.ppo_group import PPOGroupRunner
from trader.environments import WARP_PREFIX
from trader.errors import ConfigError, UserError
from trader.rundir import config_to_dict
from trader.spec import MarketSpec
from trader.stopping import StopRequest, active_stop
from trader.training import (
    LoopPod,
    ProgressFn,
    TrainingLoop,
    TrainResult,
    continue_from,
    finish_run,
    resolve_config,
    start_run,
    with_env_layout,
)
from trader.training_envs import build_envs, compile_choice, gym_evaluator, is_market_data

GROUP_RUNNERS = {"ppo": PPOGroupRunner, **OFF_POLICY_GROUP_RUNNERS}
"""The group runner of each algorithm that trains in groups."""
GROUP_ALGOS = tuple(GROUP_RUNNERS)
"""The algorithms that train in groups."""
ROW_FIELDS = {
    "ppo": ppo_group.GROUP_ROW_FIELDS,
    "sac": offpolicy_group.SAC_ROW_FIELDS,
    "td3": offpolicy_group.TD3_ROW_FIELDS,
}
"""The config fields that may differ between the pods of one group, by algorithm."""
UNGROUPABLE = {"ppo": ppo_group.ungroupable, "sac": offpolicy_group.ungroupable, "td3": offpolicy_group.ungroupable}
"""Why a config of each algorithm cannot train in a group (one line), or None."""


def trains_in_groups(env: Any) -> bool:
    """Whether pods on ``env`` can train as one group: a market (a `MarketSpec`, a recipe, a panel) or
    a gymnasium id, whose envs seed each pod's rows (``use_row_streams``); not a MuJoCo Warp id
    (``warp:Ant-v5``: one generator draws every robot's start) nor a built env."""
    if isinstance(env, str):
        return not env.startswith(WARP_PREFIX)
    return isinstance(env, MarketSpec) or is_market_data(env)


def group_key(algo: str, config: Any) -> tuple | None:
    """What pods of ``algo`` must share to train in one group (``config``: a config or a dict of
    overrides), the algorithm included: every config field but `ROW_FIELDS`'; None for a pod that
    trains alone (an algorithm not in `GROUP_ALGOS`, or a config a group cannot stack, such as a
    per-stock SAC pod or several learners: `UNGROUPABLE`)."""
    if algo not in GROUP_ALGOS:
        return None
    if config is None or isinstance(config, dict):
        config = make_config(algo, config)
    if UNGROUPABLE[algo](config) is not None:
        return None
    return (algo, config_key(config, ROW_FIELDS[algo]))


def group_fields(algo: str) -> tuple[str, ...]:
    """The hyperparameters a tournament perturbs (``mutation_bounds``) that define a group of
    ``algo`` (not per row), sorted: () for an algorithm that does not train in groups."""
    if algo not in GROUP_ALGOS:
        return ()
    return tuple(sorted(set(get_spec(algo).mutation_bounds) - set(ROW_FIELDS[algo])))


def train_group(
    algo: str,
    env: Any,
    configs: Sequence[Any],
    run_dirs: Sequence[str | os.PathLike[str]],
    *,
    seeds: Sequence[int],
    steps: int = 100_000,
    device: torch.device | str = "cpu",
    num_envs: int = 8,
    eval_every: int = 10_000,
    eval_episodes: int = 5,
    init_from: Sequence[str | os.PathLike[str] | None] | None = None,
    time_budget: float | None = None,
    on_iteration: ProgressFn | None = None,
    preset: str | None = None,
    overwrite: bool = False,
    stop: StopRequest | None = None,
    compile: bool | str = False,
) -> list[TrainResult]:
    """Train P pods as one group; each pod's `TrainResult`, in order (see the module docstring).

    :param algo: "ppo", "sac" or "td3" (`GROUP_ALGOS`).
    :param env: a market spec, recipe or panel (`trader.train`'s ``env``, a market).
    :param configs: P algorithm configs (instances or dicts of overrides), one per pod.
    :param run_dirs: P run directories, one per pod.
    :param seeds: P seeds: each pod's networks, env rows and random streams.
    :param steps: environment transitions each pod collects.
    :param num_envs: sub-environments of each pod (E; the group's env has P x E rows).
    :param eval_episodes: a gymnasium env's validation episodes (each pod validates on its own
        seed's, as a lone run of that seed does).
    :param init_from: P checkpoints (or None each) a pod continues from (`trader.train`'s).
    :param on_iteration: called after each iteration with pod 0's metrics row.
    :param compile: False ("off") or "validation": the group's validation pass compiled
        (`trader.train`'s ``compile``); training stays eager.
    The other parameters are `trader.train`'s, for every pod.
    """
    pods = len(configs)
    if pods < 1 or len(run_dirs) != pods or len(seeds) != pods:
        raise ConfigError(
            f"train_group: configs, run_dirs and seeds need one entry per pod (>= 1), got "
            f"{len(configs)}, {len(run_dirs)}, {len(seeds)}"
        )
    starts = [None] * pods if init_from is None else list(init_from)
    if len(starts) != pods:
        raise ConfigError(f"train_group: init_from needs one entry per pod, got {len(starts)} for {pods}")
    if algo not in GROUP_ALGOS:
        raise ConfigError(f"train_group: {algo} pods do not train in groups yet (only {', '.join(GROUP_ALGOS)})")
    for name, value, low in (("steps", steps, 1), ("num_envs", num_envs, 1), ("eval_every", eval_every, 0)):
        if value < low:
            raise ConfigError(f"train_group: {name} must be >= {low}, got {value}")
    if time_budget is not None and not time_budget > 0:
        raise ConfigError(f"train_group: time_budget must be > 0 seconds, got {time_budget}")
    roots = [Path(root) for root in run_dirs]
    if len(set(roots)) != pods:
        raise ConfigError("train_group: every pod needs its own run directory")
    for root in roots:
        rundir.check_new_run(
            root, remedy="pass overwrite=True to replace it, or other run directories", overwrite=overwrite
        )
    compile = compile_choice(compile)
    if compile == "all":
        raise ConfigError('train_group: compile="all" does not apply to a pod group yet (off or "validation")')
    if not trains_in_groups(env):
        what = repr(env) if isinstance(env, str) else f"a {type(env).__name__}"
        raise ConfigError(f"train_group: pod groups train on a market or a gymnasium id, not on {what}")
    spec = get_spec(algo)
    device = resolve_device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {device} requested but CUDA is not available")
    with seeded(int(seeds[0])):
        envs = build_envs(env, pods * num_envs, device, int(seeds[0]), eval_episodes=eval_episodes, compile=compile)
    agents = []
    for config, seed, start in zip(configs, seeds, starts, strict=True):
        algo_config = with_env_layout(resolve_config(spec.config_cls, config), envs.train)
        agent = spec.agent_cls(envs.train.obs_dim, envs.train.act_dim, algo_config, device, int(seed))
        if start is not None:
            continue_from(agent, start, int(seed))
        agents.append(agent)
    runner = GROUP_RUNNERS[algo](agents, envs.train)
    loop_pods = []
    for row, (root, agent, start) in enumerate(zip(roots, agents, starts, strict=True)):
        written = rundir.toml_ready(
            {
                "library_version": trader.__version__,
                "algo": algo,
                "preset": preset,
                "seed": agent.seed,
                "steps": steps,
                "device": str(device),
                "num_envs": num_envs,
                "eval_every": eval_every,
                "compile": compile,
                "time_budget": time_budget,
                "init_from": None if start is None else str(start),
                "env": envs.description,
                "algo_config": config_to_dict(agent.config),
                "group": {"size": pods, "row": row},
            }
        )
        start_run(root, written, envs.dataset_card, overwrite)
        evaluator = _pod_evaluator(envs, agent.seed, device)
        loop_pods.append(LoopPod(root, agent, evaluator))
    validation = None if envs.evaluator is None else GroupValidation(envs.evaluator, pods)
    if stop is None:
        stop = active_stop()
    loop = TrainingLoop(runner, loop_pods, envs.data_window, None, stop, validation)
    loop.run(steps, eval_every, on_iteration, time_budget, None)
    runner.write_agents()
    return [finish_run(pod, envs.data_window) for pod in loop_pods]


def _pod_evaluator(envs: Any, seed: int, device: torch.device) -> Any:
    """A pod's validation: a copy of the market's evaluator (the same period, whatever the seed), or
    on a gymnasium env the episodes of the pod's own seed (`gym_evaluator`, a lone run's)."""
    if envs.evaluator is None:
        return None
    if envs.description.get("kind") == "gymnasium":
        return gym_evaluator(envs.description["id"], envs.description["eval_episodes"], device, seed)
    return envs.evaluator.copy()
