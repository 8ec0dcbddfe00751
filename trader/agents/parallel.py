"""Learner parallelism: K replicas train on disjoint shards and fuse by averaging.

Each epoch, the batch's row indices are shuffled once and cut into K disjoint
shards; replica k runs its minibatch updates on shard k only. At the end of the
epoch every floating-point tensor of the replicas' flat state -- network parameters
*and* optimiser moments (Adam's ``exp_avg``, ``exp_avg_sq``; the step counts are
equal) -- is averaged, and all replicas continue from the mean. K = 1 is plain
minibatch training on the agent itself, with no copy and no averaging.

Replicas share the device and run one after another here; the fusion rule is the
same one a multi-device learner uses, so swapping the loop for devices or streams
changes nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

from trader.agents.base import Agent
from trader.errors import ConfigError

StepFn = Callable[[Agent, Tensor], Tensor]
"""One minibatch update: (replica, row indices) -> metrics as a 1-D tensor."""


def average_states(states: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
    """Element-wise mean of flat states with identical keys; non-float tensors must agree."""
    if not states:
        raise ConfigError("average_states: no states to average")
    keys = set(states[0])
    for other in states[1:]:
        if set(other) != keys:
            raise ConfigError(f"average_states: keys differ: {sorted(keys ^ set(other))[:5]}")
    fused: dict[str, Tensor] = {}
    for key in states[0]:
        tensors = [state[key] for state in states]
        if tensors[0].is_floating_point():
            fused[key] = torch.stack(tensors).mean(dim=0)
        else:
            if any(not torch.equal(t, tensors[0]) for t in tensors[1:]):
                raise ConfigError(f"average_states: non-float tensor '{key}' differs")
            fused[key] = tensors[0].clone()
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
        self._sync_replicas()
        order = torch.randperm(
            batch_size, generator=self.agent.generator, device=self.agent.device
        )
        metrics = []
        for replica, shard in zip(self.replicas, order.chunk(self.num_learners), strict=True):
            for indices in shard.chunk(num_minibatches):
                metrics.append(step_fn(replica, indices))
        if self.num_learners > 1:
            self.fuse()
        return torch.stack(metrics)

    def fuse(self) -> None:
        """Average the replicas' states and load the mean into all of them."""
        fused = average_states([replica.state_dict() for replica in self.replicas])
        for replica in self.replicas:
            replica.load_state_dict(fused)

    def _sync_replicas(self) -> None:
        """Start every replica from the agent's current state (created on first use).

        The agent may have changed since the last fusion (normaliser update, a loaded
        checkpoint), so the extra replicas are re-synchronised at each epoch.
        """
        if self.num_learners == 1:
            return
        if len(self.replicas) < self.num_learners:
            self.replicas.extend(
                clone_agent(self.agent) for _ in range(self.num_learners - len(self.replicas))
            )
            return
        state = self.agent.state_dict()
        for replica in self.replicas[1:]:
            replica.load_state_dict(state)
