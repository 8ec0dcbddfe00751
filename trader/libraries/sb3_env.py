"""`SB3VecEnv`: one of our batched envs behind Stable-Baselines3's `VecEnv` interface.

SB3 steps E sub-environments at once through a `VecEnv`; our batched envs
(`StockTradingVecEnv`, `GymVecEnv`) already are E sub-environments in one object.
This adapter converts at the boundary only: numpy actions [E, act_dim] in, numpy
observations, rewards and dones out, one env object underneath (no copy of the
panel per sub-environment, unlike E `GymStockTradingEnv`s in a `DummyVecEnv`). So
a comparison with SB3 on it isolates the learner: same env code, same rules.

Both sides autoreset in the same step: our ``info["final_obs"]`` becomes SB3's
``terminal_observation`` and a truncation (time limit or end of data) sets
``TimeLimit.truncated``, so SB3 bootstraps from it exactly as our agents do.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvStepReturn


class SB3VecEnv(VecEnv):
    """Stable-Baselines3's `VecEnv` over a batched env with torch tensors in and out.

    :param env: the batched env (``num_envs``, ``single_observation_space``,
        ``single_action_space``, ``reset(seed=...)``, ``step(actions)``).
    """

    def __init__(self, env: Any) -> None:
        super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)
        self.env = env
        self._actions: torch.Tensor | None = None

    def reset(self) -> np.ndarray:
        # SB3 seeds through VecEnv.seed(), which stores one seed per sub-environment;
        # our env takes one seed for all of them (it derives theirs from it).
        seed = self._seeds[0] if self._seeds else None
        obs, _ = self.env.reset(seed=seed)
        self._reset_seeds()
        self._reset_options()
        return obs.cpu().numpy()

    def step_async(self, actions: np.ndarray) -> None:
        actions = np.asarray(actions, dtype=np.float32).reshape(self.num_envs, -1)
        self._actions = torch.as_tensor(actions, device=self.env.device)

    def step_wait(self) -> VecEnvStepReturn:
        obs, reward, terminated, truncated, info = self.env.step(self._actions)
        terminated, truncated = terminated.cpu().numpy(), truncated.cpu().numpy()
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if dones.any():  # SB3's contract: the finished episode's last observation, per env
            final = info["final_obs"].cpu().numpy()
            for i in np.flatnonzero(dones):
                infos[i]["terminal_observation"] = final[i]
                infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        return obs.cpu().numpy(), reward.cpu().numpy().astype(np.float32), dones, infos

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if close is not None:
            close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        # our envs do not render; SB3 asks every sub-environment for its render_mode
        value = None if attr_name == "render_mode" else getattr(self.env, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        setattr(self.env, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        result = getattr(self.env, method_name)(*method_args, **method_kwargs)
        return [result for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]
