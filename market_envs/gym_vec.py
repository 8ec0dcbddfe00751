"""Gymnasium environments (Pendulum, Ant, Humanoid, ...) behind the batched env contract.

`GymVecEnv` wraps gymnasium's own vector env (`gymnasium.make_vec`) and speaks the
contract of docs/contracts.md: tensors in and out on `device`, actions in [-1, 1]
rescaled to the env's `Box`, `terminated` and `truncated` kept apart, and gymnasium's
**same-step** autoreset (``AutoresetMode.SAME_STEP``): a sub-environment that
finishes is reset inside the same `step`, its new first observation is returned in
`obs`, and its last observation is in `info["final_obs"]` (rows of unfinished
sub-environments equal `obs`).

MuJoCo and classic-control envs run on the host. ``vectorization="sync"`` (the
default) steps the E environments one after another in this process;
``"async"`` steps each in its own worker process (gymnasium's `AsyncVectorEnv`).
Async adds a pipe round trip to every step and pays only where the envs' steps
outweigh it and spare cores run them, so sync is the default;
``benchmarks/mujoco_throughput.py`` compares the two (benchmarks/RESULTS.md,
"Locomotion", on the reference machine). Either way the host<->device copy happens
once per step for the whole batch: actions go down in one copy; observations,
rewards, flags and final observations come up in one copy each.

Seeding: sub-environment i is reset with ``seed + i`` at the first reset (or at any
reset given a seed); later autoresets continue each env's own RNG, so a run is a
pure function of the seed. A pod group's env (`use_row_streams`) holds P blocks of E
sub-environments, block p seeded as a lone env of E with pod p's seed.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from market_envs.devices import resolve_device
from market_envs.errors import ConfigError, UserError
from market_envs.streams import RowStreams


class GymVecEnv:
    """E gymnasium environments as one batched env on `device`.

    :param env_id: a registered gymnasium id, e.g. "Pendulum-v1", "Ant-v5".
    :param num_envs: number of sub-environments E.
    :param device: where observations, rewards and flags are returned.
    :param seed: sub-environment i is first reset with ``seed + i``.
    :param vectorization: "sync" (one process) or "async" (a worker process per env).
    :param env_kwargs: passed to ``gymnasium.make`` (e.g. ``max_episode_steps``).
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int = 0,
        vectorization: str = "sync",
        **env_kwargs: Any,
    ) -> None:
        if num_envs <= 0:
            raise ConfigError(f"GymVecEnv: num_envs must be positive, got {num_envs}")
        if vectorization not in VECTORIZATION_MODES:
            raise ConfigError(f"GymVecEnv: vectorization must be one of {VECTORIZATION_MODES}, got {vectorization!r}")
        self.env_id = env_id
        self.num_envs = int(num_envs)
        self.device = resolve_device(device)
        self.seed = int(seed)
        self.vectorization = vectorization
        self.vector_env = _make_vec(env_id, self.num_envs, vectorization, env_kwargs)
        try:
            self._read_spaces()
        except ConfigError:
            self.vector_env.close()
            raise
        self._has_reset = False
        self._row_seeds: list[int] | None = None

    def use_row_streams(self, streams: RowStreams) -> None:
        """Seed each block of sub-environments from its own row: sub-environments ``[p E, (p + 1) E)``
        (E = ``num_envs / streams.rows``) are first reset with ``streams.seeds[p] + i``, i < E, as a
        lone `GymVecEnv` of E with seed ``streams.seeds[p]`` would be (the contract of
        `StockTradingVecEnv.use_row_streams`, for a pod group's env). MuJoCo's own generators, not the
        streams, draw the starts."""
        if streams.rows < 1 or self.num_envs % streams.rows:
            raise ConfigError(f"GymVecEnv.use_row_streams: {streams.rows} streams do not divide {self.num_envs} envs")
        if self._has_reset:
            raise ConfigError("GymVecEnv.use_row_streams: the env was reset already; seed its rows before")
        per_row = self.num_envs // streams.rows
        self._row_seeds = [seed + i for seed in streams.seeds for i in range(per_row)]

    def _read_spaces(self) -> None:
        """Observation and action spaces, their sizes and the action rescaling."""
        vector_env = self.vector_env
        self.single_observation_space = _check_box(vector_env.single_observation_space, self.env_id, "observation")
        self.single_action_space = _check_box(vector_env.single_action_space, self.env_id, "action")
        self.obs_dim = int(self.single_observation_space.shape[0])
        self.act_dim = int(self.single_action_space.shape[0])
        low = self.single_action_space.low.astype(np.float64)
        high = self.single_action_space.high.astype(np.float64)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ConfigError(f"GymVecEnv: {self.env_id} has an unbounded action space")
        self._act_low = low
        self._act_half_range = (high - low) / 2.0

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        """Reset every sub-environment; obs float32 [E, obs_dim] on `device`."""
        if seed is None and not self._has_reset:
            seed = self.seed if self._row_seeds is None else self._row_seeds
        obs, _ = self.vector_env.reset(seed=seed, options=options)
        self._has_reset = True
        return self._to_device(obs), {}

    def step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Tensor]]:
        """Step every sub-environment with actions [E, act_dim] in [-1, 1] (clipped)."""
        check_step(self, actions)
        host_actions = actions.detach().to("cpu", torch.float64).numpy()
        scaled = self._act_low + (np.clip(host_actions, -1.0, 1.0) + 1.0) * self._act_half_range
        scaled = scaled.astype(self.single_action_space.dtype, copy=False)
        obs, rewards, terminated, truncated, infos = self.vector_env.step(scaled)
        final_obs = np.array(obs, dtype=np.float32)
        finished = infos.get("_final_obs")  # mask of the sub-environments that just finished
        if finished is not None and finished.any():
            final_obs[finished] = np.stack(infos["final_obs"][finished])
        info = {"final_obs": self._to_device(final_obs)}
        return (
            self._to_device(obs),
            self._to_device(rewards),
            self._to_device(terminated),
            self._to_device(truncated),
            info,
        )

    def close(self) -> None:
        """Close every sub-environment (and async workers)."""
        self.vector_env.close()

    def __enter__(self) -> GymVecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _to_device(self, array: np.ndarray) -> Tensor:
        dtype = DTYPES.get(np.dtype(array.dtype).kind, None)
        tensor = torch.from_numpy(np.array(array, dtype=dtype))
        return tensor.to(self.device)

    def __repr__(self) -> str:
        return (
            f"GymVecEnv({self.env_id!r}, num_envs={self.num_envs}, device={self.device}, "
            f"vectorization={self.vectorization!r})"
        )


