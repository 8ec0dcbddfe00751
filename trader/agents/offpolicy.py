"""Shared layer of the off-policy agents (SAC, TD3): networks, config and the worker.

- `TwinQ`: K Q-networks evaluated together as one batched MLP (weights ``[K, in, out]``,
  ``torch.bmm``), so twin critics cost one kernel per layer instead of two.
- `OffPolicyConfig`: the fields SAC and TD3 share (networks, optimiser, replay, loop).
- `OffPolicyAgent`: the part of the `Agent` contract SAC and TD3 share
  (normalisation, update counter, device-side metrics).
- `OffPolicyRunner`: the worker + learner loop; collects transitions from a batched
  env into the replay buffer (uniform random actions for the first
  ``learning_starts`` transitions) and runs ``updates_per_step`` gradient updates per
  transition. Everything stays on the env's device; the loop is over time only, and
  host syncs happen once per iteration. With ``num_learners = K > 1`` the updates
  run on K replicas fused once per iteration (see `OffPolicyRunner`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from market_envs.devices import resolve_device
from trader.agents.base import Agent, Bound, Runner
from trader.agents.networks import (
    PerStockPolicyHead,
    PerStockTwinQ,
    batched_layer,
    check_network,
    obs_groups,
    weights_and_biases,
)
from trader.agents.parallel import LearnerGroup
from trader.agents.replay import ReplayBatch, ReplayBuffer, next_observation
from trader.errors import CheckpointError, ConfigError


@dataclass(frozen=True)
class OffPolicyConfig:
    """Fields shared by `SACConfig` and `TD3Config`.

    Steps are counted in transitions (env steps summed over the ``E`` sub-environments).
    """

    hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the actor and of each critic."""
    network: str = "mlp"
    """"mlp": flat MLPs over the whole observation (any env). "per_stock" (market envs):
    actor and critics are per-stock networks shared by every stock
    (`trader.agents.networks`; a Q-value is the sum of per-stock shares) and the
    normaliser's statistics are shared across stocks."""
    actions_per_stock: int = 1
    """``network="per_stock"``: the market env's actions per stock (2 under
    ``EnvConfig.rate_action``: an aim and a trade rate, in two blocks of N); `trader.training`
    sets it from the env."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor."""
    critic_lr: float = 3e-4
    """Adam learning rate of the critics."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak factor: ``target <- (1 - tau) * target + tau * online`` after each target update."""
    batch_size: int = 256
    """Transitions per gradient update."""
    buffer_size: int = 200_000
    """Replay capacity in transitions (rounded up to a multiple of the number of envs);
    preallocated on the env's device: ``(2 * obs_dim + act_dim + 2) * 4`` bytes each."""
    learning_starts: int = 5_000
    """Transitions collected with uniform random actions before learning starts."""
    updates_per_step: float = 1.0
    """Gradient updates per collected transition (1.0 = one update per env step);
    fractions accumulate across steps, e.g. 0.25 with 8 envs gives 2 updates per step."""
    reward_scale: float = 1.0
    """Rewards are multiplied by this before entering the Bellman target."""
    normalize_obs: bool = False
    """Normalise observations with running statistics (kept in the agent and checkpoint)."""
    critic_init_scale: float = 1.0
    """Multiplies the critics' output layer (weights and bias) once, at initialisation.
    Below 1 the untrained Q-function is nearly flat in the actions, so the actor's first
    updates follow what the critics learn from the data instead of their random initial
    slope (DDPG initialises its output layers in +-3e-3 for this reason). 1.0: the plain
    `nn.Linear` initialisation. The market preset sets TD3's to 0.01
    (`podracer.presets.TD3_MARKET`)."""
    max_grad_norm: float | None = None
    """Clip the gradient norm of each network to this value; None disables clipping."""
    iteration_steps: int = 1_000
    """Transitions collected per runner iteration (one progress/metrics report each)."""
    num_learners: int = 1
    """K learners fused by averaging once per runner iteration; 1 = plain. Each of the
    K replicas makes every gradient update a single learner would make, on its own
    ``batch_size`` shard of one ``K * batch_size`` replay sample (K times the compute),
    and at the end of the iteration parameters, target networks, SAC's temperature and
    the Adam moments are averaged (`trader.agents.parallel`)."""

    def __post_init__(self) -> None:
        name = type(self).__name__
        positive = {
            "actor_lr": self.actor_lr,
            "critic_lr": self.critic_lr,
            "batch_size": self.batch_size,
            "buffer_size": self.buffer_size,
            "updates_per_step": self.updates_per_step,
            "reward_scale": self.reward_scale,
            "iteration_steps": self.iteration_steps,
            "num_learners": self.num_learners,
            "critic_init_scale": self.critic_init_scale,
        }
        for key, value in positive.items():
            if not value > 0:
                raise ConfigError(f"{name}.{key} must be > 0, got {value}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"{name}.gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise ConfigError(f"{name}.tau must be in (0, 1], got {self.tau}")
        if self.learning_starts < 0:
            raise ConfigError(f"{name}.learning_starts must be >= 0, got {self.learning_starts}")
        if not self.hidden_sizes or any(int(h) < 1 for h in self.hidden_sizes):
            raise ConfigError(f"{name}.hidden_sizes must be positive widths, got {self.hidden_sizes}")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ConfigError(f"{name}.max_grad_norm must be > 0 or None, got {self.max_grad_norm}")
        check_network(name, self.network)
        if isinstance(self.actions_per_stock, bool) or self.actions_per_stock not in (1, 2):
            raise ConfigError(f"{name}.actions_per_stock must be 1 or 2, got {self.actions_per_stock!r}")
        # TOML and JSON give lists; keep the frozen config hashable and comparable.
        object.__setattr__(self, "hidden_sizes", tuple(int(h) for h in self.hidden_sizes))


OFF_POLICY_BOUNDS = {
    "actor_lr": Bound(1e-5, 3e-3, "log"),
    "critic_lr": Bound(1e-5, 3e-3, "log"),
    "gamma": Bound(0.9, 0.999),
    "tau": Bound(0.001, 0.05, "log"),
    "batch_size": Bound(64, 1024, "log", integer=True),
    "reward_scale": Bound(0.1, 10.0, "log"),
}
"""What a tournament may perturb in any off-policy pod (SAC and TD3 add their own)."""


def actor_network(obs_dim: int, act_dim: int, config: OffPolicyConfig, outputs_per_action: int) -> nn.Module:
    """The actor's trunk ``[B, obs_dim] -> [B, outputs_per_action x act_dim]`` (output
    j of every action in block j): a flat ReLU MLP or the per-stock network."""
    if config.network == "per_stock":
        return PerStockPolicyHead(
            obs_dim, act_dim, config.hidden_sizes, outputs_per_action, actions_per_stock=config.actions_per_stock
        )
    return mlp(obs_dim, config.hidden_sizes, outputs_per_action * act_dim)


def twin_q(obs_dim: int, act_dim: int, config: OffPolicyConfig) -> nn.Module:
    """The twin critics, flat (`TwinQ`) or per-stock (`PerStockTwinQ`), ``[K, B]`` out;
    their output layer scaled by ``config.critic_init_scale``."""
    if config.network == "per_stock":
        critic: nn.Module = PerStockTwinQ(
            obs_dim, act_dim, config.hidden_sizes, actions_per_stock=config.actions_per_stock
        )
        last_weight, last_bias = critic.net.weights[-1], critic.net.biases[-1]
    else:
        critic = TwinQ(obs_dim, act_dim, config.hidden_sizes)
        last_weight, last_bias = critic.weights[-1], critic.biases[-1]
    if config.critic_init_scale != 1.0:
        with torch.no_grad():
            last_weight.mul_(config.critic_init_scale)
            last_bias.mul_(config.critic_init_scale)
    return critic


def mlp(in_dim: int, hidden_sizes: Sequence[int], out_dim: int) -> nn.Sequential:
    """Linear-ReLU stack ending in a plain Linear layer of width ``out_dim``."""
    layers: list[nn.Module] = []
    width = in_dim
    for hidden in hidden_sizes:
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)


