"""SAC and TD3 pod groups: P off-policy pods of one shape trained side by side as one program (issue 77).

The pattern of `trader.agents.ppo_group`: each pod is a `SACAgent` or `TD3Agent` as
`trader.train` builds it (its own seed, config and run directory), where a checkpoint, the
evaluator and the backtest read it. While the group trains, the pods' state lives stacked in
the runner, row p being pod p:

- the actor as `trader.agents.population.stack_sequentials` of the pods' own MLPs (TD3's target
  actor too); the twin critics and their targets as `StackedTwinQ`, weights [P, 2, in, out]
  (the lone `TwinQ`'s K axis behind the pod axis), one batched product a layer for the 2 P nets;
- one `RowAdam` per parameter group of the lone Adam (actor, critics, SAC's temperature): each
  row its own rates and steps, and TD3's actor its own step count, as the lone Adam keeps it;
- Polyak averaging with each row's tau (rows that do not update their targets now get weight 0);
- one replay buffer of P x E columns: pod p's transitions are columns [p E, (p + 1) E) of each
  slot, and pod p samples positions of its own columns only;
- the normaliser statistics as [P, D] rows, each updated with its pod's E rows every step (the
  lone runner's per-step update, one tensor program for the P pods), written back into the
  agents' `ObsNormalizer`;
- every random draw (the random actions before ``learning_starts``, exploration and target
  noise, SAC's samples, replay positions) from `market_envs.streams.RowStreams`, one stream per
  pod, the env's random starts from the env's row streams: what a pod draws never depends on the
  others or on P. A draw that no row needs this step still takes its counter (`_skip_draw`), so
  that the rows' sequences of draws stay in step whatever the other rows do.

Per row (`SAC_ROW_FIELDS`, `TD3_ROW_FIELDS`): learning rates, discount, tau, reward scale, gradient clipping, SAC's
temperature (its initial value, whether it learns, its target entropy, the log-std bounds) and
TD3's policy delay, noises and pre-activation penalty. Shared (`group_key`): the network shape,
batch size, replay size, ``learning_starts``, ``updates_per_step`` and ``iteration_steps``
(every row makes the same updates at the same steps, so the draws stay in step) and the switches
(``normalize_obs``, ``num_learners`` = 1).

What it costs: a row whose TD3 actor waits for its delay while another row's updates still runs
the actor's forward and backward, masked to zero (Adam skips the row); a row that does not learn
its temperature computes the temperature loss times zero. On the CPU an update runs in passes of
`POD_PASS` pods (the per-pod cost of one pass of 16 market pods was 1.3x a lone pod's update);
the draws are made for every pod first, so a pod's numbers do not depend on its pass. Flat MLPs
only (``network="mlp"``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from market_envs.streams import RowStreams
from trader.agents.networks import weights_and_biases
from trader.agents.offpolicy import OffPolicyAgent, TwinQ
from trader.agents.population import (
    RowAdam,
    aligned_bmm,
    aligned_rows,
    check_pods,
    config_key,
    clip_row_grad_norms,
    row_state,
    stack_sequentials,
)
from trader.agents.ppo_group import agent_stream_seeds
from trader.agents.replay import ReplayBatch, ReplayBuffer, next_observation
from trader.agents.sac import SACAgent, SACConfig
from trader.agents.td3 import TD3Agent
from trader.errors import ConfigError

_SHARED_ROW_FIELDS = ("actor_lr", "critic_lr", "gamma", "tau", "reward_scale", "max_grad_norm", "critic_init_scale")
SAC_ROW_FIELDS = (
    *_SHARED_ROW_FIELDS,
    *("alpha_lr", "init_alpha", "autotune_alpha", "target_entropy", "log_std_min", "log_std_max"),
)
"""SAC hyperparameters that may differ between the pods of one group."""
TD3_ROW_FIELDS = (
    *_SHARED_ROW_FIELDS,
    *("policy_delay", "policy_noise", "noise_clip", "exploration_noise", "preactivation_penalty"),
)
"""TD3 hyperparameters that may differ between the pods of one group."""

POD_PASS = 4
"""Pods a forward and backward pass of a CPU update holds (`OffPolicyGroupRunner._passes`)."""

_LOG_2 = math.log(2.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def softplus(x: Tensor) -> Tensor:
    """``log(1 + exp(x))`` as ``relu(x) + log1p(exp(-|x|))``, elementwise, whatever the tensor's size.

    Not ``F.softplus``: on the CPU its vectorised kernel and the scalar loop that finishes a
    tensor's last elements (past a multiple of twice the vector width) round differently, so an
    element's value depends on where it falls, hence on P (at 24 elements, pod 0 of a group of one,
    5 of 24 values differed from pod 0 of a group of four). exp, log1p, abs and relu agree on both paths.
    """
    return torch.relu(x) + torch.log1p(torch.exp(-x.abs()))


def ungroupable(config: Any) -> str | None:
    """Why a SAC or TD3 config cannot train in a group, in one line; None when it can."""
    name = "SAC" if isinstance(config, SACConfig) else "TD3"
    if config.network != "mlp":
        return f"a {name} group trains network='mlp' pods; network={config.network!r} is not stacked yet"
    if config.num_learners != 1:
        return f"a {name} group trains num_learners=1 pods, got {config.num_learners}"
    return None


def group_key(config: Any, row_fields: Sequence[str]) -> tuple:
    """What pods must share to train in one group: every config field but ``row_fields``."""
    return config_key(config, row_fields)


class StackedTwinQ(nn.Module):
    """P pods' `TwinQ`s (K nets each) as one module: layer l holds ``weights.l`` [P, K, in, out] and
    ``biases.l`` [P, K, 1, out] (row p is pod p's `TwinQ` state under its own names); `forward`
    gives [P, K, B]. As in `trader.agents.population.StackedLinear`, a layer of width 1 (the output)
    is a multiply-sum, not a batched product, and the products are `population.aligned_bmm` (each
    net's rows on aligned boundaries, forward and backward): the CPU kernels round otherwise."""

    def __init__(self, weights: Sequence[Tensor], biases: Sequence[Tensor]) -> None:
        super().__init__()
        self.weights = nn.ParameterList([nn.Parameter(w.detach().clone().contiguous()) for w in weights])
        self.biases = nn.ParameterList([nn.Parameter(b.detach().clone().contiguous()) for b in biases])

    @classmethod
    def from_twins(cls, twins: Sequence[TwinQ]) -> StackedTwinQ:
        layers = range(len(twins[0].weights))
        return cls(
            [torch.stack([t.weights[i].detach() for t in twins]) for i in layers],
            [torch.stack([t.biases[i].detach() for t in twins]) for i in layers],
        )

    def forward(self, obs: Tensor, actions: Tensor, params: Sequence[Tensor] | None = None) -> Tensor:
        """Q-values [P, K, B] of ``obs`` [P, B, obs_dim] and ``actions`` [P, B, act_dim] (``params``:
        replacement parameters in `parameters()` order, as `TwinQ.forward` takes them)."""
        weights, biases = weights_and_biases(self.weights, self.biases, params)
        pods, nets = weights[0].shape[:2]
        x = torch.cat([obs, actions], dim=-1)
        h = x.unsqueeze(1).expand(pods, nets, *x.shape[1:]).reshape(pods * nets, *x.shape[1:])
        for layer, (weight, bias) in enumerate(zip(weights, biases, strict=True)):
            weight = weight.reshape(pods * nets, *weight.shape[2:])
            bias = bias.reshape(pods * nets, *bias.shape[2:])
            h = aligned_rows(torch.relu(h) if layer else h)  # the multiply-sum's too
            if weight.shape[-1] == 1:
                h = (h * weight.transpose(1, 2)).sum(dim=-1, keepdim=True) + bias
            else:
                h = aligned_bmm(h, weight) + bias
        return h.reshape(pods, nets, -1)

    def detached_params(self) -> list[Tensor]:
        return [p.detach() for p in self.parameters()]


class RowNormalizers:
    """The pods' `ObsNormalizer` statistics as rows [P, D] (float64), each merged with its own pod's
    E observations per update by `ObsNormalizer.update`'s formula; `normalize` casts them as it does.

    :param normalizers: the pods' normalisers (flat: no column groups).
    :param rows_per_pod: E.
    """

    def __init__(self, normalizers: Sequence[Any], rows_per_pod: int) -> None:
        first = normalizers[0]
        self.enabled, self.clip, self.eps = first.enabled, first.clip, first.eps
        self.rows_per_pod = rows_per_pod
        self.mean = torch.stack([n.mean for n in normalizers])
        self.var = torch.stack([n.var for n in normalizers])
        self.count = torch.stack([n.count for n in normalizers])
        self._rows()

    def _rows(self) -> None:
        self.mean32 = self.mean.to(torch.float32).unsqueeze(1)
        self.std32 = torch.sqrt(self.var + self.eps).to(torch.float32).unsqueeze(1)

    @torch.no_grad()
    def update(self, obs: Tensor) -> None:
        """Merge observations [P E, D] (pod p's E rows into row p)."""
        if not self.enabled:
            return
        rows = obs.reshape(self.mean.shape[0], self.rows_per_pod, -1).to(torch.float64)
        n_batch = self.rows_per_pod
        batch_mean = rows.mean(dim=1)
        batch_m2 = ((rows - batch_mean.unsqueeze(1)) ** 2).sum(dim=1)
        count = self.count.unsqueeze(1)
        total = count + n_batch
        delta = batch_mean - self.mean
        merged_m2 = self.var * count + batch_m2 + delta**2 * count * n_batch / total
        self.mean = self.mean + delta * n_batch / total
        self.var = merged_m2 / total
        self.count = total.squeeze(1)
        self._rows()

    def normalize(self, obs: Tensor) -> Tensor:
        """Observations [P, B, D] normalised by each row's statistics."""
        if not self.enabled:
            return obs
        return ((obs - self.mean32) / self.std32).clamp(-self.clip, self.clip)

    def write(self, normalizers: Sequence[Any]) -> None:
        for row, normalizer in enumerate(normalizers):
            normalizer.load_state_dict({"mean": self.mean[row], "var": self.var[row], "count": self.count[row]})


class OffPolicyGroupRunner:
    """P off-policy pods of one algorithm trained as one program (see the module docstring);
    `SACGroupRunner` and `TD3GroupRunner` add the algorithm's networks and update.

    :param agents: the pods, built as `trader.train` builds a lone pod (state loaded already).
    :param env: a market env of P x E rows; its row streams are set here from the pods' seeds,
        and it is reset.
    """

    agent_cls: type[OffPolicyAgent] = OffPolicyAgent
    row_fields: tuple[str, ...] = ()
    metric_names: tuple[str, ...] = ()

    def __init__(self, agents: Sequence[OffPolicyAgent], env: Any) -> None:
        self.check_group(agents)
        self.agents = list(agents)
        self.env = env
        pods = len(self.agents)
        first = self.agents[0]
        if env.num_envs % pods or env.obs_dim != first.obs_dim or env.act_dim != first.act_dim:
            raise ConfigError(f"a group of {pods} pods needs an env of P x E rows of its dims, got {env.num_envs}")
        self.pods, self.rows_per_pod = pods, env.num_envs // pods
        self.device = first.device
        self.config = first.config
        self.obs_dim, self.act_dim = first.obs_dim, first.act_dim
        seeds = [agent.seed for agent in self.agents]
        env.use_row_streams(RowStreams(seeds, env.device))
        self.streams = RowStreams(agent_stream_seeds(seeds), self.device)
        self._hyperparameters()
        self.read_agents()
        slots = -(-self.config.buffer_size // self.rows_per_pod)
        self.buffer = ReplayBuffer(slots * env.num_envs, env.num_envs, self.obs_dim, self.act_dim, self.device)
        self._column = (torch.arange(pods, device=self.device) * self.rows_per_pod).unsqueeze(1)
        self.env_steps = 0
        """Transitions each pod collected so far."""
        self._update_credit = 0.0
        self.obs, _ = env.reset()
        self.normalizers.update(self.obs)
        self._episode_return = torch.zeros(env.num_envs, device=self.device)
        self._finished = torch.zeros(2, pods, device=self.device)  # finished returns' sum, episodes
        self._metric_sum = torch.zeros(pods, len(self.metric_names), device=self.device)

    # -- the group
    @classmethod
    def check_group(cls, agents: Sequence[OffPolicyAgent]) -> None:
        """Refuse, in one line, pods that cannot train as one program (`population.check_pods`)."""
        check_pods(agents, cls.agent_cls, cls.row_fields, ungroupable)

    def _rows(self, name: str, missing: float = math.inf) -> Tensor:
        """A config field of every pod as a float32 tensor [P] (None as ``missing``)."""
        values = [getattr(agent.config, name) for agent in self.agents]
        return torch.tensor([missing if v is None else float(v) for v in values], device=self.device)

    def _hyperparameters(self) -> None:
        self.gamma = self._rows("gamma").unsqueeze(1)
        self.reward_scale = self._rows("reward_scale").unsqueeze(1)
        self.tau = self._rows("tau")
        self.max_grad_norm = self._rows("max_grad_norm")
        self.clipped = any(agent.config.max_grad_norm is not None for agent in self.agents)

    def _by_pod(self, x: Tensor) -> Tensor:
        """[P E, ...] -> [P, E, ...]."""
        return x.reshape(self.pods, self.rows_per_pod, *x.shape[1:])

    def _skip_draw(self) -> None:
        """Take a draw's counter without drawing: no row needs it now, and the next draws of every
        row stay what they would be had it drawn (counter-based streams)."""
        self.streams.draws += 1

    # -- the rows and the agents
    def read_agents(self) -> None:
        """Take every pod's networks, optimiser state, normaliser and counters into the rows."""
        agents = self.agents
        self.critic = StackedTwinQ.from_twins([a.critic for a in agents])
        self.target_critic = StackedTwinQ.from_twins([a.target_critic for a in agents]).requires_grad_(False)
        self._read_networks()
        self.adams = []  # (RowAdam, the lone Adam's param group it holds)
        for index, params in enumerate(self._param_groups()):
            groups_of = [a.optimizer.param_groups for a in agents]  # SAC's without autotune_alpha: no third
            rates = [groups[index]["lr"] if index < len(groups) else 0.0 for groups in groups_of]
            adam = RowAdam(params, rates)
            for row, agent in enumerate(agents):
                groups = agent.optimizer.state_dict()
                if index >= len(groups["param_groups"]):
                    continue
                state = {
                    k: groups["state"][i]
                    for k, i in enumerate(groups["param_groups"][index]["params"])
                    if i in groups["state"]
                }
                if state:
                    adam.load_row_state(row, state)
            self.adams.append(adam)
        self.normalizers = RowNormalizers([a.normalizer for a in agents], self.rows_per_pod)
        self.start_updates = torch.tensor([a.num_updates for a in agents], dtype=torch.int64)
        """Each pod's update count when the rows were read (a continued pod's is its parent's)."""
        self.updates = 0
        """Updates every row made since."""
        self.learned = [a.num_updates > 0 for a in agents]
        """Pods that learned already (continued): they explore with their policy from the first step."""
        self._learned = torch.tensor(self.learned, device=self.device).view(-1, 1, 1)

    @torch.no_grad()
    def write_agents(self) -> None:
        """Copy the rows back into the pods' agents: networks, Adam state, normaliser and counters."""
        for row, agent in enumerate(self.agents):
            agent.critic.load_state_dict(row_state(self.critic, row))
            agent.target_critic.load_state_dict(row_state(self.target_critic, row))
            self._write_networks(row, agent)
            optimizer_state = agent.optimizer.state_dict()
            state = {}
            for adam, group in zip(self.adams, optimizer_state["param_groups"], strict=False):
                if int(adam.steps[row]) == 0:  # as a lone Adam: no state before a parameter's first step
                    continue
                own = adam.row_state(row)
                state.update({index: own[k] for k, index in enumerate(group["params"])})
            optimizer_state["state"] = state
            agent.optimizer.load_state_dict(optimizer_state)
            agent.num_updates = int(self.start_updates[row]) + self.updates
        self.normalizers.write([a.normalizer for a in self.agents])

    def _read_networks(self) -> None:
        raise NotImplementedError

    def _write_networks(self, row: int, agent: OffPolicyAgent) -> None:
        raise NotImplementedError

    def _param_groups(self) -> list[list[Tensor]]:
        """The stacked parameters in the lone Adam's param groups and order."""
        raise NotImplementedError

    # -- the program
    def _explore(self, obs: Tensor) -> Tensor:
        """Behaviour actions [P, E, A] of raw observations [P E, D] (exactly one draw)."""
        raise NotImplementedError

    def _learn(self, batch: ReplayBatch) -> Tensor:
        """One update of every row; metrics [P, len(metric_names)]."""
        raise NotImplementedError

    @torch.no_grad()
    def _behaviour_actions(self) -> Tensor:
        """Uniform random actions until ``learning_starts`` (a pod that learned already explores with
        its policy), then each pod's exploration; [P E, A]."""
        shape = (self.rows_per_pod, self.act_dim)
        if self.env_steps >= self.config.learning_starts:
            self._skip_draw()  # the uniform draw's counter
            actions = self._explore(self.obs)
        else:
            uniform = self.streams.uniform(shape) * 2.0 - 1.0
            if any(self.learned):
                actions = torch.where(self._learned, self._explore(self.obs), uniform)
            else:
                self._skip_draw()  # the exploration draw's counter
                actions = uniform
        return actions.reshape(-1, self.act_dim)

    def _collect_step(self) -> None:
        actions = self._behaviour_actions()
        obs, reward, terminated, truncated, info = self.env.step(actions)
        next_obs = next_observation(obs, terminated, truncated, info)
        self.buffer.add(self.obs, actions, reward, next_obs, terminated)
        self.normalizers.update(next_obs)
        done = terminated | truncated
        self._episode_return += reward
        finished = self._by_pod(torch.where(done, self._episode_return, 0.0)).sum(dim=1)
        self._finished += torch.stack([finished, self._by_pod(done).sum(dim=1).to(finished.dtype)])
        self._episode_return.masked_fill_(done, 0.0)
        self.obs = obs
        self.env_steps += self.rows_per_pod

    def _learn_step(self) -> int:
        """The updates owed for the last env step (the lone runner's credit); how many ran."""
        if self.env_steps < self.config.learning_starts:
            return 0
        self._update_credit += self.config.updates_per_step * self.rows_per_pod
        n_updates = int(self._update_credit)
        self._update_credit -= n_updates
        for _ in range(n_updates):
            self._metric_sum += self._learn(self._sample())
        return n_updates

    def _sample(self) -> ReplayBatch:
        """``batch_size`` transitions of each pod's own, uniformly with replacement, [P, B, ...]."""
        per_pod = len(self.buffer) // self.pods
        index = self.streams.integers(per_pod, (self.config.batch_size,))
        width = self.pods * self.rows_per_pod
        flat = (index // self.rows_per_pod) * width + self._column + index % self.rows_per_pod
        batch = self.buffer.rows(flat.reshape(-1))
        shape = index.shape
        return ReplayBatch(
            obs=batch.obs.reshape(*shape, -1),
            actions=batch.actions.reshape(*shape, -1),
            rewards=batch.rewards.reshape(shape),
            next_obs=batch.next_obs.reshape(*shape, -1),
            terminated=batch.terminated.reshape(shape),
        )

    def _passes(self) -> list[slice]:
        """The pods of each forward and backward pass of an update: on the CPU `POD_PASS` pods a pass
        (a pass of 16 market pods ran 1.3x slower per pod than a lone pod's update, one of 4 as fast),
        on a GPU every pod in one."""
        if self.device.type != "cpu":
            return [slice(None)]
        return [slice(start, min(start + POD_PASS, self.pods)) for start in range(0, self.pods, POD_PASS)]

    @staticmethod
    def _views(net: nn.Module, rows: slice) -> dict[str, Tensor]:
        """A stacked network's parameters' rows ``rows``, by name (views)."""
        return {name: p[rows] for name, p in net.named_parameters()}

    @staticmethod
    def _net(net: nn.Module, x: Tensor, views: dict[str, Tensor]) -> Tensor:
        """A stacked network with its parameters' rows ``views`` (`_views`) applied to ``x`` [p, B, ...]."""
        return torch.func.functional_call(net, views, (x,))

    def _new_grads(self, params: Sequence[Tensor]) -> None:
        """Gradients to fill pass by pass (each pass writes its rows: `_backward`)."""
        for param in params:
            param.grad = torch.empty_like(param)

    @staticmethod
    def _backward(loss: Tensor, params: Sequence[Tensor], views: Sequence[Tensor], rows: slice) -> None:
        """Each row's gradient of its own loss into ``param.grad[rows]``, through the parameters' row
        views (not into full-size gradients a pass, which would add P x the parameters per pass)."""
        grads = torch.autograd.grad(loss.sum(), list(views))  # rows never mix: each row's is its own loss's
        with torch.no_grad():
            for param, grad in zip(params, grads, strict=True):
                param.grad[rows].copy_(grad)

    def _clip(self, params: Sequence[Tensor]) -> None:
        if self.clipped and any(p.grad is not None for p in params):
            clip_row_grad_norms(params, self.max_grad_norm)

    @torch.no_grad()
    def _polyak(self, targets: Sequence[Tensor], online: Sequence[Tensor], on: Tensor) -> None:
        """``target <- target + tau * (online - target)`` in the rows that are ``on`` (a host bool [P])."""
        if not bool(on.any()):
            return
        tau = self.tau if bool(on.all()) else torch.where(on.to(self.device), self.tau, 0.0)
        for target, source in zip(targets, online, strict=True):
            target.lerp_(source, tau.view(-1, *([1] * (target.ndim - 1))))

    def iteration(self) -> list[dict[str, float]]:
        """Collect ``iteration_steps`` transitions per pod while learning; each pod's metrics
        (`OffPolicyRunner.iteration`'s keys)."""
        start_steps, n_updates = self.env_steps, 0
        while self.env_steps - start_steps < self.config.iteration_steps:
            self._collect_step()
            n_updates += self._learn_step()
        host = torch.cat([self._finished.T, self._metric_sum], dim=1).cpu().tolist()  # one host copy
        self._finished.zero_()
        self._metric_sum.zero_()
        out = []
        for row in host:
            metrics = {
                "env_steps": float(self.env_steps - start_steps),
                "updates": float(n_updates),
                "buffer_size": float(len(self.buffer) // self.pods),
            }
            if row[1] > 0:
                metrics["episode_return"] = row[0] / row[1]
                metrics["episodes"] = row[1]
            if n_updates:
                metrics.update(
                    {name: total / n_updates for name, total in zip(self.metric_names, row[2:], strict=True)}
                )
            out.append(metrics)
        return out

    # -- the Runner contract, per pod
    def state_dict(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        if state:
            raise ConfigError(f"{type(self).__name__} keeps no state between iterations, got {sorted(state)}")


class SACGroupRunner(OffPolicyGroupRunner):
    """P `SACAgent`s as one program: `SACAgent.learn` per row (one backward pass for critics, actor and
    temperature), each row's temperature learned or fixed (``autotune_alpha``)."""

    agent_cls = SACAgent
    row_fields = SAC_ROW_FIELDS
    metric_names = SACAgent.metric_names

    def _hyperparameters(self) -> None:
        super()._hyperparameters()
        self.log_std_min = self._rows("log_std_min").view(-1, 1, 1)
        self.half_span = torch.tensor(
            [0.5 * (a.config.log_std_max - a.config.log_std_min) for a in self.agents], device=self.device
        ).view(-1, 1, 1)
        self.target_entropy = torch.tensor([a.target_entropy for a in self.agents], device=self.device).unsqueeze(1)
        self.autotune = [bool(a.config.autotune_alpha) for a in self.agents]
        self._autotune = torch.tensor(self.autotune, dtype=torch.float32, device=self.device)

    def _read_networks(self) -> None:
        self.actor = stack_sequentials([a.actor.net for a in self.agents])
        log_alpha = torch.stack([a.temperature.log_alpha.detach() for a in self.agents]).clone()
        self.log_alpha = nn.Parameter(log_alpha, requires_grad=any(a.config.autotune_alpha for a in self.agents))

    def _write_networks(self, row: int, agent: OffPolicyAgent) -> None:
        agent.actor.net.load_state_dict(row_state(self.actor, row))
        agent.temperature.log_alpha.copy_(self.log_alpha[row])

    def _param_groups(self) -> list[list[Tensor]]:
        return [list(self.actor.parameters()), list(self.critic.parameters()), [self.log_alpha]]

    def _sample_actions(
        self, obs: Tensor, noise: Tensor, rows: slice, views: dict[str, Tensor] | None = None
    ) -> tuple[Tensor, Tensor]:
        """`SquashedGaussianActor.sample` for pods ``rows`` (the actor's ``views`` of them, or fresh
        ones): actions [p, B, A] and log-probs [p, B], from standard normal ``noise`` [p, B, A]."""
        views = self._views(self.actor, rows) if views is None else views
        mean, raw_log_std = self._net(self.actor, obs, views).chunk(2, dim=-1)
        log_std = self.log_std_min[rows] + self.half_span[rows] * (torch.tanh(raw_log_std) + 1.0)
        pre_tanh = mean + log_std.exp() * noise
        gaussian = (-0.5 * noise.square() - log_std - _HALF_LOG_2PI).sum(-1)
        squash = (2.0 * (_LOG_2 - pre_tanh - softplus(-2.0 * pre_tanh))).sum(-1)
        return torch.tanh(pre_tanh), gaussian - squash

    def _explore(self, obs: Tensor) -> Tensor:
        noise = self.streams.normal((self.rows_per_pod, self.act_dim))
        return self._sample_actions(self.normalizers.normalize(self._by_pod(obs)), noise, slice(None))[0]

    def _learn(self, batch: ReplayBatch) -> Tensor:
        obs, next_obs = self.normalizers.normalize(batch.obs), self.normalizers.normalize(batch.next_obs)
        shape = tuple(batch.actions.shape[1:])
        next_noise, noise = self.streams.normal(shape), self.streams.normal(shape)
        alpha = self.log_alpha.detach().exp()
        actor, critic, temperature = self.adams
        learned = [*actor.params, *critic.params, *([self.log_alpha] if any(self.autotune) else [])]
        self._new_grads(learned)
        metrics = []
        for rows in self._passes():
            actor_views = self._views(self.actor, rows)
            with torch.no_grad():
                next_actions, next_log_prob = self._sample_actions(next_obs[rows], next_noise[rows], rows)
                target = [p[rows] for p in self.target_critic.parameters()]
                next_q = self.target_critic(next_obs[rows], next_actions, target).min(dim=1).values
                soft_next_v = next_q - alpha[rows].unsqueeze(1) * next_log_prob
                not_done = 1.0 - batch.terminated[rows]
                target_q = self.reward_scale[rows] * batch.rewards[rows] + self.gamma[rows] * not_done * soft_next_v

            online = [p[rows] for p in self.critic.parameters()]
            q = self.critic(obs[rows], batch.actions[rows], online)  # [p, 2, B]
            critic_loss = 0.5 * (q - target_q.unsqueeze(1)).square().mean(dim=2).sum(dim=1)
            actions, log_prob = self._sample_actions(obs[rows], noise[rows], rows, actor_views)
            q_pi = self.critic(obs[rows], actions, [p.detach() for p in online]).min(dim=1).values
            actor_loss = (alpha[rows].unsqueeze(1) * log_prob - q_pi).mean(dim=1)
            loss = critic_loss + actor_loss
            entropy_gap = (log_prob.detach() + self.target_entropy[rows]).mean(dim=1)
            log_alpha = self.log_alpha[rows]
            alpha_loss = -log_alpha * entropy_gap
            if all(self.autotune):
                loss = loss + alpha_loss
            elif any(self.autotune):
                loss = loss + alpha_loss * self._autotune[rows]  # a fixed row's temperature gets no gradient
            views = [*actor_views.values(), *online, *([log_alpha] if any(self.autotune) else [])]
            self._backward(loss, learned, views, rows)
            values = [critic_loss, actor_loss, alpha[rows], alpha_loss, -log_prob.mean(dim=1), q.mean(dim=(1, 2))]
            metrics.append(torch.stack([value.detach() for value in values], dim=1))
        self._clip(actor.params)
        self._clip(critic.params)
        actor.apply()
        critic.apply()
        if any(self.autotune):
            temperature.apply(self.autotune)
        self.updates += 1
        interval = self.config.target_update_interval
        self._polyak(
            list(self.target_critic.parameters()),
            list(self.critic.parameters()),
            (self.start_updates + self.updates) % interval == 0,
        )
        return torch.cat(metrics)


class TD3GroupRunner(OffPolicyGroupRunner):
    """P `TD3Agent`s as one program: `TD3Agent.learn` per row, each row's actor and targets updated
    every ``policy_delay`` of its own critic updates."""

    agent_cls = TD3Agent
    row_fields = TD3_ROW_FIELDS
    metric_names = TD3Agent.metric_names

    def _hyperparameters(self) -> None:
        super()._hyperparameters()
        self.policy_noise = self._rows("policy_noise").view(-1, 1, 1)
        self.noise_clip = self._rows("noise_clip").view(-1, 1, 1)
        self.exploration_noise = self._rows("exploration_noise").view(-1, 1, 1)
        self.penalty = self._rows("preactivation_penalty")
        self.penalised = any(a.config.preactivation_penalty > 0 for a in self.agents)
        self.policy_delay = torch.tensor([a.config.policy_delay for a in self.agents], dtype=torch.int64)
        self._flags = torch.stack([torch.zeros(len(self.agents)), torch.ones(len(self.agents))]).to(self.device)

    def _read_networks(self) -> None:
        self.actor = stack_sequentials([a.actor.net for a in self.agents])
        self.target_actor = stack_sequentials([a.target_actor.net for a in self.agents]).requires_grad_(False)
        self.start_actor_updates = torch.tensor([a.actor_updates for a in self.agents], dtype=torch.int64)
        self.actor_updates = torch.zeros(len(self.agents), dtype=torch.int64)
        """Actor updates each row made since the rows were read (host counters)."""

    def _write_networks(self, row: int, agent: OffPolicyAgent) -> None:
        agent.actor.net.load_state_dict(row_state(self.actor, row))
        agent.target_actor.net.load_state_dict(row_state(self.target_actor, row))
        agent.actor_updates = int(self.start_actor_updates[row] + self.actor_updates[row])

    def _param_groups(self) -> list[list[Tensor]]:
        return [list(self.actor.parameters()), list(self.critic.parameters())]

    def _explore(self, obs: Tensor) -> Tensor:
        actions = torch.tanh(self.actor(self.normalizers.normalize(self._by_pod(obs))))
        noise = self.streams.normal(tuple(actions.shape[1:])) * self.exploration_noise
        return (actions + noise).clamp(-1.0, 1.0)

    def _learn(self, batch: ReplayBatch) -> Tensor:
        obs, next_obs = self.normalizers.normalize(batch.obs), self.normalizers.normalize(batch.next_obs)
        smoothing_noise = self.streams.normal(tuple(batch.actions.shape[1:]))
        self.updates += 1
        update_actor = (self.start_updates + self.updates) % self.policy_delay == 0  # host [P]
        every, some = bool(update_actor.all()), bool(update_actor.any())
        mask = None if every or not some else update_actor.to(self.device, torch.float32)
        actor, critic = self.adams
        actor.zero_grad()
        learned = [*(actor.params if some else []), *critic.params]
        self._new_grads(learned)
        metrics = []
        for rows in self._passes():
            with torch.no_grad():
                target_actions = torch.tanh(
                    self._net(self.target_actor, next_obs[rows], self._views(self.target_actor, rows))
                )
                noise = smoothing_noise[rows] * self.policy_noise[rows]
                smoothing = torch.clamp(noise, -self.noise_clip[rows], self.noise_clip[rows])
                next_actions = (target_actions + smoothing).clamp(-1.0, 1.0)
                target = [p[rows] for p in self.target_critic.parameters()]
                next_q = self.target_critic(next_obs[rows], next_actions, target).min(dim=1).values
                not_done = 1.0 - batch.terminated[rows]
                target_q = self.reward_scale[rows] * batch.rewards[rows] + self.gamma[rows] * not_done * next_q

            online = [p[rows] for p in self.critic.parameters()]
            q = self.critic(obs[rows], batch.actions[rows], online)  # [p, 2, B]
            critic_loss = (q - target_q.unsqueeze(1)).square().mean(dim=2).sum(dim=1)
            loss = critic_loss
            actor_loss = torch.zeros_like(critic_loss)
            actor_views = self._views(self.actor, rows) if some else {}
            if some:
                raw = self._net(self.actor, obs[rows], actor_views)
                q1_pi = self.critic(obs[rows], torch.tanh(raw), [p.detach() for p in online])[:, 0]
                actor_loss = -q1_pi.mean(dim=1)
                actor_term = actor_loss
                if self.penalised:
                    actor_term = actor_loss + self.penalty[rows] * raw.square().mean(dim=(1, 2))
                if mask is not None:
                    actor_term, actor_loss = actor_term * mask[rows], actor_loss * mask[rows]
                loss = loss + actor_term
            self._backward(loss, learned, [*actor_views.values(), *online], rows)
            metrics.append(torch.stack([critic_loss.detach(), actor_loss.detach(), q.detach().mean(dim=(1, 2))], 1))
        self._clip(actor.params)
        self._clip(critic.params)
        critic.apply()
        if some:
            actor.apply(update_actor)
            self.actor_updates += update_actor.to(torch.int64)
            self._polyak(list(self.target_actor.parameters()), list(self.actor.parameters()), update_actor)
            self._polyak(list(self.target_critic.parameters()), list(self.critic.parameters()), update_actor)
        flags = self._flags[int(every)] if mask is None else mask
        values = torch.cat(metrics)
        return torch.stack([values[:, 0], values[:, 1], flags, values[:, 2]], dim=1)


GROUP_RUNNERS = {"sac": SACGroupRunner, "td3": TD3GroupRunner}
"""The off-policy group runner of each algorithm."""
