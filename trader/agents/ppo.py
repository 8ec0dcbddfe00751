"""PPO: clipped surrogate, GAE, advantage normalisation, entropy bonus, value clipping.

Policy: a Gaussian with a state-independent, learned log standard deviation. Actions
are sampled *without* tanh squashing and the env receives them clipped to [-1, 1];
the log-probability is that of the unclipped sample, which is what is stored and
re-evaluated in the update. We chose clipping over tanh squashing because the
Gaussian keeps a closed-form entropy and no change-of-variables term, and because
it is the standard for PPO on continuous control (CleanRL, SB3); the cost is a
small bias where the mean sits at the action bounds. The deterministic action is
the clipped mean.

Worker and learner: `PPORunner.iteration()` collects ``num_steps`` steps from every
sub-environment into preallocated `RolloutStorage`, computes GAE (truncations
bootstrap from ``info["final_obs"]``), then `PPOAgent.update` runs ``update_epochs``
epochs of minibatch updates through a `LearnerGroup` (``num_learners`` replicas
fused by parameter and Adam-moment averaging each epoch).

Schedules (CleanRL's): with ``anneal_lr`` the learning rate decays linearly to 0
over ``total_steps`` transitions, computed before each update from the agent's own
counter of transitions learned from (``env_steps``, saved in the checkpoint, so a
resumed run continues the schedule); with ``target_kl`` an update stops after the
first epoch whose minibatches' mean approximate KL exceeds it.

Observation normalisation: the running statistics are frozen during a rollout and
its update, and merged with the rollout's observations afterwards, so the logged
log-probabilities and values of a rollout and its update see identical inputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from trader.agents.base import Agent, AlgoSpec, Bound, Runner, seeded
from trader.agents.networks import PerStockPolicyHead, PerStockValue, check_network, obs_groups
from trader.agents.parallel import LearnerGroup
from trader.agents.rollout import RolloutBatch, RolloutStorage
from trader.errors import CheckpointError, ConfigError

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_METRIC_NAMES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
_KL = _METRIC_NAMES.index("approx_kl")


@dataclass(frozen=True)
class PPOConfig:
    """PPO hyperparameters; sizes of the env (E) come from the env itself."""

    num_steps: int = 128
    """Steps collected per sub-environment per rollout (T); a rollout is T x E rows."""
    learning_rate: float = 3e-4
    """Adam learning rate (one optimiser for actor and critic)."""
    adam_eps: float = 1e-5
    """Adam epsilon."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    update_epochs: int = 10
    """Passes over each rollout."""
    num_minibatches: int = 32
    """Minibatches per epoch (per learner when num_learners > 1)."""
    clip_coef: float = 0.2
    """Surrogate clipping epsilon: ratios outside [1 - eps, 1 + eps] get no gradient."""
    clip_vloss: bool = True
    """Clip the value update around the collection-time value (same epsilon)."""
    norm_adv: bool = True
    """Normalise advantages per minibatch (zero mean, unit std)."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient norm clip."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of both actor and critic (tanh activations)."""
    network: str = "mlp"
    """"mlp": flat MLPs over the whole observation (any env). "per_stock" (market envs):
    one small network shared by every stock (`trader.agents.networks`), a single
    log-std for all stocks, a value summed over per-stock shares, and a normaliser
    whose statistics are shared across stocks."""
    actions_per_stock: int = 1
    """``network="per_stock"``: the market env's actions per stock (2 under
    ``EnvConfig.rate_action``: an aim and a trade rate, in two blocks of N); `trader.training`
    sets it from the env."""
    init_log_std: float = 0.0
    """Initial log standard deviation of the Gaussian policy."""
    normalize_obs: bool = True
    """Keep a running observation normaliser (saved with the agent)."""
    obs_clip: float = 10.0
    """Clip of normalised observations."""
    reward_scale: float = 1.0
    """Rewards are multiplied by this before GAE (logged returns are unscaled)."""
    num_learners: int = 1
    """K learners on disjoint shards, fused by averaging each epoch; 1 = plain."""
    anneal_lr: bool = False
    """Decay the learning rate linearly from `learning_rate` to 0 over `total_steps`:
    an update after n transitions uses ``learning_rate * max(0, 1 - n / total_steps)``
    (the first update the full rate). Needs `total_steps`."""
    total_steps: int | None = None
    """Environment transitions of the whole run, the length of the `anneal_lr`
    schedule (e.g. the ``steps`` given to ``trader.train``); unused without it."""
    target_kl: float | None = None
    """Stop an update's epochs early once the mean approximate KL of the last epoch's
    minibatches exceeds this (one host copy per epoch); None runs every epoch."""

    def __post_init__(self) -> None:
        positive = ("num_steps", "learning_rate", "update_epochs", "num_minibatches")
        for name in (*positive, "clip_coef", "max_grad_norm", "obs_clip", "num_learners"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"PPOConfig.{name} must be positive, got {getattr(self, name)}")
        for name in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"PPOConfig.{name} must be in [0, 1], got {getattr(self, name)}")
        if self.ent_coef < 0 or self.vf_coef < 0:
            raise ConfigError("PPOConfig.ent_coef and vf_coef must be >= 0")
        if not self.hidden_sizes or any(size <= 0 for size in self.hidden_sizes):
            raise ConfigError(f"PPOConfig.hidden_sizes must be positive, got {self.hidden_sizes}")
        check_network("PPOConfig", self.network)
        if isinstance(self.actions_per_stock, bool) or self.actions_per_stock not in (1, 2):
            raise ConfigError(f"PPOConfig.actions_per_stock must be 1 or 2, got {self.actions_per_stock!r}")
        if self.anneal_lr and self.total_steps is None:
            raise ConfigError(
                "PPOConfig.anneal_lr needs total_steps, the run's environment transitions "
                "(the length of the learning-rate schedule)"
            )
        if self.total_steps is not None and self.total_steps <= 0:
            raise ConfigError(f"PPOConfig.total_steps must be positive, got {self.total_steps}")
        if self.target_kl is not None and not self.target_kl > 0:
            raise ConfigError(f"PPOConfig.target_kl must be > 0 or None, got {self.target_kl}")