class TwinQ(nn.Module):
    """``num_q`` independent Q(s, a) MLPs run as one batched MLP.

    Layer ``l`` holds ``weight_l`` ``[K, in, out]`` and ``bias_l`` ``[K, 1, out]``,
    initialised like `nn.Linear` (uniform in +-1/sqrt(in)) independently per network.
    `forward` returns ``[K, B]``.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int], num_q: int = 2):
        super().__init__()
        self.num_q = num_q
        widths = [obs_dim + act_dim, *hidden_sizes, 1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True):
            weight, bias = batched_layer(num_q, fan_in, fan_out)
            self.weights.append(nn.Parameter(weight))
            self.biases.append(nn.Parameter(bias))

    def forward(self, obs: Tensor, actions: Tensor, params: Sequence[Tensor] | None = None) -> Tensor:
        """Q-values ``[K, B]`` of ``obs`` ``[B, obs_dim]`` and ``actions`` ``[B, act_dim]``.

        :param params: optional replacement parameters in `parameters()` order
            (weights then biases), e.g. detached copies so that a policy loss
            differentiates through the critic without touching its weights.
        """
        weights, biases = weights_and_biases(self.weights, self.biases, params)
        x = torch.cat([obs, actions], dim=-1)
        h = torch.matmul(x, weights[0]) + biases[0]  # [B, in] @ [K, in, out] -> [K, B, out]
        for weight, bias in zip(weights[1:], biases[1:], strict=True):
            # bmm, then the bias in place: baddbmm would first broadcast the bias to [K, B, out].
            h = torch.bmm(torch.relu(h), weight).add_(bias)
        return h.squeeze(-1)

    def detached_params(self) -> list[Tensor]:
        """Parameters (weights then biases) detached from autograd, sharing storage."""
        return [p.detach() for p in self.parameters()]


@torch.no_grad()
def polyak_update(target: Sequence[Tensor], online: Sequence[Tensor], tau: float) -> None:
    """``target <- target + tau * (online - target)`` for every pair, in one fused call."""
    torch._foreach_lerp_(list(target), list(online), tau)


def make_adam(groups: list[dict[str, Any]], device: torch.device) -> torch.optim.Adam:
    """Adam over parameter groups, using the fused kernel where the device supports it."""
    fused = device.type in ("cpu", "cuda")
    return torch.optim.Adam(groups, fused=fused)


class OffPolicyAgent(Agent):
    """Common part of SAC and TD3 on top of the `Agent` contract.

    Subclasses implement `explore` (a behaviour action for the worker) and `learn`
    (one gradient update returning a metrics vector ``[len(metric_names)]`` on the
    device, so the runner can sum metrics over an iteration without host syncs).
    `update` is the contract's public form: `learn` plus one host copy.
    """

    metric_names: tuple[str, ...] = ()
    """Names of the entries of the vector `learn` returns."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        config: OffPolicyConfig,
        device: torch.device | str,
        seed: int,
    ) -> None:
        super().__init__(
            obs_dim,
            act_dim,
            config,
            device,
            seed,
            normalize_obs=config.normalize_obs,
            obs_groups=obs_groups(config.network, obs_dim, act_dim, config.actions_per_stock),
        )
        self.num_updates = 0
        """Gradient updates done so far (saved in the checkpoint)."""

    @abstractmethod
    def explore(self, obs: Tensor) -> Tensor:
        """Behaviour actions ``[B, act_dim]`` in [-1, 1] for raw observations."""

    @abstractmethod
    def learn(self, batch: ReplayBatch) -> Tensor:
        """One gradient update; returns the metrics vector (see `metric_names`) on the device."""

    def update(self, batch: ReplayBatch) -> dict[str, float]:
        """One gradient update on a replay sample; metrics copied to the host once."""
        values = self.learn(batch).cpu().tolist()
        return dict(zip(self.metric_names, values, strict=True))

    def observe(self, obs: Tensor) -> None:
        """Feed collected observations to the running normaliser (no-op when disabled)."""
        self.normalizer.update(obs)

    def normalized_batch(self, batch: ReplayBatch) -> tuple[Tensor, Tensor]:
        """Observations and next observations of a replay sample, normalised."""
        if not self.normalizer.enabled:
            return batch.obs, batch.next_obs
        both = self.normalizer.normalize(torch.cat([batch.obs, batch.next_obs], dim=0))
        return both[: batch.obs.shape[0]], both[batch.obs.shape[0] :]

    def clip_gradients(self, *networks: nn.Module) -> None:
        """Clip each network's gradient norm to ``config.max_grad_norm`` (if set)."""
        if self.config.max_grad_norm is None:
            return
        for network in networks:
            nn.utils.clip_grad_norm_(network.parameters(), self.config.max_grad_norm, foreach=True)

    def compile(self) -> None:
        """Opt-in ``torch.compile`` of every network's forward pass (in place: the
        state-dict keys, hence checkpoints, stay the same)."""
        for module in self.modules().values():
            module.compile()

    def extra_state(self) -> dict[str, Tensor]:
        """The update counter (TD3's policy delay depends on it)."""
        return {"num_updates": torch.tensor(self.num_updates, dtype=torch.int64)}

    def load_extra_state(self, state: Mapping[str, Tensor]) -> None:
        """Restore the update counter."""
        if set(state) != {"num_updates"}:
            raise CheckpointError(f"{type(self).__name__}: expected extra state ['num_updates'], got {sorted(state)}")
        self.num_updates = int(state["num_updates"])


