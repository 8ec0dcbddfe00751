"""Twin Delayed DDPG (Fujimoto et al. 2018).

- Twin critics (one batched `TwinQ`); the Bellman target takes the minimum of the two
  target critics and bootstraps on ``terminated`` only.
- Target policy smoothing: the target action is the *target actor's* action plus
  Gaussian noise clipped to ``[-noise_clip, noise_clip]``, then clipped to [-1, 1].
- Delayed updates: the actor and both target networks are updated once every
  ``policy_delay`` critic updates; the actor maximises Q1.
- Exploration: the deterministic actor plus Gaussian noise of std ``exploration_noise``.

On a delayed step the critic and actor losses are back-propagated together: the actor
loss goes through a detached copy of the critic weights, so the two losses touch
disjoint parameters and one fused Adam step serves both. On other steps only the
critic loss is back-propagated and the actor's parameters (no gradient) are skipped.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

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
from trader.errors import CheckpointError, ConfigError


@dataclass(frozen=True)
class TD3Config(OffPolicyConfig):
    """TD3 hyperparameters (the shared ones are documented on `OffPolicyConfig`)."""

    policy_delay: int = 2
    """Critic updates per actor (and target network) update."""
    policy_noise: float = 0.2
    """Std of the target policy smoothing noise (actions span [-1, 1])."""
    noise_clip: float = 0.5
    """Target smoothing noise is clipped to [-noise_clip, noise_clip]."""
    exploration_noise: float = 0.1
    """Std of the Gaussian noise added to the actor's action while collecting."""
    preactivation_penalty: float = 0.0
    """Weight of the mean squared pre-tanh action in the actor's loss (0: none). Where
    the reward ignores the actions' scale (the market's normalised, market-neutral
    book), nothing else stops the actions' norm from growing until tanh saturates
    and the actor's gradient vanishes; this penalty holds them inside tanh's range.
    On the market's one saturating TD3 seed it did, but did not stop that seed's
    validation Sharpe from falling mid-run (benchmarks/RESULTS.md, "Why a TD3 seed
    ends on the mirror image"), so no preset sets it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.policy_delay < 1:
            raise ConfigError(f"TD3Config.policy_delay must be >= 1, got {self.policy_delay}")
        for key in ("policy_noise", "noise_clip", "exploration_noise", "preactivation_penalty"):
            if getattr(self, key) < 0:
                raise ConfigError(f"TD3Config.{key} must be >= 0, got {getattr(self, key)}")


class DeterministicActor(nn.Module):
    """MLP with a tanh output: one action in [-1, 1] per observation."""

    def __init__(self, obs_dim: int, act_dim: int, config: TD3Config) -> None:
        super().__init__()
        self.net = actor_network(obs_dim, act_dim, config, 1)

    def forward(self, obs: Tensor) -> Tensor:
        return torch.tanh(self.net(obs))

    def preactivation(self, obs: Tensor) -> Tensor:
        """The action before tanh (what `TD3Config.preactivation_penalty` weighs)."""
        return self.net(obs)


class TD3Agent(OffPolicyAgent):
    """TD3 on the agent contract; see the module docstring.

    :param obs_dim: observation size.
    :param act_dim: action size (actions in [-1, 1]).
    :param config: `TD3Config`.
    :param device: where networks and sampling live (the env's device).
    :param seed: network initialisation and the agent's generator.
    """

    algo = "td3"
    config_cls = TD3Config
    metric_names = ("critic_loss", "actor_loss", "actor_updates", "q_mean")

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        config: TD3Config,
        device: torch.device | str = "cpu",
        seed: int = 0,
    ) -> None:
        super().__init__(obs_dim, act_dim, config, device, seed)
        with seeded(self.seed):
            self.actor = DeterministicActor(obs_dim, act_dim, config)
            self.critic = twin_q(obs_dim, act_dim, config)
        self.target_actor = copy.deepcopy(self.actor).requires_grad_(False)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        for module in self.modules().values():
            module.to(self.device)
        self.optimizer = make_adam(
            [
                {"params": list(self.actor.parameters()), "lr": config.actor_lr},
                {"params": list(self.critic.parameters()), "lr": config.critic_lr},
            ],
            self.device,
        )
        self.actor_updates = 0
        """Actor updates done so far (one per ``policy_delay`` critic updates)."""
        self._actor_flag = torch.tensor([0.0, 1.0], device=self.device)

    def modules(self) -> dict[str, nn.Module]:
        return {
            "actor": self.actor,
            "critic": self.critic,
            "target_actor": self.target_actor,
            "target_critic": self.target_critic,
        }

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"td3": self.optimizer}

    def _noise(self, like: Tensor, std: float) -> Tensor:
        return torch.randn(like.shape, generator=self.generator, device=like.device) * std

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = False) -> Tensor:
        """The actor's action, plus exploration noise unless deterministic, in [-1, 1]."""
        actions = self.actor(self.normalizer.normalize(obs))
        if deterministic or self.config.exploration_noise == 0:
            return actions
        return (actions + self._noise(actions, self.config.exploration_noise)).clamp(-1.0, 1.0)

    def deterministic_trunk(self) -> tuple[nn.Module, int, str]:
        """What `act(obs, deterministic=True)` runs after normalising: the actor's network, one
        output per action, squashed by tanh (`trader.agents.program`)."""
        return self.actor.net, 1, "tanh"

    def explore(self, obs: Tensor) -> Tensor:
        """TD3 explores with Gaussian noise on its deterministic action."""
        return self.act(obs, deterministic=False)

    def learn(self, batch: ReplayBatch) -> Tensor:
        """One critic update; every ``policy_delay``-th call also the actor and the targets."""
        cfg = self.config
        obs, next_obs = self.normalized_batch(batch)
        with torch.no_grad():
            target_actions = self.target_actor(next_obs)
            smoothing = self._noise(target_actions, cfg.policy_noise).clamp(-cfg.noise_clip, cfg.noise_clip)
            next_actions = (target_actions + smoothing).clamp(-1.0, 1.0)
            next_q = self.target_critic(next_obs, next_actions).min(dim=0).values
            not_done = 1.0 - batch.terminated
            target_q = cfg.reward_scale * batch.rewards + cfg.gamma * not_done * next_q

        q = self.critic(obs, batch.actions)  # [2, B]
        critic_loss = (q - target_q).square().mean(dim=1).sum()
        self.num_updates += 1
        update_actor = self.num_updates % cfg.policy_delay == 0
        loss = critic_loss
        actor_loss = torch.zeros((), device=self.device)
        if update_actor:
            if cfg.preactivation_penalty > 0:
                raw = self.actor.preactivation(obs)
                pi, penalty = torch.tanh(raw), cfg.preactivation_penalty * raw.square().mean()
            else:
                pi, penalty = self.actor(obs), 0.0
            q1_pi = self.critic(obs, pi, self.critic.detached_params())[0]
            actor_loss = -q1_pi.mean()
            loss = loss + actor_loss + penalty

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.clip_gradients(self.actor, self.critic)
        self.optimizer.step()  # parameters without a gradient (the actor) are skipped
        if update_actor:
            self.actor_updates += 1
            polyak_update(self.target_actor.parameters(), self.actor.parameters(), cfg.tau)
            polyak_update(self.target_critic.parameters(), self.critic.parameters(), cfg.tau)
        return torch.stack(
            [
                critic_loss.detach(),
                actor_loss.detach(),
                self._actor_flag[int(update_actor)],
                q.detach().mean(),
            ]
        )

    def extra_state(self) -> dict[str, Tensor]:
        """Update counters: critic updates (the delay's phase) and actor updates."""
        return {
            **super().extra_state(),
            "actor_updates": torch.tensor(self.actor_updates, dtype=torch.int64),
        }

    def load_extra_state(self, state: Mapping[str, Tensor]) -> None:
        """Restore both counters."""
        rest = {k: v for k, v in state.items() if k != "actor_updates"}
        super().load_extra_state(rest)
        if "actor_updates" not in state:
            raise CheckpointError("TD3Agent: extra state lacks 'actor_updates'")
        self.actor_updates = int(state["actor_updates"])


MUTATION_BOUNDS = {
    **OFF_POLICY_BOUNDS,
    "exploration_noise": Bound(0.02, 0.5, "log"),
    "policy_noise": Bound(0.05, 0.5),
}
"""What a tournament may perturb in a TD3 pod, and within what ranges."""

SPEC = AlgoSpec(
    name="td3",
    config_cls=TD3Config,
    agent_cls=TD3Agent,
    runner_cls=OffPolicyRunner,
    mutation_bounds=MUTATION_BOUNDS,
)