def check_step(env: Any, actions: Tensor) -> None:
    """Refuse, in one line, a step of a batched locomotion env (`GymVecEnv`, `WarpMujocoEnv`) before
    its first reset or with actions that are not [num_envs, act_dim]."""
    name = type(env).__name__
    if not env._has_reset:
        raise UserError(f"{name}.step called before reset()")
    if tuple(actions.shape) != (env.num_envs, env.act_dim):
        raise ConfigError(
            f"{name}.step: actions must have shape ({env.num_envs}, {env.act_dim}), got {tuple(actions.shape)}"
        )


VECTORIZATION_MODES = ("sync", "async")
DTYPES = {"f": np.float32, "b": np.bool_}
"""Host dtypes by numpy kind: every float becomes float32, flags stay bool."""


def _make_vec(env_id: str, num_envs: int, vectorization: str, env_kwargs: dict[str, Any]) -> gym.vector.VectorEnv:
    vector_kwargs = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    try:
        return gym.make_vec(
            env_id, num_envs, vectorization_mode=vectorization, vector_kwargs=vector_kwargs, **env_kwargs
        )
    except gym.error.Error as err:
        raise UserError(f"cannot make gymnasium env '{env_id}': {err}") from err


def _check_box(space: gym.Space, env_id: str, what: str) -> gym.spaces.Box:
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        raise ConfigError(f"GymVecEnv: {env_id} needs a flat Box {what} space, got {space!r}")
    if what == "observation":
        return gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), space.shape, np.float32)
    return space