class OffPolicyRunner(Runner):
    """Worker and learner of SAC/TD3: batched env -> replay buffer -> gradient updates.

    Each `iteration` collects ``config.iteration_steps`` transitions (rounded up to
    whole steps of the ``E`` sub-environments). The first ``learning_starts``
    transitions use uniform random actions; after that every env step is followed by
    ``updates_per_step * E`` gradient updates (fractions carry over). Episode returns
    and update metrics are accumulated on the device and copied to the host once per
    iteration.

    Learners: with ``num_learners = K > 1`` one iteration is one learner epoch. The
    K replicas (replica 0 is the agent, which also collects) are synchronised to the
    agent before the iteration; each owed update draws one sample of
    ``K * batch_size`` transitions with the agent's generator and replica k learns on
    rows ``[k * batch_size, (k + 1) * batch_size)``; after the iteration the replicas
    are fused (`LearnerGroup.fuse`). Every replica makes the same number of updates,
    so the update counters (TD3's policy-delay phase included) agree and are kept;
    the replicas normalise with the agent's own, current normaliser. The metrics of
    an update are the mean over the replicas, and ``updates`` counts updates per
    replica. K = 1 samples ``batch_size`` rows and updates the agent, nothing else.

    :param agent: a `SACAgent` or `TD3Agent`.
    :param env: a batched env following the contract (same-step autoreset with
        ``info["final_obs"]``); it is reset here with the agent's seed.
    """

    def __init__(self, agent: OffPolicyAgent, env: Any) -> None:
        super().__init__(agent, env)
        self.agent: OffPolicyAgent = agent
        self.config: OffPolicyConfig = agent.config
        self.device = resolve_device(env.device)
        if self.device != agent.device:
            raise ConfigError(f"the agent is on {agent.device} but the env is on {self.device}")
        self.num_envs = int(env.num_envs)
        self.buffer = ReplayBuffer(self.config.buffer_size, self.num_envs, agent.obs_dim, agent.act_dim, self.device)
        self.env_steps = 0
        """Transitions collected so far."""
        self._obs, _ = env.reset(seed=agent.seed)
        agent.observe(self._obs)
        self._episode_return = torch.zeros(self.num_envs, device=self.device)
        # [sum of finished returns, number of finished episodes]
        self._finished = torch.zeros(2, device=self.device)
        self._metric_sum = torch.zeros(len(agent.metric_names), device=self.device)
        self._update_credit = 0.0
        self.learners = LearnerGroup(agent, self.config.num_learners)
        """The K learners (replica 0 is the agent)."""
        self.learners.sync_replicas()

    def state_dict(self) -> dict[str, Tensor]:
        """The replay buffer (keys ``buffer.*``), the transitions collected (``learning_starts``
        counts them) and the fraction of an update owed."""
        state = {f"buffer.{key}": value for key, value in self.buffer.state_dict().items()}
        state["env_steps"] = torch.tensor(self.env_steps, dtype=torch.int64)
        state["update_credit"] = torch.tensor(self._update_credit, dtype=torch.float64)
        return state

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        """Take back a `state_dict`: the buffer refilled, learning where it was."""
        self.buffer.load_state_dict({k.removeprefix("buffer."): v for k, v in state.items() if k.startswith("buffer.")})
        self.env_steps = int(state["env_steps"])
        self._update_credit = float(state["update_credit"])

    def _behaviour_actions(self) -> Tensor:
        """Uniform random actions until ``learning_starts``, then the agent's exploration.

        An agent that has learned already (continued from a checkpoint) explores with
        its own policy from the first step; learning still waits for the buffer.
        """
        if self.env_steps < self.config.learning_starts and self.agent.num_updates == 0:
            shape = (self.num_envs, self.agent.act_dim)
            uniform = torch.rand(shape, device=self.device, generator=self.agent.generator)
            return uniform * 2.0 - 1.0
        return self.agent.explore(self._obs)

    def collect_step(self) -> None:
        """Step every sub-environment once and store the transitions."""
        actions = self._behaviour_actions()
        obs, reward, terminated, truncated, info = self.env.step(actions)
        next_obs = next_observation(obs, terminated, truncated, info)
        self.buffer.add(self._obs, actions, reward, next_obs, terminated)
        self.agent.observe(next_obs)
        done = terminated | truncated
        self._episode_return += reward
        finished_sum = torch.where(done, self._episode_return, 0.0).sum()
        self._finished += torch.stack([finished_sum, done.sum().to(finished_sum.dtype)])
        self._episode_return.masked_fill_(done, 0.0)
        self._obs = obs
        self.env_steps += self.num_envs

    def learn_step(self) -> int:
        """Run the gradient updates owed for the last env step; return how many ran."""
        if self.env_steps < self.config.learning_starts:
            return 0
        self._update_credit += self.config.updates_per_step * self.num_envs
        n_updates = int(self._update_credit)
        self._update_credit -= n_updates
        for _ in range(n_updates):
            self._metric_sum += self._learn_once()
        return n_updates

    def _learn_once(self) -> Tensor:
        """One gradient update on every replica; the metrics vector (mean over replicas)."""
        batch_size, num_learners = self.config.batch_size, self.learners.num_learners
        if num_learners == 1:
            return self.agent.learn(self.buffer.sample(batch_size, self.agent.generator))
        shards = self.buffer.sample(num_learners * batch_size, self.agent.generator)
        pairs = zip(self.learners.replicas, shards.split(num_learners), strict=True)
        metrics = [replica.learn(shard) for replica, shard in pairs]
        return torch.stack(metrics).mean(dim=0)

    def iteration(self) -> dict[str, float]:
        """Collect ``iteration_steps`` transitions while learning; metrics as floats."""
        start_steps = self.env_steps
        n_updates = 0
        self.learners.sync_replicas()
        while self.env_steps - start_steps < self.config.iteration_steps:
            self.collect_step()
            n_updates += self.learn_step()
        if n_updates and self.learners.num_learners > 1:
            self.learners.fuse()
        # One host copy for everything this iteration measured.
        host = torch.cat([self._finished, self._metric_sum]).cpu().tolist()
        self._finished.zero_()
        self._metric_sum.zero_()
        metrics: dict[str, float] = {
            "env_steps": float(self.env_steps - start_steps),
            "updates": float(n_updates),
            "buffer_size": float(len(self.buffer)),
        }
        if host[1] > 0:
            metrics["episode_return"] = host[0] / host[1]
            metrics["episodes"] = host[1]
        if n_updates:
            for name, total in zip(self.agent.metric_names, host[2:], strict=True):
                metrics[name] = total / n_updates
        return metrics
