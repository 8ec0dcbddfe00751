"""GymVecEnv: the batched contract on gymnasium envs, same-step autoreset, rescaling, seeding."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from market_envs.gym_vec import GymVecEnv
from trader.errors import ConfigError, UserError


class _CounterEnv(gym.Env):
    """obs = [steps in episode, episodes started]; terminates after `horizon` steps.

    The action received (after rescaling) is kept in `last_action`.
    """

    def __init__(self, horizon: int = 3) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), dtype=np.float64)
        self.action_space = gym.spaces.Box(np.array([0.0, -4.0], np.float32), np.array([10.0, 4.0], np.float32))
        self.horizon = horizon
        self.episodes = -1
        self.t = 0
        self.last_action: np.ndarray | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        super().reset(seed=seed)
        self.episodes += 1
        self.t = 0
        return np.array([self.t, self.episodes], dtype=np.float64), {}

    def step(self, action: np.ndarray) -> Any:
        self.last_action = np.array(action)
        self.t += 1
        obs = np.array([self.t, self.episodes], dtype=np.float64)
        return obs, float(self.t), self.t >= self.horizon, False, {}


gym.register(id="PodracerCounter-v0", entry_point=_CounterEnv)


def check_batched_env(env: Any, steps: int = 5) -> None:
    """Shapes, dtypes and devices of the batched contract (docs/contracts.md)."""
    obs, info = env.reset()
    assert obs.shape == (env.num_envs, env.obs_dim) and obs.dtype == torch.float32
    assert obs.device == env.device and isinstance(info, dict)
    assert env.single_action_space.shape == (env.act_dim,)
    assert env.single_observation_space.shape == (env.obs_dim,)
    for _ in range(steps):
        actions = torch.rand(env.num_envs, env.act_dim, device=env.device) * 2 - 1
        obs, reward, terminated, truncated, info = env.step(actions)
        assert obs.shape == (env.num_envs, env.obs_dim) and obs.dtype == torch.float32
        assert reward.shape == (env.num_envs,) and reward.dtype == torch.float32
        assert terminated.dtype == torch.bool and truncated.dtype == torch.bool
        assert terminated.shape == truncated.shape == (env.num_envs,)
        for value in info.values():
            assert value.shape[0] == env.num_envs and value.device == env.device
        finished = terminated | truncated
        assert torch.equal(info["final_obs"][~finished], obs[~finished])


def test_pendulum_meets_contract() -> None:
    with GymVecEnv("Pendulum-v1", num_envs=3, seed=1) as env:
        assert (env.obs_dim, env.act_dim) == (3, 1)
        check_batched_env(env)


def test_same_step_autoreset_on_termination() -> None:
    env = GymVecEnv("PodracerCounter-v0", num_envs=2, horizon=2)
    obs, _ = env.reset()
    torch.testing.assert_close(obs, torch.tensor([[0.0, 0.0], [0.0, 0.0]]))
    zero = torch.zeros(2, 2)
    obs, reward, terminated, truncated, info = env.step(zero)
    assert not terminated.any() and not truncated.any()
    assert torch.equal(info["final_obs"], obs)
    obs, reward, terminated, truncated, info = env.step(zero)
    assert terminated.all() and not truncated.any()
    torch.testing.assert_close(reward, torch.tensor([2.0, 2.0]))
    # the finished episode's last observation, and the new episode's first one
    torch.testing.assert_close(info["final_obs"], torch.tensor([[2.0, 0.0], [2.0, 0.0]]))
    torch.testing.assert_close(obs, torch.tensor([[0.0, 1.0], [0.0, 1.0]]))


def test_truncation_is_kept_apart_from_termination() -> None:
    env = GymVecEnv("Pendulum-v1", num_envs=2, seed=0, max_episode_steps=4)
    obs, _ = env.reset()
    actions = torch.zeros(2, 1)
    for step in range(1, 5):
        previous = obs
        obs, _, terminated, truncated, info = env.step(actions)
        assert not terminated.any()
        assert bool(truncated.all()) == (step == 4)
    assert not torch.equal(info["final_obs"], obs)
    assert not torch.equal(info["final_obs"], previous)


def test_actions_are_rescaled_and_clipped_to_the_box() -> None:
    env = GymVecEnv("PodracerCounter-v0", num_envs=3)
    env.reset()
    env.step(torch.tensor([[-1.0, 1.0], [0.0, 0.0], [5.0, -7.0]]))
    received = np.stack([sub.unwrapped.last_action for sub in env.vector_env.envs])
    np.testing.assert_allclose(received, [[0.0, 4.0], [5.0, 0.0], [10.0, -4.0]])


def test_seeding_is_reproducible() -> None:
    def trajectory(seed: int) -> torch.Tensor:
        env = GymVecEnv("Pendulum-v1", num_envs=2, seed=seed)
        obs, _ = env.reset()
        rows = [obs]
        gen = torch.Generator().manual_seed(0)
        for _ in range(3):
            obs, *_ = env.step(torch.rand(2, 1, generator=gen) * 2 - 1)
            rows.append(obs)
        return torch.stack(rows)

    assert torch.equal(trajectory(3), trajectory(3))
    assert not torch.equal(trajectory(3), trajectory(4))


def test_bad_input_raises_clear_errors() -> None:
    with pytest.raises(UserError, match="NoSuchEnv"):
        GymVecEnv("NoSuchEnv-v0", num_envs=1)
    with pytest.raises(ConfigError, match="num_envs"):
        GymVecEnv("Pendulum-v1", num_envs=0)
    with pytest.raises(ConfigError, match="Box action space"):
        GymVecEnv("CartPole-v1", num_envs=1)
    env = GymVecEnv("Pendulum-v1", num_envs=2)
    with pytest.raises(UserError, match="before reset"):
        env.step(torch.zeros(2, 1))
    env.reset()
    with pytest.raises(ConfigError, match="shape"):
        env.step(torch.zeros(3, 1))


def _reference_rollout(env_id: str, num_envs: int, seed: int, actions: np.ndarray, **kwargs: Any):
    """Plain gymnasium envs stepped by hand with same-step autoreset (the reference)."""
    envs = [gym.make(env_id, **kwargs) for _ in range(num_envs)]
    obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)])
    rows = []
    for step_actions in actions:
        step = [env.step(action) for env, action in zip(envs, step_actions)]
        final_obs = np.stack([s[0] for s in step])
        terminated = np.array([s[2] for s in step])
        truncated = np.array([s[3] for s in step])
        obs = np.stack(
            [env.reset()[0] if te or tr else s[0] for env, s, te, tr in zip(envs, step, terminated, truncated)]
        )
        rows.append((obs, np.array([s[1] for s in step]), terminated, truncated, final_obs))
    return rows


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_ant_matches_gymnasium_step_for_step(vectorization: str) -> None:
    """Ant-v5 through GymVecEnv equals gymnasium's envs stepped by hand, across resets."""
    num_envs, seed, horizon = 3, 7, 12
    actions = np.random.default_rng(0).uniform(-1, 1, (2 * horizon + 3, num_envs, 8)).astype(np.float32)
    expected = _reference_rollout("Ant-v5", num_envs, seed, actions, max_episode_steps=horizon)
    with GymVecEnv("Ant-v5", num_envs, seed=seed, vectorization=vectorization, max_episode_steps=horizon) as env:
        env.reset()
        ends = 0
        for step_actions, (obs, reward, terminated, truncated, final_obs) in zip(actions, expected):
            got = env.step(torch.as_tensor(step_actions, dtype=torch.float32))
            np.testing.assert_allclose(got[0].numpy(), obs, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(got[1].numpy(), reward, rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(got[2].numpy(), terminated)
            np.testing.assert_array_equal(got[3].numpy(), truncated)
            np.testing.assert_allclose(got[4]["final_obs"].numpy(), final_obs, rtol=1e-6, atol=1e-6)
            ends += int((terminated | truncated).sum())
    assert ends >= 2 * num_envs  # the check crossed episode boundaries


def test_ant_meets_contract_and_async_equals_sync() -> None:
    def trajectory(vectorization: str) -> list[torch.Tensor]:
        with GymVecEnv("Ant-v5", 2, seed=3, vectorization=vectorization) as env:
            assert (env.obs_dim, env.act_dim) == (105, 8)
            torch.manual_seed(0)  # check_batched_env draws its actions from the global RNG
            check_batched_env(env, steps=2)
            gen = torch.Generator().manual_seed(1)
            return [env.step(torch.rand(2, 8, generator=gen) * 2 - 1)[0] for _ in range(5)]

    for sync_obs, async_obs in zip(trajectory("sync"), trajectory("async")):
        torch.testing.assert_close(sync_obs, async_obs)


def test_unknown_vectorization_is_refused() -> None:
    with pytest.raises(ConfigError, match="vectorization"):
        GymVecEnv("Pendulum-v1", 1, vectorization="threads")
