"""Soft Actor-Critic (Haarnoja et al. 2018, with the learned temperature of the v2 paper).

- Twin critics Q1, Q2 (one batched `TwinQ`) and Polyak-averaged target critics; the
  Bellman target uses the minimum of the two target critics and bootstraps on
  ``terminated`` only (a time-limit truncation still bootstraps).
- Actor: a Gaussian in pre-squash space, squashed by tanh into [-1, 1]; the log-prob
  gets the change-of-variables correction ``- sum log(1 - tanh(u)^2)``, computed in
  the stable form ``2 (log 2 - u - softplus(-2u))``.
- Temperature alpha = exp(log_alpha), learned so that the policy's entropy moves
  towards ``target_entropy`` (default ``-act_dim``).

One update is one forward/backward pass: the critic, actor and temperature losses
have disjoint parameters (the actor loss goes through a *detached* copy of the
critic's weights, alpha is detached outside its own loss), so their sum is
back-propagated once and one fused Adam step updates everything.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from trader.agents.base import AlgoSpec, Bound, seeded
from trader.agents.offpolicy import (
    OFF_POLICY_BOUNDS,
    OffPolicyAgent,
    OffPolicyConfig,
    OffPolicyRunner,
    actor_network,
    make_adam,
    polyak_update,
    twin_q,
)
from trader.agents.replay import ReplayBatch
from trader.errors import ConfigError

_LOG_2 = math.log(2.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True)
class SACConfig(OffPolicyConfig):
    """SAC hyperparameters (the shared ones are documented on `OffPolicyConfig`)."""

    alpha_lr: float = 3e-4
    """Adam learning rate of log(alpha)."""
    init_alpha: float = 1.0
    """Initial temperature alpha."""
    autotune_alpha: bool = True
    """Learn alpha towards the target entropy; False keeps alpha at `init_alpha`."""
    target_entropy: float | None = None
    """Entropy the temperature aims at; None means ``-act_dim``."""
    log_std_min: float = -5.0
    """Lower bound of the actor's log standard deviation."""
    log_std_max: float = 2.0
    """Upper bound of the actor's log standard deviation."""
    target_update_interval: int = 1
    """Gradient updates between Polyak updates of the target critics."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.alpha_lr > 0:
            raise ConfigError(f"SACConfig.alpha_lr must be > 0, got {self.alpha_lr}")
        if not self.init_alpha > 0:
            raise ConfigError(f"SACConfig.init_alpha must be > 0, got {self.init_alpha}")
        if not self.log_std_min < self.log_std_max:
            raise ConfigError(f"SACConfig.log_std_min ({self.log_std_min}) must be < log_std_max ({self.log_std_max})")
        if self.target_update_interval < 1:
            raise ConfigError(f"SACConfig.target_update_interval must be >= 1, got {self.target_update_interval}")


class SquashedGaussianActor(nn.Module):
    """MLP giving mean and log-std of a Gaussian whose samples are squashed by tanh."""

    def __init__(self, obs_dim: int, act_dim: int, config: SACConfig) -> None:
        super().__init__()
        self.net = actor_network(obs_dim, act_dim, config, 2)
        self.log_std_min = config.log_std_min
        self.log_std_max = config.log_std_max

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and log-std ``[B, act_dim]`` (log-std smoothly bounded by tanh)."""
        mean, raw_log_std = self.net(obs).chunk(2, dim=-1)
        span = self.log_std_max - self.log_std_min
        log_std = self.log_std_min + 0.5 * span * (torch.tanh(raw_log_std) + 1.0)
        return mean, log_std

    def sample(self, obs: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Reparameterised action in [-1, 1] ``[B, act_dim]`` and its log-prob ``[B]``."""
        mean, log_std = self(obs)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        pre_tanh = mean + log_std.exp() * noise
        # log N(u; mean, std) with (u - mean) / std = noise, minus log|d tanh(u) / du|.
        gaussian = (-0.5 * noise.square() - log_std - _HALF_LOG_2PI).sum(-1)
        squash = (2.0 * (_LOG_2 - pre_tanh - F.softplus(-2.0 * pre_tanh))).sum(-1)
        return torch.tanh(pre_tanh), gaussian - squash

    def deterministic(self, obs: Tensor) -> Tensor:
        """The squashed mean action."""
        mean, _ = self(obs)
        return torch.tanh(mean)


class Temperature(nn.Module):
    """Holds log(alpha) as a parameter (a module, so it is saved and averaged like the rest)."""

    def __init__(self, init_alpha: float, learnable: bool) -> None:
        super().__init__()
        log_alpha = torch.tensor(math.log(init_alpha), dtype=torch.float32)
        self.log_alpha = nn.Parameter(log_alpha, requires_grad=learnable)

    def forward(self) -> Tensor:
        return self.log_alpha.exp()


class SACAgent(OffPolicyAgent):
    """SAC on the agent contract; see the module docstring.

    :param obs_dim: observation size.
    :param act_dim: action size (actions in [-1, 1]).
    :param config: `SACConfig`.
    :param device: where networks and sampling live (the env's device).
    :param seed: network initialisation and the agent's generator.
    """

    algo = "sac"
    config_cls = SACConfig
    metric_names = ("critic_loss", "actor_loss", "alpha", "alpha_loss", "entropy", "q_mean")

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        config: SACConfig,
        device: torch.device | str = "cpu",
        seed: int = 0,
    ) -> None:
        super().__init__(obs_dim, act_dim, config, device, seed)
        with seeded(self.seed):
            self.actor = SquashedGaussianActor(obs_dim, act_dim, config)
            self.critic = twin_q(obs_dim, act_dim, config)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.temperature = Temperature(config.init_alpha, config.autotune_alpha)
        for module in self.modules().values():
            module.to(self.device)
        self.target_entropy = -float(act_dim) if config.target_entropy is None else float(config.target_entropy)
        groups = [
            {"params": list(self.actor.parameters()), "lr": config.actor_lr},
            {"params": list(self.critic.parameters()), "lr": config.critic_lr},
        ]
        if config.autotune_alpha:
            groups.append({"params": [self.temperature.log_alpha], "lr": config.alpha_lr})
        self.optimizer = make_adam(groups, self.device)

    def modules(self) -> dict[str, nn.Module]:
        return {
            "actor": self.actor,
            "critic": self.critic,
            "target_critic": self.target_critic,
            "temperature": self.temperature,
        }

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"sac": self.optimizer}

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = False) -> Tensor:
        """Squashed mean (deterministic) or a sample from the policy, in [-1, 1]."""
        normed = self.normalizer.normalize(obs)
        if deterministic:
            return self.actor.deterministic(normed)
        return self.actor.sample(normed, self.generator)[0]

    def deterministic_trunk(self) -> tuple[nn.Module, int, str]:
        """What `act(obs, deterministic=True)` runs after normalising: the actor's network, a mean
        and a log-std per action, the mean squashed by tanh (`trader.agents.program`)."""
        return self.actor.net, 2, "tanh"

    def explore(self, obs: Tensor) -> Tensor:
        """SAC explores with its own stochastic policy."""
        return self.act(obs, deterministic=False)

    def learn(self, batch: ReplayBatch) -> Tensor:
        """One joint update of critics, actor and temperature; Polyak update of the targets."""
        cfg = self.config
        obs, next_obs = self.normalized_batch(batch)
        alpha = self.temperature().detach()
        with torch.no_grad():
            next_actions, next_log_prob = self.actor.sample(next_obs, self.generator)
            next_q = self.target_critic(next_obs, next_actions).min(dim=0).values
            soft_next_v = next_q - alpha * next_log_prob
            not_done = 1.0 - batch.terminated
            target_q = cfg.reward_scale * batch.rewards + cfg.gamma * not_done * soft_next_v

        q = self.critic(obs, batch.actions)  # [2, B]
        critic_loss = 0.5 * (q - target_q).square().mean(dim=1).sum()

        actions, log_prob = self.actor.sample(obs, self.generator)
        q_pi = self.critic(obs, actions, self.critic.detached_params()).min(dim=0).values
        actor_loss = (alpha * log_prob - q_pi).mean()
        loss = critic_loss + actor_loss

        entropy_gap = (log_prob.detach() + self.target_entropy).mean()
        alpha_loss = -self.temperature.log_alpha * entropy_gap
        if cfg.autotune_alpha:
            loss = loss + alpha_loss

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.clip_gradients(self.actor, self.critic)
        self.optimizer.step()
        self.num_updates += 1
        if self.num_updates % cfg.target_update_interval == 0:
            polyak_update(self.target_critic.parameters(), self.critic.parameters(), cfg.tau)
        return torch.stack(
            [
                critic_loss.detach(),
                actor_loss.detach(),
                alpha,
                alpha_loss.detach(),
                -log_prob.detach().mean(),
                q.detach().mean(),
            ]
        )


MUTATION_BOUNDS = {**OFF_POLICY_BOUNDS, "alpha_lr": Bound(1e-5, 3e-3, "log")}
"""What a tournament may perturb in a SAC pod, and within what ranges."""

SPEC = AlgoSpec(
    name="sac",
    config_cls=SACConfig,
    agent_cls=SACAgent,
    runner_cls=OffPolicyRunner,
    mutation_bounds=MUTATION_BOUNDS,
)