MUTATION_BOUNDS = {
    "learning_rate": Bound(1e-5, 3e-3, "log"),
    "ent_coef": Bound(0.0, 0.02),
    "gamma": Bound(0.9, 0.999),
    "gae_lambda": Bound(0.8, 1.0),
    "clip_coef": Bound(0.1, 0.3),
    "update_epochs": Bound(2, 15, integer=True),
    "num_minibatches": Bound(4, 64, "log", integer=True),
    "init_log_std": Bound(-3.0, 0.0),
    "reward_scale": Bound(0.1, 10.0, "log"),
}
"""What a tournament may perturb in a PPO pod, and within what ranges."""


def _mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, out_gain: float) -> nn.Sequential:
    """Tanh MLP with orthogonal init (sqrt(2) hidden gain, `out_gain` on the last layer)."""
    layers: list[nn.Module] = []
    sizes = (in_dim, *hidden)
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [_orthogonal(nn.Linear(fan_in, fan_out), math.sqrt(2.0)), nn.Tanh()]
    layers.append(_orthogonal(nn.Linear(sizes[-1], out_dim), out_gain))
    return nn.Sequential(*layers)


def _orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class GaussianActor(nn.Module):
    """Mean from an MLP, log-std a free parameter (state-independent).

    ``network="per_stock"``: the mean comes from the per-stock network and one log-std
    is shared by every stock (so no parameter count grows with N).
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: tuple[int, ...],
        init_log_std: float,
        network: str = "mlp",
        actions_per_stock: int = 1,
    ):
        super().__init__()
        self.act_dim = act_dim
        if network == "per_stock":
            self.mean = PerStockPolicyHead(
                obs_dim, act_dim, hidden, activation="tanh", orthogonal_gain=0.01, actions_per_stock=actions_per_stock
            )
            self.log_std = nn.Parameter(torch.full((1,), float(init_log_std)))
        else:
            self.mean = _mlp(obs_dim, hidden, act_dim, out_gain=0.01)
            self.log_std = nn.Parameter(torch.full((act_dim,), float(init_log_std)))

    def forward(self, obs: Tensor) -> Tensor:
        """Action mean [B, act_dim] for normalised observations."""
        return self.mean(obs)

    def action_log_std(self) -> Tensor:
        """The log-std of every action dimension, [act_dim] (a view of the parameter)."""
        return self.log_std.expand(self.act_dim)


def gaussian_log_prob(actions: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """Sum over action dims of the diagonal Gaussian log-density, [B]."""
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z.pow(2) - log_std - _LOG_SQRT_2PI).sum(dim=-1)


def gaussian_entropy(log_std: Tensor) -> Tensor:
    """Entropy of the diagonal Gaussian (state-independent), a scalar."""
    return (0.5 + _LOG_SQRT_2PI + log_std).sum()


def clipped_surrogate_loss(
    new_logprob: Tensor, old_logprob: Tensor, advantages: Tensor, clip_coef: float
) -> tuple[Tensor, Tensor]:
    """PPO's clipped policy loss (to minimise) and the fraction of clipped ratios.

    ``loss = mean(max(-A * r, -A * clip(r, 1 - eps, 1 + eps)))`` with
    ``r = exp(new - old)``. Where the clipped term is the larger one (e.g. r > 1 + eps
    with A > 0) it is constant in the parameters, so that row has zero gradient.
    """
    rows, clipped = clipped_surrogate(new_logprob, old_logprob, advantages, clip_coef)
    return rows.mean(), clipped.float().mean()


def clipped_surrogate(
    new_logprob: Tensor, old_logprob: Tensor, advantages: Tensor, clip_coef: float
) -> tuple[Tensor, Tensor]:
    """`clipped_surrogate_loss` per row: the loss of each row [B] and whether its ratio is
    clipped, bool [B]."""
    ratio = torch.exp(new_logprob - old_logprob)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
    return torch.maximum(unclipped, clipped), (ratio.detach() - 1.0).abs() > clip_coef


class PPOAgent(Agent):
    """PPO agent: `GaussianActor` + value MLP, one Adam optimiser (see module docstring)."""

    algo = "ppo"
    config_cls = PPOConfig

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        config: PPOConfig | None = None,
        device: torch.device | str = "cpu",
        seed: int = 0,
    ) -> None:
        config = PPOConfig() if config is None else config
        super().__init__(
            obs_dim,
            act_dim,
            config,
            device,
            seed,
            normalize_obs=config.normalize_obs,
            obs_clip=config.obs_clip,
            obs_groups=obs_groups(config.network, obs_dim, act_dim, config.actions_per_stock),
        )
        with seeded(self.seed):
            self.actor = GaussianActor(
                obs_dim,
                act_dim,
                config.hidden_sizes,
                config.init_log_std,
                config.network,
                config.actions_per_stock,
            )
            if config.network == "per_stock":
                self.critic = PerStockValue(
                    obs_dim, act_dim, config.hidden_sizes, actions_per_stock=config.actions_per_stock
                )
            else:
                self.critic = _mlp(obs_dim, config.hidden_sizes, 1, out_gain=1.0)
        self.actor.to(self.device)
        self.critic.to(self.device)
        params = [*self.actor.parameters(), *self.critic.parameters()]
        # The fused kernel (CPU and CUDA) does the same update in one call per step
        # instead of a dozen small ops per parameter; at minibatch 64 that is ~20% of
        # a gradient step on the CPU (benchmarks/train_throughput.py).
        fused = self.device.type in ("cpu", "cuda")
        self.optimizer = torch.optim.Adam(params, lr=config.learning_rate, eps=config.adam_eps, fused=fused)
        self.learners = LearnerGroup(self, config.num_learners)
        self.env_steps = 0
        """Transitions the updates have learned from (the `anneal_lr` schedule's clock)."""
        self._actor_mean = self.actor.forward
        self._critic_value = self.critic.forward

    # -- the contract
    def modules(self) -> dict[str, nn.Module]:
        return {"actor": self.actor, "critic": self.critic}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"adam": self.optimizer}

    def adopt_parent(self, parent_config: Mapping[str, Any]) -> None:
        """The exploration noise is perturbed as a learning rate is: a child whose
        ``init_log_std`` differs from its parent's moves the inherited log-std by the
        difference (the parent's learned noise times ``exp(child - parent)``)."""
        shift = float(self.config.init_log_std) - float(parent_config.get("init_log_std", self.config.init_log_std))
        if shift:
            with torch.no_grad():
                self.actor.log_std.add_(shift)

    def extra_state(self) -> dict[str, Tensor]:
        """The transitions learned from (the learning-rate schedule continues from it)."""
        return {"env_steps": torch.tensor(self.env_steps, dtype=torch.int64)}

    def load_extra_state(self, state: Mapping[str, Tensor]) -> None:
        """Restore the counter; a state without it (saved before it existed) is accepted
        only when no schedule needs it."""
        unexpected = sorted(set(state) - {"env_steps"})
        if unexpected:
            raise CheckpointError(f"PPOAgent: unexpected extra state {unexpected}")
        if "env_steps" not in state and self.config.anneal_lr:
            raise CheckpointError("PPOAgent: anneal_lr needs extra state 'env_steps', missing")
        self.env_steps = int(state["env_steps"]) if "env_steps" in state else 0

    def scheduled_learning_rate(self) -> float:
        """The learning rate of the next update (see `PPOConfig.anneal_lr`)."""
        cfg = self.config
        if not cfg.anneal_lr:
            return cfg.learning_rate
        assert cfg.total_steps is not None  # checked by the config
        return cfg.learning_rate * max(0.0, 1.0 - self.env_steps / cfg.total_steps)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = False) -> Tensor:
        """Clipped mean (deterministic) or clipped Gaussian sample, [B, act_dim] in [-1, 1]."""
        mean = self._actor_mean(self.normalizer.normalize(obs))
        if deterministic:
            return mean.clamp(-1.0, 1.0)
        return self._sample(mean).clamp(-1.0, 1.0)

    def deterministic_trunk(self) -> tuple[nn.Module, int, str]:
        """What `act(obs, deterministic=True)` runs after normalising: the actor's mean network,
        one output per action, clipped to [-1, 1] (`trader.agents.program`)."""
        return self.actor.mean, 1, "clamp"

    def compile(self) -> None:
        """Compile the actor and critic forward passes with ``torch.compile``."""
        self._actor_mean = torch.compile(self.actor.forward)
        self._critic_value = torch.compile(self.critic.forward)

    # -- the worker's view
    @torch.no_grad()
    def explore(self, obs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(unclipped action [B, A], its log-prob [B], value [B])`` for raw obs."""
        normed = self.normalizer.normalize(obs)
        mean = self._actor_mean(normed)
        actions = self._sample(mean)
        logprob = gaussian_log_prob(actions, mean, self.actor.action_log_std())
        return actions, logprob, self._critic_value(normed).squeeze(-1)

    @torch.no_grad()
    def value(self, obs: Tensor) -> Tensor:
        """Value estimates [B] for raw observations."""
        return self._critic_value(self.normalizer.normalize(obs)).squeeze(-1)

    def _sample(self, mean: Tensor) -> Tensor:
        noise = torch.randn(mean.shape, generator=self.generator, device=mean.device)
        return mean + noise * torch.exp(self.actor.action_log_std())

    # -- the learner
    def update(self, batch: RolloutBatch) -> dict[str, float]:
        """Up to ``update_epochs`` epochs of clipped-PPO minibatch updates; metrics averaged.

        The learning rate is set first (`scheduled_learning_rate`; the replicas take it
        from the agent when each epoch synchronises them); with ``target_kl`` the epochs
        stop after the first one whose mean approximate KL exceeds it.
        """
        cfg = self.config
        self.train_mode(True)
        if cfg.anneal_lr:
            learning_rate = self.scheduled_learning_rate()
            for group in self.optimizer.param_groups:
                group["lr"] = learning_rate
        per_epoch = []
        for _ in range(cfg.update_epochs):
            per_epoch.append(self.learners.run_epoch(batch.size, cfg.num_minibatches, minibatch_step(batch)))
            if cfg.target_kl is not None and float(per_epoch[-1][:, _KL].mean()) > cfg.target_kl:
                break
        means = torch.cat(per_epoch).mean(dim=0).cpu().tolist()  # one host copy
        metrics = dict(zip(_METRIC_NAMES, means, strict=True))
        metrics["explained_variance"] = float(_explained_variance(batch.values, batch.returns))
        metrics["log_std"] = float(self.actor.log_std.detach().mean().cpu())
        metrics["epochs_run"] = float(len(per_epoch))
        metrics["learning_rate"] = float(self.optimizer.param_groups[0]["lr"])
        self.env_steps += batch.size
        return metrics

    def losses(self, batch: RolloutBatch, indices: Tensor) -> tuple[Tensor, Tensor]:
        """Total loss (scalar) and metrics [5] of one minibatch ``indices`` of ``batch``, in one pass."""
        cfg = self.config
        advantages = self._minibatch_advantages(batch, indices)
        sums = self._loss_sums(batch, indices, advantages)
        count = indices.numel()
        entropy = gaussian_entropy(self.actor.action_log_std())
        loss = (sums[0] + cfg.vf_coef * sums[1]) / count - cfg.ent_coef * entropy
        return loss, self._metrics(sums.detach(), entropy.detach(), count)

    def accumulate_gradients(self, batch: RolloutBatch, indices: Tensor) -> Tensor:
        """The gradient of `losses` into the parameters' ``.grad`` (which must be cleared), computed
        in pieces of at most `PASS_ROWS` network rows each; returns the metrics [5].

        The loss is a mean over the minibatch's rows (its advantages normalised over all of them
        first), so the sum of the pieces' gradients, each scaled by 1 / rows, is its gradient, up
        to float summation order. On the CPU a per-stock minibatch of 2,048 observations is
        204,800 rows of every activation (26 MB each at width 32): memory-bound, and slower per
        row than pieces that stay in cache (benchmarks/RESULTS.md, "Time to learn")."""
        cfg = self.config
        count = indices.numel()
        rows = self.act_dim if cfg.network == "per_stock" else 1  # network rows per observation
        pieces = max(1, -(-count * rows // PASS_ROWS)) if self.device.type == "cpu" else 1
        advantages = self._minibatch_advantages(batch, indices)
        total = torch.zeros(4, device=self.device)
        for part, part_advantages in zip(indices.tensor_split(pieces), advantages.tensor_split(pieces), strict=True):
            sums = self._loss_sums(batch, part, part_advantages)
            ((sums[0] + cfg.vf_coef * sums[1]) / count).backward()
            total += sums.detach()
        entropy = gaussian_entropy(self.actor.action_log_std())
        if cfg.ent_coef:
            (-cfg.ent_coef * entropy).backward()
        return self._metrics(total, entropy.detach(), count)

    def _minibatch_advantages(self, batch: RolloutBatch, indices: Tensor) -> Tensor:
        advantages = batch.advantages[indices]
        if self.config.norm_adv and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return advantages

    def _loss_sums(self, batch: RolloutBatch, indices: Tensor, advantages: Tensor) -> Tensor:
        """Sums over rows ``indices`` of the clipped surrogate, the value loss, the approximate KL
        and the clipped indicator, [4] (the first two with their gradients)."""
        cfg = self.config
        obs = self.normalizer.normalize(batch.obs[indices])
        mean = self.actor(obs)
        new_logprob = gaussian_log_prob(batch.actions[indices], mean, self.actor.action_log_std())
        old_logprob = batch.logprobs[indices]
        policy, clipped = clipped_surrogate(new_logprob, old_logprob, advantages, cfg.clip_coef)
        value = self._value_errors(obs, batch.values[indices], batch.returns[indices]).sum()
        with torch.no_grad():
            log_ratio = new_logprob - old_logprob
            approx_kl = ((log_ratio.exp() - 1.0) - log_ratio).sum()
        return torch.stack([policy.sum(), value, approx_kl, clipped.sum().to(value.dtype)])

    @staticmethod
    def _metrics(sums: Tensor, entropy: Tensor, count: int) -> Tensor:
        """[policy_loss, value_loss, entropy, approx_kl, clip_fraction] (`_METRIC_NAMES`) from the sums."""
        means = sums / count
        return torch.stack([means[0], means[1], entropy, means[2], means[3]])

    def _value_loss(self, obs: Tensor, old_values: Tensor, returns: Tensor) -> Tensor:
        return self._value_errors(obs, old_values, returns).mean()

    def _value_errors(self, obs: Tensor, old_values: Tensor, returns: Tensor) -> Tensor:
        """Half the squared value error of each row (the pessimistic one of the clipped and unclipped
        values with `PPOConfig.clip_vloss`), [B]."""
        values = self.critic(obs).squeeze(-1)
        unclipped = (values - returns).pow(2)
        if not self.config.clip_vloss:
            return 0.5 * unclipped
        eps = self.config.clip_coef
        clipped_values = old_values + (values - old_values).clamp(-eps, eps)
        return 0.5 * torch.maximum(unclipped, (clipped_values - returns).pow(2))


PASS_ROWS = 32_768
"""Network rows (observations, or observations x stocks for the per-stock network) per forward and
backward pass of a CPU update (`PPOAgent.accumulate_gradients`): 2,048 per-stock observations of
100 stocks ran 1.5x faster per row in pieces of 128 to 512 observations than at once."""


def minibatch_step(batch: RolloutBatch) -> Any:
    """The minibatch update ``LearnerGroup`` runs on each replica."""

    def step(agent: Agent, indices: Tensor) -> Tensor:
        assert isinstance(agent, PPOAgent)
        agent.optimizer.zero_grad(set_to_none=True)
        metrics = agent.accumulate_gradients(batch, indices)
        params = [*agent.actor.parameters(), *agent.critic.parameters()]
        nn.utils.clip_grad_norm_(params, agent.config.max_grad_norm)
        agent.optimizer.step()
        return metrics

    return step


def _explained_variance(predicted: Tensor, target: Tensor) -> Tensor:
    """1 - Var[target - predicted] / Var[target] (NaN when the target is constant)."""
    var_target = target.var()
    return torch.where(var_target > 0, 1.0 - (target - predicted).var() / var_target, torch.nan)


class PPORunner(Runner):
    """Worker + learner: collect one rollout from the batched env, GAE, update.

    The env is reset here with the agent's seed, so a run is a function of the seed.
    """

    def __init__(self, agent: Agent, env: Any) -> None:
        if not isinstance(agent, PPOAgent):
            raise ConfigError(f"PPORunner needs a PPOAgent, got {type(agent).__name__}")
        super().__init__(agent, env)
        self.agent: PPOAgent = agent
        cfg = agent.config
        self.storage = RolloutStorage(cfg.num_steps, env.num_envs, agent.obs_dim, agent.act_dim, env.device)
        self.obs, _ = env.reset(seed=agent.seed)
        self._episode_return = torch.zeros(env.num_envs, device=env.device)

    def iteration(self) -> dict[str, float]:
        """Collect ``num_steps`` x E transitions, compute GAE, update, merge obs stats."""
        agent, cfg, storage = self.agent, self.agent.config, self.storage
        finished_return = torch.zeros((), device=self.env.device)
        finished_count = torch.zeros((), device=self.env.device)
        agent.train_mode(False)
        for step in range(cfg.num_steps):
            obs = self.obs
            actions, logprob, value = agent.explore(obs)
            self.obs, reward, terminated, truncated, info = self.env.step(actions.clamp(-1, 1))
            # with no discount the value after a step counts for nothing (a contextual bandit, the
            # market preset): its critic pass would be a third of the collection's network time
            final_value = agent.value(info["final_obs"]) if cfg.gamma > 0 else torch.zeros_like(value)
            storage.insert(
                step,
                obs,
                actions,
                logprob,
                value,
                reward * cfg.reward_scale,
                terminated,
                truncated,
                final_value,
            )
            done = terminated | truncated
            self._episode_return += reward
            finished_return += torch.where(done, self._episode_return, 0.0).sum()
            finished_count += done.sum()
            self._episode_return = torch.where(done, 0.0, self._episode_return)
        storage.compute_returns(agent.value(self.obs), cfg.gamma, cfg.gae_lambda)
        metrics = agent.update(storage.batch())
        agent.normalizer.update(storage.obs)
        count, total = torch.stack([finished_count, finished_return]).cpu().tolist()
        metrics["env_steps"] = float(cfg.num_steps * self.env.num_envs)
        metrics["episodes"] = count
        if count > 0:
            metrics["episode_return"] = total / count
        return metrics


SPEC = AlgoSpec(
    name="ppo",
    config_cls=PPOConfig,
    agent_cls=PPOAgent,
    runner_cls=PPORunner,
    mutation_bounds=MUTATION_BOUNDS,
)
