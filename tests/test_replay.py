"""Replay buffer: circular storage, explicit next observations, final_obs on autoreset."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from trader.agents.replay import ReplayBuffer, next_observation
from trader.errors import ConfigError


class CountingEnv:
    """Batched env whose observation is ``[episode id, time in episode]``.

    Sub-environment i finishes after ``lengths[i]`` steps (terminated when i is even,
    truncated when odd) and resets in the same step, reporting its last observation
    in ``info["final_obs"]``, as the batched env contract says.
    """

    def __init__(self, lengths: list[int]) -> None:
        self.num_envs = len(lengths)
        self.obs_dim, self.act_dim = 2, 1
        self.device = torch.device("cpu")
        self.lengths = torch.tensor(lengths)
        self.episode = torch.arange(self.num_envs) * 1000
        self.t = torch.zeros(self.num_envs, dtype=torch.long)

    def _obs(self) -> torch.Tensor:
        return torch.stack([self.episode, self.t], dim=-1).float()

    def reset(self, seed=None, options=None):
        self.t.zero_()
        return self._obs(), {}

    def step(self, actions):
        self.t += 1
        final_obs = self._obs()
        done = self.t >= self.lengths
        even = torch.arange(self.num_envs) % 2 == 0
        terminated, truncated = done & even, done & ~even
        self.episode = torch.where(done, self.episode + 1, self.episode)
        self.t = torch.where(done, 0, self.t)
        reward = torch.ones(self.num_envs)
        return self._obs(), reward, terminated, truncated, {"final_obs": final_obs}


def fill(buffer: ReplayBuffer, steps: int, start: int = 0) -> None:
    """Insert rows encoding (step, env): obs = 10*step + env, next_obs = obs + 0.5."""
    envs = torch.arange(buffer.num_envs, dtype=torch.float32)
    for step in range(start, start + steps):
        obs = (10.0 * step + envs).unsqueeze(-1).expand(-1, buffer.obs_dim)
        buffer.add(
            obs,
            torch.full((buffer.num_envs, buffer.act_dim), step / 100.0),
            torch.full((buffer.num_envs,), float(step)),
            obs + 0.5,
            torch.zeros(buffer.num_envs),
        )


def test_wrap_around_keeps_newest_rows_in_order_with_their_own_next_obs():
    buffer = ReplayBuffer(capacity=6, num_envs=2, obs_dim=3, act_dim=1)
    fill(buffer, steps=5)  # 5 steps into 3 slots: steps 0 and 1 overwritten
    assert buffer.full and len(buffer) == 6
    stored = buffer.transitions()
    expected_steps = torch.tensor([2.0, 2.0, 3.0, 3.0, 4.0, 4.0])
    torch.testing.assert_close(stored.rewards, expected_steps)
    torch.testing.assert_close(stored.obs[:, 0], 10.0 * expected_steps + torch.tensor([0, 1] * 3))
    torch.testing.assert_close(stored.next_obs, stored.obs + 0.5)
    # Samples straddling the write pointer still carry their own next observation.
    batch = buffer.sample(500, torch.Generator().manual_seed(0))
    torch.testing.assert_close(batch.next_obs, batch.obs + 0.5)
    torch.testing.assert_close(batch.rewards, (batch.obs[:, 0] // 10))
    assert set(batch.rewards.tolist()) == {2.0, 3.0, 4.0}


def test_sampling_never_returns_unwritten_rows():
    buffer = ReplayBuffer(capacity=100, num_envs=4, obs_dim=2, act_dim=1)
    fill(buffer, steps=3, start=1)
    written = {10.0 * step + env for step in (1, 2, 3) for env in range(4)}
    batch = buffer.sample(1000)
    assert set(batch.obs[:, 0].tolist()) == written  # all 12 rows, nothing else
    assert len(buffer) == 12 and not buffer.full


def test_sampling_is_reproducible_with_a_generator():
    buffer = ReplayBuffer(capacity=64, num_envs=2, obs_dim=2, act_dim=1)
    fill(buffer, steps=20)
    first = buffer.sample(32, torch.Generator().manual_seed(7))
    second = buffer.sample(32, torch.Generator().manual_seed(7))
    torch.testing.assert_close(first.obs, second.obs)


def test_capacity_rounds_up_to_whole_env_steps():
    buffer = ReplayBuffer(capacity=10, num_envs=4, obs_dim=1, act_dim=1)
    assert buffer.capacity == 12 and buffer.slots == 3


def test_final_obs_is_stored_for_finished_envs_never_the_reset_obs():
    env = CountingEnv(lengths=[2, 3, 4])
    buffer = ReplayBuffer(capacity=8 * 3, num_envs=3, obs_dim=2, act_dim=1)
    obs, _ = env.reset()
    for _ in range(11):  # wraps the 8-slot buffer
        new_obs, reward, terminated, truncated, info = env.step(torch.zeros(3, 1))
        next_obs = next_observation(new_obs, terminated, truncated, info)
        buffer.add(obs, torch.zeros(3, 1), reward, next_obs, terminated)
        obs = new_obs
    stored = buffer.transitions()
    # Same episode, one step later: never a jump to the next episode's first obs.
    torch.testing.assert_close(stored.next_obs[:, 0], stored.obs[:, 0])
    torch.testing.assert_close(stored.next_obs[:, 1], stored.obs[:, 1] + 1)
    # Terminated is stored only for env 0 (even); env 1's truncation bootstraps.
    env_index = torch.arange(len(buffer)) % 3
    finished = stored.next_obs[:, 1] == torch.tensor([2.0, 3.0, 4.0])[env_index]
    assert bool(finished.any())
    torch.testing.assert_close(stored.terminated, (finished & (env_index % 2 == 0)).float())


def test_next_observation_needs_final_obs_when_an_env_finished():
    obs = torch.zeros(2, 3)
    done = torch.tensor([False, True])
    with pytest.raises(ConfigError, match="final_obs"):
        next_observation(obs, done, torch.zeros(2, dtype=torch.bool), {})
    not_done = torch.zeros(2, dtype=torch.bool)
    assert next_observation(obs, not_done, not_done, {}) is obs


def test_bad_shapes_and_empty_buffer_raise_clear_errors():
    buffer = ReplayBuffer(capacity=8, num_envs=2, obs_dim=3, act_dim=1)
    with pytest.raises(ConfigError, match="empty"):
        buffer.sample(4)
    with pytest.raises(ConfigError, match="next_obs has shape"):
        obs, wrong_next_obs = torch.zeros(2, 3), torch.zeros(2, 4)
        buffer.add(obs, torch.zeros(2, 1), torch.zeros(2), wrong_next_obs, torch.zeros(2))
    with pytest.raises(ConfigError, match="num_envs"):
        ReplayBuffer(capacity=8, num_envs=0, obs_dim=3, act_dim=1)


@given(
    num_envs=st.integers(1, 4),
    capacity=st.integers(1, 20),
    steps=st.integers(0, 30),
)
def test_transitions_are_the_newest_rows_of_a_reference_list(num_envs, capacity, steps):
    buffer = ReplayBuffer(capacity=capacity, num_envs=num_envs, obs_dim=1, act_dim=1)
    fill(buffer, steps)
    reference = [10.0 * s + e for s in range(steps) for e in range(num_envs)]
    kept = reference[len(reference) - min(len(reference), buffer.capacity) :]
    assert len(buffer) == len(kept)
    if kept:
        assert buffer.transitions().obs[:, 0].tolist() == kept
