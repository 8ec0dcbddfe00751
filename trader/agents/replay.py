"""Circular replay buffer for off-policy agents (SAC, TD3), on the env's device.

Storage is preallocated once as contiguous tensors shaped ``[slots, E, ...]``:
every env step writes one ``[E, ...]`` row per field at the write pointer, so an
insert is five slice copies whatever the number of environments ``E``. The next
observation of every transition is stored explicitly (``next_obs``), never inferred
from the following row: with same-step autoreset the row after a finished episode
holds the first observation of a new episode, and the row after the write pointer
holds the oldest data. The worker passes ``info["final_obs"]`` for finished
sub-environments (see `next_observation`).

Sampling is uniform over the stored transitions and happens on the device
(``torch.randint`` with an optional generator), so no per-step host copy is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from market_envs.devices import resolve_device
from trader.errors import ConfigError


@dataclass(frozen=True)
class ReplayBatch:
    """A sampled minibatch; every tensor has leading dimension ``[B]``.

    Observations are raw (not normalised): normalisation belongs to the agent.
    """

    obs: torch.Tensor
    """Observations ``[B, obs_dim]`` float32."""
    actions: torch.Tensor
    """Actions taken ``[B, act_dim]`` float32, in [-1, 1]."""
    rewards: torch.Tensor
    """Rewards ``[B]`` float32."""
    next_obs: torch.Tensor
    """True next observations ``[B, obs_dim]`` (the final one for finished episodes)."""
    terminated: torch.Tensor
    """``[B]`` float32, 1.0 where the episode terminated (no bootstrap), else 0.0.

    Truncation (time limit, end of data) is stored as 0.0: the next state's value
    is still bootstrapped.
    """

    def split(self, parts: int) -> list[ReplayBatch]:
        """Cut into ``parts`` consecutive, disjoint batches of equal size (views, no copy)."""
        size = self.obs.shape[0]
        if parts < 1 or size % parts:
            raise ConfigError(f"ReplayBatch.split: {size} rows do not split into {parts} parts")
        fields = (self.obs, self.actions, self.rewards, self.next_obs, self.terminated)
        chunks = [tensor.split(size // parts) for tensor in fields]
        return [ReplayBatch(*row) for row in zip(*chunks, strict=True)]


def next_observation(
    obs: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    info: dict,
) -> torch.Tensor:
    """The true next observation of each sub-environment after a same-step-autoreset step.

    Finished sub-environments return the first observation of their new episode in
    ``obs``; their real last observation is ``info["final_obs"]``. Rows of
    sub-environments that did not finish come from ``obs`` either way.

    :param obs: ``[E, obs_dim]`` observation returned by ``step``.
    :param terminated: ``[E]`` bool.
    :param truncated: ``[E]`` bool.
    :param info: the step's info dict; must hold ``"final_obs"`` when any env finished.
    :return: ``[E, obs_dim]`` next observations to store in the replay buffer.
    """
    final_obs = info.get("final_obs")
    if final_obs is None:
        # Without final_obs we cannot know a finished env's last observation.
        # This check costs a host sync, so it runs only for envs that omit the key.
        if bool((terminated | truncated).any()):
            raise ConfigError(
                'env step finished a sub-environment but info has no "final_obs"; '
                "same-step autoreset envs must report the last observation there"
            )
        return obs
    done = (terminated | truncated).unsqueeze(-1)
    return torch.where(done, final_obs.to(obs.dtype), obs)


class ReplayBuffer:
    """Circular buffer of transitions from ``E`` parallel sub-environments.

    :param capacity: number of transitions kept; rounded up to a multiple of
        ``num_envs`` (each env step stores ``num_envs`` transitions together). Memory:
        ``capacity * (2 * obs_dim + act_dim + 2) * 4`` bytes on the device.
    :param num_envs: ``E``, the number of rows inserted per `add`.
    :param obs_dim: observation size.
    :param act_dim: action size.
    :param device: where the storage lives (the env's device).
    """

    def __init__(
        self,
        capacity: int,
        num_envs: int,
        obs_dim: int,
        act_dim: int,
        device: torch.device | str = "cpu",
    ) -> None:
        for name, value in (
            ("capacity", capacity),
            ("num_envs", num_envs),
            ("obs_dim", obs_dim),
            ("act_dim", act_dim),
        ):
            if int(value) < 1:
                raise ConfigError(f"ReplayBuffer: {name} must be >= 1, got {value}")
        self.num_envs = int(num_envs)
        self.obs_dim = int(obs_dim)
        self.act_dim = int(act_dim)
        self.device = resolve_device(device)
        self.slots = -(-int(capacity) // self.num_envs)  # ceil division
        self.capacity = self.slots * self.num_envs
        shape = (self.slots, self.num_envs)
        kw = {"dtype": torch.float32, "device": self.device}
        # `empty`, not `zeros`: rows are only ever read after being written, and on the
        # host untouched pages of a large buffer then cost no memory until they fill.
        self._obs = torch.empty(*shape, self.obs_dim, **kw)
        self._actions = torch.empty(*shape, self.act_dim, **kw)
        self._rewards = torch.empty(*shape, **kw)
        self._next_obs = torch.empty(*shape, self.obs_dim, **kw)
        self._terminated = torch.empty(*shape, **kw)
        self._pos = 0  # next slot to write
        self._filled_slots = 0

    def __len__(self) -> int:
        """Number of transitions stored (at most `capacity`)."""
        return self._filled_slots * self.num_envs

    @property
    def full(self) -> bool:
        """True once the buffer has wrapped around at least once."""
        return self._filled_slots == self.slots

    def add(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
    ) -> None:
        """Store one env step: ``[E, ...]`` rows, overwriting the oldest slot when full.

        :param obs: ``[E, obs_dim]`` observations the actions were taken in.
        :param actions: ``[E, act_dim]`` actions.
        :param rewards: ``[E]`` rewards.
        :param next_obs: ``[E, obs_dim]`` true next observations (see `next_observation`).
        :param terminated: ``[E]`` bool or float; truncation must not be included.
        """
        expected = {
            "obs": (obs, (self.num_envs, self.obs_dim)),
            "actions": (actions, (self.num_envs, self.act_dim)),
            "rewards": (rewards, (self.num_envs,)),
            "next_obs": (next_obs, (self.num_envs, self.obs_dim)),
            "terminated": (terminated, (self.num_envs,)),
        }
        for name, (tensor, shape) in expected.items():
            if tuple(tensor.shape) != shape:
                raise ConfigError(f"ReplayBuffer.add: {name} has shape {tuple(tensor.shape)}, expected {shape}")
        i = self._pos
        self._obs[i].copy_(obs)
        self._actions[i].copy_(actions)
        self._rewards[i].copy_(rewards)
        self._next_obs[i].copy_(next_obs)
        self._terminated[i].copy_(terminated)
        self._pos = (i + 1) % self.slots
        self._filled_slots = min(self._filled_slots + 1, self.slots)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> ReplayBatch:
        """Draw ``batch_size`` transitions uniformly with replacement, on the device.

        :param generator: a torch generator on the buffer's device (for reproducible pods).
        """
        if self._filled_slots == 0:
            raise ConfigError("ReplayBuffer.sample: the buffer is empty; add transitions first")
        if batch_size < 1:
            raise ConfigError(f"ReplayBuffer.sample: batch_size must be >= 1, got {batch_size}")
        idx = torch.randint(len(self), (batch_size,), device=self.device, generator=generator)
        # Slots [0, filled) are valid; flattened they are rows [0, filled * E).
        return ReplayBatch(
            obs=self._obs.view(-1, self.obs_dim)[idx],
            actions=self._actions.view(-1, self.act_dim)[idx],
            rewards=self._rewards.view(-1)[idx],
            next_obs=self._next_obs.view(-1, self.obs_dim)[idx],
            terminated=self._terminated.view(-1)[idx],
        )

    def rows(self, index: torch.Tensor) -> ReplayBatch:
        """The transitions at flat positions ``index`` (int64 [B]) of the ``[slots * E]`` layout:
        position ``s * E + e`` is slot ``s``'s transition of sub-environment ``e`` (a pod group draws
        each pod's own positions, `trader.agents.offpolicy_group`)."""
        return ReplayBatch(
            obs=self._obs.view(-1, self.obs_dim)[index],
            actions=self._actions.view(-1, self.act_dim)[index],
            rewards=self._rewards.view(-1)[index],
            next_obs=self._next_obs.view(-1, self.obs_dim)[index],
            terminated=self._terminated.view(-1)[index],
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The stored transitions (the filled slots, as stored) and the write position: what a
        resumed run keeps of its buffer (`load_state_dict` takes it back)."""
        n = self._filled_slots
        return {
            "obs": self._obs[:n],
            "actions": self._actions[:n],
            "rewards": self._rewards[:n],
            "next_obs": self._next_obs[:n],
            "terminated": self._terminated[:n],
            "pos": torch.tensor(self._pos, dtype=torch.int64),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Take back a `state_dict` of a buffer of the same layout (``num_envs``, dims and at
        most this capacity); anything else is a `ConfigError` naming what differs."""
        n = int(state["obs"].shape[0])
        expected = {
            "obs": (n, self.num_envs, self.obs_dim),
            "actions": (n, self.num_envs, self.act_dim),
            "rewards": (n, self.num_envs),
            "next_obs": (n, self.num_envs, self.obs_dim),
            "terminated": (n, self.num_envs),
        }
        for name, shape in expected.items():
            if tuple(state[name].shape) != shape or n > self.slots:
                raise ConfigError(
                    f"ReplayBuffer: saved {name} has shape {tuple(state[name].shape)}, this buffer takes "
                    f"{shape} with at most {self.slots} slots"
                )
        for name, table in (
            ("obs", self._obs),
            ("actions", self._actions),
            ("rewards", self._rewards),
            ("next_obs", self._next_obs),
            ("terminated", self._terminated),
        ):
            table[:n].copy_(state[name])
        self._filled_slots = n
        self._pos = int(state["pos"]) % self.slots

    def transitions(self) -> ReplayBatch:
        """All stored transitions, oldest first (for inspection and tests; copies)."""
        order = torch.arange(self._filled_slots, device=self.device)
        if self.full:
            order = (order + self._pos) % self.slots
        return ReplayBatch(
            obs=self._obs[order].reshape(-1, self.obs_dim),
            actions=self._actions[order].reshape(-1, self.act_dim),
            rewards=self._rewards[order].reshape(-1),
            next_obs=self._next_obs[order].reshape(-1, self.obs_dim),
            terminated=self._terminated[order].reshape(-1),
        )
