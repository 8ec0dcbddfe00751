"""Gymnasium environments (Pendulum, Ant, Humanoid, ...) behind the batched env contract.

`GymVecEnv` holds E independent gymnasium environments and speaks the contract of
docs/contracts.md: tensors in and out on `device`, actions in [-1, 1] rescaled to the
env's `Box`, `terminated` and `truncated` kept apart, and gymnasium's **same-step**
autoreset: a sub-environment that finishes is reset inside the same `step`, its new
first observation is returned in `obs`, and its last observation is in
`info["final_obs"]` (rows of unfinished sub-environments equal `obs`).

MuJoCo and classic-control envs run on the host, so stepping loops over the E
environments in Python here (unavoidable for these envs); the host<->device copy
happens once per step for the whole batch: actions come down in one copy, and
observations, rewards, flags and final observations go up in one copy each.

Seeding: sub-environment i is reset with ``seed + i`` at the first reset (or at any
reset given a seed); later autoresets continue each env's own RNG, so a run is a
pure function of the seed.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from market_envs.errors import ConfigError, UserError


class GymVecEnv:
    """E gymnasium environments as one batched env on `device`.

    :param env_id: a registered gymnasium id, e.g. "Pendulum-v1", "Ant-v5".
    :param num_envs: number of sub-environments E.
    :param device: where observations, rewards and flags are returned.
    :param seed: sub-environment i is first reset with ``seed + i``.
    :param env_kwargs: passed to ``gymnasium.make`` (e.g. ``max_episode_steps``).
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int = 0,
        **env_kwargs: Any,
    ) -> None:
        if num_envs <= 0:
            raise ConfigError(f"GymVecEnv: num_envs must be positive, got {num_envs}")
        self.env_id = env_id
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.seed = int(seed)
        self.envs = [_make(env_id, env_kwargs) for _ in range(self.num_envs)]
        first = self.envs[0]
        self.single_observation_space = _check_box(first.observation_space, env_id, "observation")
        self.single_action_space = _check_box(first.action_space, env_id, "action")
        self.obs_dim = int(self.single_observation_space.shape[0])
        self.act_dim = int(self.single_action_space.shape[0])
        low = self.single_action_space.low.astype(np.float64)
        high = self.single_action_space.high.astype(np.float64)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ConfigError(f"GymVecEnv: {env_id} has an unbounded action space")
        self._act_low = low
        self._act_half_range = (high - low) / 2.0
        self._obs = np.zeros((self.num_envs, self.obs_dim), dtype=np.float32)
        self._final_obs = np.zeros_like(self._obs)
        self._rewards = np.zeros(self.num_envs, dtype=np.float32)
        self._terminated = np.zeros(self.num_envs, dtype=np.bool_)
        self._truncated = np.zeros(self.num_envs, dtype=np.bool_)
        self._has_reset = False

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Reset every sub-environment; obs float32 [E, obs_dim] on `device`."""
        if seed is None and not self._has_reset:
            seed = self.seed
        for index, env in enumerate(self.envs):
            env_seed = None if seed is None else seed + index
            self._obs[index], _ = env.reset(seed=env_seed, options=options)
        self._has_reset = True
        return self._to_device(self._obs), {}

    def step(
        self, actions: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Tensor]]:
        """Step every sub-environment with actions [E, act_dim] in [-1, 1] (clipped)."""
        if not self._has_reset:
            raise UserError("GymVecEnv.step called before reset()")
        if tuple(actions.shape) != (self.num_envs, self.act_dim):
            raise ConfigError(
                f"GymVecEnv.step: actions must have shape ({self.num_envs}, {self.act_dim}), "
                f"got {tuple(actions.shape)}"
            )
        host_actions = actions.detach().to("cpu", torch.float64).numpy()
        scaled = self._act_low + (np.clip(host_actions, -1.0, 1.0) + 1.0) * self._act_half_range
        scaled = scaled.astype(self.single_action_space.dtype, copy=False)
        for index, env in enumerate(self.envs):
            obs, reward, terminated, truncated, _ = env.step(scaled[index])
            self._rewards[index] = reward
            self._terminated[index] = terminated
            self._truncated[index] = truncated
            self._final_obs[index] = obs
            if terminated or truncated:
                obs, _ = env.reset()
            self._obs[index] = obs
        info = {"final_obs": self._to_device(self._final_obs)}
        return (
            self._to_device(self._obs),
            self._to_device(self._rewards),
            self._to_device(self._terminated),
            self._to_device(self._truncated),
            info,
        )

    def close(self) -> None:
        """Close every sub-environment."""
        for env in self.envs:
            env.close()

    def __enter__(self) -> GymVecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _to_device(self, array: np.ndarray) -> Tensor:
        return torch.from_numpy(array.copy()).to(self.device)

    def __repr__(self) -> str:
        return f"GymVecEnv({self.env_id!r}, num_envs={self.num_envs}, device={self.device})"


def _make(env_id: str, env_kwargs: dict[str, Any]) -> gym.Env:
    try:
        return gym.make(env_id, **env_kwargs)
    except gym.error.Error as err:
        raise UserError(f"cannot make gymnasium env '{env_id}': {err}") from err


def _check_box(space: gym.Space, env_id: str, what: str) -> gym.spaces.Box:
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        raise ConfigError(
            f"GymVecEnv: {env_id} needs a flat Box {what} space, got {space!r}"
        )
    if what == "observation":
        return gym.spaces.Box(
            space.low.astype(np.float32), space.high.astype(np.float32), space.shape, np.float32
        )
    return space
