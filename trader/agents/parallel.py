"""Learner parallelism: K replicas train on disjoint shards and fuse by averaging.

An epoch starts with every replica synchronised to the agent (replica 0 is the agent
itself), each replica then makes its updates on its own shard of the data, and at
the end of the epoch every floating-point tensor of the replicas' flat state --
network parameters (target networks included), free parameters such as SAC's
log-temperature, *and* optimiser moments (Adam's ``exp_avg``, ``exp_avg_sq``; the
step counts are equal) -- is averaged, and all replicas continue from the mean.
K = 1 is plain training on the agent itself, with no copy and no averaging.

What an epoch is belongs to the algorithm:

- PPO (`LearnerGroup.run_epoch`): one pass over a rollout; its row indices are
  shuffled once and cut into K disjoint shards, and replica k runs its minibatch
  updates on shard k only.
- SAC / TD3 (`trader.agents.offpolicy.OffPolicyRunner`): one runner iteration; each
  gradient update draws one replay sample of K x batch_size rows and cuts it into K
  shards, one per replica; the runner calls `sync_replicas` before the iteration and
  `fuse` after it.

What is not averaged: the observation normaliser. Replicas hold the agent's own
`ObsNormalizer` object (one object, updated only by the worker through the agent),
so they always normalise with the agent's current statistics, and fusion keeps the
agent's statistics exactly. Tensors the replicas hold equal (learning rates, Adam
step counts, update counters) are kept as they are, not recomputed as a mean.
Each extra replica samples with its own generator (seeded from the agent's seed and
its index), so replicas do not draw the same noise.

Replicas share the device and run one after another here; the fusion rule is the
same one a multi-device learner uses, so swapping the loop for devices or streams
changes nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from trader.agents.base import NORMALIZER_PREFIX, Agent, make_generator
from trader.errors import ConfigError

StepFn = Callable[[Agent, Tensor], Tensor]
"""One minibatch update: (replica, row indices) -> metrics as a 1-D tensor."""


def average_states(states: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
    """Element-wise mean of flat states with identical keys; non-float tensors must agree.

    A floating-point tensor that is equal in every state is kept as it is: the mean
    of K equal values is that value, but computed as a sum over K it can lose the
    last bit (K = 3), and a learning rate or a step count must not drift.
    """
    if not states:
        raise ConfigError("average_states: no states to average")
    keys = set(states[0])
    for other in states[1:]:
        if set(other) != keys:
            raise ConfigError(f"average_states: keys differ: {sorted(keys ^ set(other))[:5]}")
    fused: dict[str, Tensor] = {}
    for key in states[0]:
        tensors = [state[key] for state in states]
        if all(torch.equal(t, tensors[0]) for t in tensors[1:]):
            fused[key] = tensors[0].clone()
        elif tensors[0].is_floating_point():
            fused[key] = torch.stack(tensors).mean(dim=0)
        else:
            raise ConfigError(f"average_states: non-float tensor '{key}' differs")
    return fused


def clone_agent(agent: Agent) -> Agent:
    """A new agent of the same class and config holding a copy of ``agent``'s state."""
    replica = type(agent)(agent.obs_dim, agent.act_dim, agent.config, agent.device, agent.seed)
    replica.load_state_dict(agent.state_dict())
    return replica


class LearnerGroup:
    """K learners over one agent (replica 0 is the agent itself).

    :param agent: the agent whose state the group trains.
    :param num_learners: K >= 1.
    """

    def __init__(self, agent: Agent, num_learners: int = 1) -> None:
        if num_learners < 1:
            raise ConfigError(f"num_learners must be >= 1, got {num_learners}")
        self.agent = agent
        self.num_learners = num_learners
        self.replicas: list[Agent] = [agent]

    def run_epoch(self, batch_size: int, num_minibatches: int, step_fn: StepFn) -> Tensor:
        """One epoch over ``batch_size`` rows; returns stacked metrics [updates, m].

        Each replica cuts its shard into ``num_minibatches`` minibatches, so a replica
        makes as many updates per epoch as a single learner would, on 1/K of the rows.
        """
        if batch_size < self.num_learners * num_minibatches:
            raise ConfigError(
                f"batch of {batch_size} rows is too small for {self.num_learners} learners x "
                f"{num_minibatches} minibatches"
            )
        self.sync_replicas()
        order = torch.randperm(batch_size, generator=self.agent.generator, device=self.agent.device)
        metrics = []
        for replica, shard in zip(self.replicas, order.chunk(self.num_learners), strict=True):
            for indices in shard.chunk(num_minibatches):
                metrics.append(step_fn(replica, indices))
        if self.num_learners > 1:
            self.fuse()
        return torch.stack(metrics)

    def fuse(self) -> None:
        """Average the replicas' states and load the mean into all of them.

        The normaliser entries are the agent's (shared by the replicas, never averaged).
        """
        states = [replica.state_dict() for replica in self.replicas]
        fused = average_states(states)
        fused.update({k: v for k, v in states[0].items() if k.startswith(NORMALIZER_PREFIX)})
        for replica in self.replicas:
            replica.load_state_dict(fused)

    def sync_replicas(self) -> None:
        """Start every replica from the agent's current state (created on first use).

        The agent may have changed since the last fusion (a learning-rate schedule, a
        loaded checkpoint), so the extra replicas are re-synchronised at each epoch.
        """
        if self.num_learners == 1:
            return
        while len(self.replicas) < self.num_learners:
            replica = clone_agent(self.agent)
            replica.normalizer = self.agent.normalizer  # one normaliser, the agent's
            replica.generator = make_generator(self.agent.device, _replica_seed(self.agent.seed, len(self.replicas)))
            self.replicas.append(replica)
        state = self.agent.state_dict()
        for replica in self.replicas[1:]:
            replica.load_state_dict(state)


def _replica_seed(seed: int, index: int) -> int:
    """A generator seed for replica ``index`` of an agent seeded with ``seed``."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1, dtype=np.uint64)[0] >> 1)
