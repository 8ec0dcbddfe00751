"""On-policy rollout storage and GAE, preallocated on the env's device.

Storage is shaped ``(num_steps, num_envs, ...)`` and allocated once; a rollout writes
row ``t`` at each env step (a handful of slice copies, whatever ``num_envs`` is) and
GAE loops only over time.

Termination vs truncation, with same-step autoreset (docs/contracts.md): at a step
where a sub-environment finishes, the observation that follows in storage is the first
one of a *new* episode, so its value must not be used. Instead:

- terminated: the return ends there; nothing is bootstrapped.
- truncated (time limit, end of data): the episode was cut, not over, so the target
  bootstraps from the value of the real last observation ``info["final_obs"]``,
  stored as ``final_values``.

In both cases the advantage recursion does not carry across the episode boundary::

    next_value[t] = final_values[t] if done[t] else values[t + 1]   (values[T] = last_value)
    delta[t]      = r[t] + gamma * next_value[t] * (1 - terminated[t]) - values[t]
    A[t]          = delta[t] + gamma * lambda * (1 - done[t]) * A[t + 1]
    returns[t]    = A[t] + values[t]

with ``done = terminated | truncated``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from market_envs.devices import resolve_device
from trader.errors import ConfigError


def compute_gae(
    rewards: Tensor,
    values: Tensor,
    last_value: Tensor,
    final_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimates and returns, both [T, E] (see module docstring).

    :param rewards: [T, E] rewards.
    :param values: [T, E] value of the observation each action was taken in.
    :param last_value: [E] value of the observation after the last step.
    :param final_values: [T, E] value of ``info["final_obs"]``; read only where done.
    :param terminated: [T, E] bool.
    :param truncated: [T, E] bool.
    """
    num_steps = rewards.shape[0]
    not_terminated = (~terminated).to(rewards.dtype)
    not_done = (~(terminated | truncated)).to(rewards.dtype)
    following = torch.cat([values[1:], last_value.unsqueeze(0)], dim=0)
    next_values = torch.where(terminated | truncated, final_values, following)
    deltas = rewards + gamma * next_values * not_terminated - values
    advantages = torch.zeros_like(rewards)
    carry = torch.zeros_like(last_value)
    for t in reversed(range(num_steps)):
        carry = deltas[t] + gamma * gae_lambda * not_done[t] * carry
        advantages[t] = carry
    return advantages, advantages + values


@dataclass(frozen=True)
class RolloutBatch:
    """A rollout flattened to [B = T * E] rows: what ``PPOAgent.update`` consumes."""

    obs: Tensor
    """[B, obs_dim] raw observations."""
    actions: Tensor
    """[B, act_dim] sampled (unclipped) actions."""
    logprobs: Tensor
    """[B] log-probabilities of the actions under the collecting policy."""
    values: Tensor
    """[B] value estimates at collection time."""
    advantages: Tensor
    """[B] GAE advantages (not normalised)."""
    returns: Tensor
    """[B] value targets (advantages + values)."""

    @property
    def size(self) -> int:
        """Number of rows B."""
        return int(self.obs.shape[0])


class RolloutStorage:
    """Preallocated (num_steps, num_envs, ...) tensors for one on-policy rollout.

    :param num_steps: steps per sub-environment per rollout (T).
    :param num_envs: sub-environments (E).
    :param obs_dim: observation size.
    :param act_dim: action size.
    :param device: the env's device.
    """

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_dim: int,
        act_dim: int,
        device: torch.device | str = "cpu",
    ) -> None:
        if num_steps <= 0 or num_envs <= 0:
            raise ConfigError(f"RolloutStorage: num_steps and num_envs must be positive, got {num_steps}, {num_envs}")
        self.num_steps = num_steps
        self.num_envs = num_envs
        self.device = resolve_device(device)
        shape = (num_steps, num_envs)

        def zeros(*extra: int, dtype: torch.dtype = torch.float32) -> Tensor:
            return torch.zeros(*shape, *extra, dtype=dtype, device=self.device)

        self.obs = zeros(obs_dim)
        self.actions = zeros(act_dim)
        self.logprobs = zeros()
        self.values = zeros()
        self.rewards = zeros()
        self.final_values = zeros()
        self.terminated = zeros(dtype=torch.bool)
        self.truncated = zeros(dtype=torch.bool)
        self.advantages = zeros()
        self.returns = zeros()

    def insert(
        self,
        step: int,
        obs: Tensor,
        actions: Tensor,
        logprobs: Tensor,
        values: Tensor,
        rewards: Tensor,
        terminated: Tensor,
        truncated: Tensor,
        final_values: Tensor,
    ) -> None:
        """Write row ``step`` (each argument has leading dimension E)."""
        self.obs[step] = obs
        self.actions[step] = actions
        self.logprobs[step] = logprobs
        self.values[step] = values
        self.rewards[step] = rewards
        self.terminated[step] = terminated
        self.truncated[step] = truncated
        self.final_values[step] = final_values

    def compute_returns(self, last_value: Tensor, gamma: float, gae_lambda: float) -> None:
        """Fill ``advantages`` and ``returns`` with GAE."""
        self.advantages, self.returns = compute_gae(
            self.rewards,
            self.values,
            last_value,
            self.final_values,
            self.terminated,
            self.truncated,
            gamma,
            gae_lambda,
        )

    def batch(self) -> RolloutBatch:
        """The rollout as [T * E] rows (views, no copy)."""
        return RolloutBatch(
            obs=self.obs.reshape(-1, self.obs.shape[-1]),
            actions=self.actions.reshape(-1, self.actions.shape[-1]),
            logprobs=self.logprobs.reshape(-1),
            values=self.values.reshape(-1),
            advantages=self.advantages.reshape(-1),
            returns=self.returns.reshape(-1),
        )
