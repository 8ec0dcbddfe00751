"""A PPO pod group: P PPO pods of one shape trained side by side as one program (issue 77).

Each pod is a `PPOAgent` as `trader.train` builds it (its own seed, config and run
directory): its networks, optimiser state and normaliser are where a checkpoint, the
evaluator and the backtest read them. While the group trains, the pods' state lives
stacked in the runner, row p being pod p:

- the actor's mean and the critic as one module each of the pods' own networks, one batched
  product a layer (`trader.agents.population.stack_sequentials` for flat MLPs,
  `trader.agents.networks.stack_per_stock` for the per-stock network), the log-stds as one tensor;
- one `RowAdam` (fused Adam per row, each row its own learning rate and step);
- the normaliser statistics, each pod's `ObsNormalizer` merging its own rollout, read as [P, 1, D];
- one env of P x E rows (`StockTradingVecEnv.use_row_streams`: pod p owns rows
  [p E, (p + 1) E) and its random starts);
- rollout storage [T, P E], advantages from GAE with each row's discount and lambda;
- the action noise and the minibatch permutations from `market_envs.streams.RowStreams`,
  one stream per pod, so what a pod draws never depends on the others or on P.

`write_agents` copies the rows back into the pods' agents (before an evaluation or a
checkpoint; the normalisers are the agents' own throughout), `read_agents` takes the agents'
state into the rows (after a pod's
checkpoint was loaded into its agent: a tournament child).

What may differ between the rows are the hyperparameters a tournament perturbs
(`GROUP_ROW_FIELDS`); everything else must be equal (`group_key`): the fields that
shape the program (rollout length, minibatches, network) and the switches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call

from market_envs.streams import RowStreams, mix64
from trader.agents.networks import per_stock_row, stack_per_stock
from trader.agents.population import (
    RowAdam,
    check_pods,
    clip_row_grad_norms,
    config_key,
    row_state,
    stack_sequentials,
)
from trader.agents.ppo import PASS_ROWS, PPOAgent, clipped_surrogate, gaussian_log_prob
from trader.agents.rollout import RolloutStorage, compute_gae
from trader.errors import ConfigError

GROUP_ROW_FIELDS = (
    "learning_rate",
    "gamma",
    "gae_lambda",
    "update_epochs",
    "clip_coef",
    "ent_coef",
    "vf_coef",
    "max_grad_norm",
    "init_log_std",
    "reward_scale",
    "target_kl",
    "anneal_lr",
    "total_steps",
)
"""PPO hyperparameters that may differ between the pods of one group (each row has its own)."""

_METRIC_NAMES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
_AGENT_STREAM = 0x5EED_A6E7
"""Mixed into a pod's seed for its agent's stream (the env's stream is keyed by the seed itself)."""
_MINIBATCH_STREAM = 0x0B47_C4E5
"""Mixed into a pod's seed (then as `_AGENT_STREAM`) for its minibatch orders."""
_EPOCH_BITS = 20
"""A minibatch order's draw number: update << 20 + epoch (an update has fewer than 2^20 epochs)."""


def group_key(config: Any) -> tuple:
    """What pods must share to train in one group: every config field but `GROUP_ROW_FIELDS`."""
    return config_key(config, GROUP_ROW_FIELDS)


def agent_stream_seeds(seeds: Sequence[int]) -> list[int]:
    """The seeds of the pods' agent streams (noise, minibatches), apart from their env streams."""
    mixed = mix64(torch.tensor([int(seed) ^ _AGENT_STREAM for seed in seeds], dtype=torch.int64))
    return [int(value) for value in mixed]


def ungroupable(config: Any) -> str | None:
    """Why a PPO config cannot train in a group, in one line; None when it can."""
    if config.num_learners != 1:
        return f"a PPO group trains num_learners=1 pods, got {config.num_learners}"
    return None


def check_group(agents: Sequence[PPOAgent]) -> None:
    """Refuse, in one line, pods that cannot train as one program (`population.check_pods`)."""
    check_pods(agents, PPOAgent, GROUP_ROW_FIELDS, ungroupable)


class PPOGroupRunner:
    """P `PPOAgent`s trained as one program on one env of P x E rows (see the module docstring).

    :param agents: the pods, built as `trader.train` builds a lone pod (state loaded already).
    :param env: a market env of P x E rows (`StockTradingVecEnv`); its row streams are set
        here from the pods' seeds, and it is reset.
    """

    def __init__(self, agents: Sequence[PPOAgent], env: Any) -> None:
        check_group(agents)
        self.agents = list(agents)
        self.env = env
        pods = len(self.agents)
        if env.num_envs % pods or env.obs_dim != agents[0].obs_dim or env.act_dim != agents[0].act_dim:
            raise ConfigError(f"a group of {pods} pods needs an env of P x E rows of its dims, got {env.num_envs}")
        self.pods, self.rows_per_pod = pods, env.num_envs // pods
        self.device = agents[0].device
        self.config = agents[0].config
        self.per_stock = self.config.network == "per_stock"
        seeds = [agent.seed for agent in self.agents]
        env.use_row_streams(RowStreams(seeds, env.device))
        self.streams = RowStreams(agent_stream_seeds(seeds), self.device)
        """The action noise: every row draws at every step."""
        self.minibatch_streams = RowStreams(
            agent_stream_seeds([seed ^ _MINIBATCH_STREAM for seed in seeds]), self.device
        )
        """The minibatch orders, each draw numbered by its update and epoch (`_update`): a row's epochs (its
        ``update_epochs``, its ``target_kl``) are its own, and its draws cannot depend on the others'."""
        self.updates = 0
        """Updates made by this runner (the number of the next one's orders)."""
        self._hyperparameters()
        self.read_agents()
        cfg = self.config
        self.storage = RolloutStorage(cfg.num_steps, env.num_envs, env.obs_dim, env.act_dim, env.device)
        self.normed_obs = torch.zeros_like(self.storage.obs)
        """The rollout's observations as the networks saw them: the update reads these (the
        statistics are frozen until the rollout's update is over) instead of normalising again."""
        self.obs, _ = env.reset()
        self._episode_return = torch.zeros(env.num_envs, device=env.device)

    # -- the rows' hyperparameters
    def _hyperparameters(self) -> None:
        configs = [agent.config for agent in self.agents]
        per_env = self.rows_per_pod

        def rows(name: str) -> Tensor:
            return torch.tensor([float(getattr(c, name)) for c in configs], device=self.device)

        self.gamma = rows("gamma").repeat_interleave(per_env)
        self.gae_lambda = rows("gae_lambda").repeat_interleave(per_env)
        self.reward_scale = rows("reward_scale").repeat_interleave(per_env)
        self.clip_coef = rows("clip_coef").unsqueeze(1)
        self.vf_coef = rows("vf_coef")
        self.ent_coef = rows("ent_coef")
        self.any_entropy = any(c.ent_coef != 0 for c in configs)
        self.max_grad_norm = rows("max_grad_norm")  # on the device: no copy per minibatch
        self.epochs = [int(c.update_epochs) for c in configs]
        self.target_kl = [math.inf if c.target_kl is None else float(c.target_kl) for c in configs]

    def learning_rates(self) -> list[float]:
        """Each pod's learning rate for the next update (`PPOAgent.scheduled_learning_rate`)."""
        return [agent.scheduled_learning_rate() for agent in self.agents]

    # -- the rows and the agents
    def read_agents(self) -> None:
        """Take every pod's networks, optimiser state and normaliser into the rows."""
        agents = self.agents
        if self.per_stock:
            self.mean_net = stack_per_stock([a.actor.mean.net for a in agents])
            self.critic = stack_per_stock([a.critic.net for a in agents])
        else:
            self.mean_net = stack_sequentials([a.actor.mean for a in agents])
            self.critic = stack_sequentials([a.critic for a in agents])
        self.log_std = nn.Parameter(torch.stack([a.actor.log_std.detach() for a in agents]).clone())
        self.params = [self.log_std, *self.mean_net.parameters(), *self.critic.parameters()]
        lone = [name for name, _ in agents[0].actor.named_parameters()]
        if lone[0] != "log_std":  # the row layout of the optimiser state is the lone Adam's order
            raise ConfigError(f"PPO group: unexpected parameter order {lone[:3]}")
        self.adam = RowAdam(self.params, [a.optimizer.param_groups[0]["lr"] for a in agents], eps=self.config.adam_eps)
        for row, agent in enumerate(agents):
            state = agent.optimizer.state_dict()["state"]
            if state:
                self.adam.load_row_state(row, state)
        self._normaliser_rows()

    def _normaliser_rows(self) -> None:
        """The pods' normaliser statistics as [P, 1, D] float32 tensors, as `ObsNormalizer.normalize`
        casts them (the statistics are frozen during a rollout and its update)."""
        normalizers = [a.normalizer for a in self.agents]
        first = normalizers[0]
        self.norm_mean = torch.stack([n.mean for n in normalizers]).to(torch.float32).unsqueeze(1)
        self.norm_std = torch.stack([torch.sqrt(n.var + first.eps) for n in normalizers]).to(torch.float32)
        self.norm_std = self.norm_std.unsqueeze(1)

    @torch.no_grad()
    def write_agents(self) -> None:
        """Copy the rows back into the pods' agents: networks and Adam state."""
        for row, agent in enumerate(self.agents):
            if self.per_stock:
                agent.actor.mean.net.load_state_dict(per_stock_row(self.mean_net, row))
                agent.critic.net.load_state_dict(per_stock_row(self.critic, row))
            else:
                agent.actor.mean.load_state_dict(row_state(self.mean_net, row))
                agent.critic.load_state_dict(row_state(self.critic, row))
            agent.actor.log_std.copy_(self.log_std[row])
            optimizer_state = agent.optimizer.state_dict()
            optimizer_state["state"] = self.adam.row_state(row)
            optimizer_state["param_groups"][0]["lr"] = self.adam.lr[row]
            agent.optimizer.load_state_dict(optimizer_state)

    # -- the program
    def _normalized(self, obs: Tensor) -> Tensor:
        """Observations [P, B, D] normalised by each row's statistics (as `ObsNormalizer.normalize`)."""
        normalizer = self.agents[0].normalizer
        if not normalizer.enabled:
            return obs
        return ((obs - self.norm_mean) / self.norm_std).clamp(-normalizer.clip, normalizer.clip)

    def _means(self, obs: Tensor, pods: slice = slice(None)) -> Tensor:
        """Action means [p, B, A] of the normalised observations [p, B, D] of rows ``pods``
        (`GaussianActor.forward`)."""
        out = _rows_forward(self.mean_net, obs, pods)
        if not self.per_stock:
            return out
        # [p, B, N, k]: as `PerStockPolicyHead`, k blocks of N
        return out.transpose(2, 3).reshape(out.shape[0], out.shape[1], -1)

    def _values(self, obs: Tensor, pods: slice = slice(None)) -> Tensor:
        """Values [p, B] of the normalised observations [p, B, D] of rows ``pods`` (the critic's)."""
        out = _rows_forward(self.critic, obs, pods)
        if self.per_stock:  # as `PerStockValue`: the per-stock shares [p, B, N, 1] summed
            return out.sum(dim=2).squeeze(-1)
        return out.squeeze(-1)

    def _action_log_std(self) -> Tensor:
        """Each row's log-std of every action dimension, [P, A] (`GaussianActor.action_log_std`)."""
        return self.log_std.expand(self.pods, self.agents[0].act_dim)

    def _by_pod(self, x: Tensor) -> Tensor:
        """[P E, ...] -> [P, E, ...]."""
        return x.reshape(self.pods, self.rows_per_pod, *x.shape[1:])

    @torch.no_grad()
    def _explore(self, obs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        normed = self._normalized(self._by_pod(obs))
        self._normed_step = normed
        mean = self._means(normed)
        log_std = self._action_log_std().unsqueeze(1)
        actions = mean + self.streams.normal(tuple(mean.shape[1:])) * torch.exp(log_std)
        logprob = gaussian_log_prob(actions, mean, log_std)
        value = self._values(normed)
        return actions.reshape(-1, actions.shape[-1]), logprob.reshape(-1), value.reshape(-1)

    @torch.no_grad()
    def _value(self, obs: Tensor) -> Tensor:
        return self._values(self._normalized(self._by_pod(obs))).reshape(-1)

    def iteration(self) -> list[dict[str, float]]:
        """Collect ``num_steps`` x P x E transitions, GAE per row, update every pod, merge the
        normaliser statistics; each pod's metrics (`PPORunner.iteration`'s keys)."""
        cfg, storage, env = self.config, self.storage, self.env
        finished_return = torch.zeros(self.pods, device=env.device)
        finished_count = torch.zeros(self.pods, device=env.device)
        with_final = any(agent.config.gamma > 0 for agent in self.agents)
        for step in range(cfg.num_steps):
            obs = self.obs
            actions, logprob, value = self._explore(obs)
            self.obs, reward, terminated, truncated, info = env.step(actions.clamp(-1, 1))
            final_value = self._value(info["final_obs"]) if with_final else torch.zeros_like(value)
            storage.insert(
                step, obs, actions, logprob, value, reward * self.reward_scale, terminated, truncated, final_value
            )
            self.normed_obs[step] = self._normed_step.reshape(-1, env.obs_dim)
            done = terminated | truncated
            self._episode_return += reward
            finished_return += self._by_pod(torch.where(done, self._episode_return, 0.0)).sum(dim=1)
            finished_count += self._by_pod(done).sum(dim=1)
            self._episode_return = torch.where(done, 0.0, self._episode_return)
        storage.advantages, storage.returns = compute_gae(
            storage.rewards,
            storage.values,
            self._value(self.obs),
            storage.final_values,
            storage.terminated,
            storage.truncated,
            self.gamma,
            self.gae_lambda,
        )
        metrics = self._update()
        self._merge_statistics(storage.obs)
        counts, totals = torch.stack([finished_count, finished_return]).cpu().tolist()
        for row, values in enumerate(metrics):
            values["env_steps"] = float(cfg.num_steps * self.rows_per_pod)
            values["episodes"] = counts[row]
            if counts[row] > 0:
                values["episode_return"] = totals[row] / counts[row]
        return metrics

    def _pod_rows(self, x: Tensor) -> Tensor:
        """Rollout storage [T, P E, ...] -> [P, T E, ...] (pod p's transitions, time-major as a lone pod's)."""
        steps = x.shape[0]
        by_pod = x.reshape(steps, self.pods, self.rows_per_pod, *x.shape[2:]).transpose(0, 1)
        return by_pod.reshape(self.pods, steps * self.rows_per_pod, *x.shape[2:])

    def _update(self) -> list[dict[str, float]]:
        """Each pod's epochs of clipped-PPO minibatch updates, all pods in each step."""
        cfg, storage = self.config, self.storage
        batch = {
            name: self._pod_rows(getattr(storage, name))
            for name in ("actions", "logprobs", "values", "advantages", "returns")
        }
        batch["obs"] = self._pod_rows(self.normed_obs)
        size = batch["obs"].shape[1]
        self.adam.lr = self.learning_rates()
        active = [True] * self.pods
        epochs_run = [0] * self.pods
        sums: list[Tensor] = []
        for epoch in range(max(self.epochs)):
            active = [on and epoch < self.epochs[row] for row, on in enumerate(active)]
            if not any(active):
                break
            order = self.minibatch_streams.permutations(size, draw=(self.updates << _EPOCH_BITS) + epoch)
            epoch_metrics = []
            for indices in order.chunk(cfg.num_minibatches, dim=1):
                epoch_metrics.append(self._minibatch_step(batch, indices, active))
            epoch_metrics = torch.stack(epoch_metrics)  # [minibatches, P, 5]
            mask = torch.tensor(active, device=self.device)
            sums.append(torch.where(mask.view(1, -1, 1), epoch_metrics, 0.0).sum(dim=0))
            for row, on in enumerate(active):
                epochs_run[row] += int(on)
            if any(math.isfinite(limit) for limit in self.target_kl):
                kl = epoch_metrics[:, :, _METRIC_NAMES.index("approx_kl")].mean(dim=0).cpu().tolist()
                active = [on and not kl[row] > self.target_kl[row] for row, on in enumerate(active)]
        self.updates += 1
        minibatches = -(-size // -(-size // cfg.num_minibatches))  # the chunks `chunk` made
        totals = torch.stack(sums).sum(dim=0).cpu().tolist()  # [P, 5], one host copy
        log_std = self.log_std.detach().mean(dim=1).cpu().tolist()
        variance = _explained_variances(batch["values"], batch["returns"]).cpu().tolist()
        out = []
        for row, agent in enumerate(self.agents):
            count = max(epochs_run[row] * minibatches, 1)
            values = {name: totals[row][k] / count for k, name in enumerate(_METRIC_NAMES)}
            values.update(
                explained_variance=variance[row],
                log_std=log_std[row],
                epochs_run=float(epochs_run[row]),
                learning_rate=self.adam.lr[row],
            )
            agent.env_steps += size
            out.append(values)
        return out

    def _minibatch_step(self, batch: dict[str, Tensor], indices: Tensor, active: list[bool]) -> Tensor:
        """One minibatch update of every active row; metrics [P, 5] (`_METRIC_NAMES`)."""
        cfg = self.config
        size = batch["obs"].shape[1]
        flat = (indices + size * torch.arange(self.pods, device=self.device).unsqueeze(1)).reshape(-1)
        pick = {  # row p's minibatch of its own transitions, [P, m, ...]
            name: value.reshape(-1, *value.shape[2:]).index_select(0, flat).reshape(*indices.shape, *value.shape[2:])
            for name, value in batch.items()
        }
        advantages = pick["advantages"]
        if cfg.norm_adv and advantages.shape[1] > 1:
            advantages = (advantages - advantages.mean(dim=1, keepdim=True)) / (
                advantages.std(dim=1, keepdim=True) + 1e-8
            )
        self.adam.zero_grad()
        count = indices.shape[1]
        sums = []
        for pods, part in self._passes(count):
            piece = {name: value[pods, part] for name, value in pick.items()}
            piece_sums = self._loss_sums(piece, advantages[pods, part], pods)
            ((piece_sums[:, 0] + self.vf_coef[pods] * piece_sums[:, 1]) / count).sum().backward()  # rows never mix
            sums.append((pods, piece_sums.detach()))
        total = torch.zeros(self.pods, 4, device=self.device)
        for pods, piece_sums in sums:
            total[pods] += piece_sums
        entropy = gaussian_entropy_rows(self._action_log_std())
        if self.any_entropy:
            (-self.ent_coef * entropy).sum().backward()
        clip_row_grad_norms(self.params, self.max_grad_norm)
        self.adam.apply(active)
        means = total / count
        return torch.stack([means[:, 0], means[:, 1], entropy.detach(), means[:, 2], means[:, 3]], dim=1)

    def _passes(self, count: int) -> list[tuple[slice, slice]]:
        """The forward and backward passes of a minibatch of ``count`` rows per pod: (pods, rows).

        On the CPU, as `PPOAgent.accumulate_gradients`, at most `PASS_ROWS` network rows (rows, or
        rows x stocks for the per-stock network) a pass, which stay in cache: a pod's minibatch in
        the lone agent's pieces, and as many pods a pass as fit (a small market pod's minibatch is 64
        network rows: every pod in one pass; a per-stock one 25,600: a pod a pass). A row's pieces
        are the lone agent's whatever P is, so its gradient is too. On a GPU, one pass of every pod."""
        if self.device.type != "cpu":
            return [(slice(None), slice(None))]
        per_row = self.agents[0].act_dim if self.per_stock else 1
        pieces = max(1, -(-count * per_row // PASS_ROWS))
        parts = [slice(int(p[0]), int(p[-1]) + 1) for p in torch.arange(count).tensor_split(pieces)]
        piece_rows = -(-count // pieces) * per_row
        together = max(1, PASS_ROWS // piece_rows)
        groups = [slice(start, min(start + together, self.pods)) for start in range(0, self.pods, together)]
        return [(pods, part) for part in parts for pods in groups]

    def _loss_sums(self, pick: dict[str, Tensor], advantages: Tensor, pods: slice) -> Tensor:
        """Each row's sums of the clipped surrogate, the value loss, the approximate KL and the
        clipped indicator over its minibatch piece, [p, 4] for rows ``pods`` (`PPOAgent._loss_sums`)."""
        obs = pick["obs"]  # normalised at collection
        log_std = self._action_log_std()[pods].unsqueeze(1)
        new_logprob = gaussian_log_prob(pick["actions"], self._means(obs, pods), log_std)
        policy, clipped = clipped_surrogate(new_logprob, pick["logprobs"], advantages, self.clip_coef[pods])
        value = self._value_errors(obs, pick["values"], pick["returns"], pods).sum(dim=1)
        with torch.no_grad():
            log_ratio = new_logprob - pick["logprobs"]
            approx_kl = ((log_ratio.exp() - 1.0) - log_ratio).sum(dim=1)
        return torch.stack([policy.sum(dim=1), value, approx_kl, clipped.sum(dim=1).to(value.dtype)], dim=1)

    def _value_errors(self, obs: Tensor, old_values: Tensor, returns: Tensor, pods: slice) -> Tensor:
        """`PPOAgent._value_errors` per row of rows ``pods``, [p, B]."""
        values = self._values(obs, pods)
        unclipped = (values - returns).pow(2)
        if not self.config.clip_vloss:
            return 0.5 * unclipped
        eps = self.clip_coef[pods]
        clipped_values = old_values + (values - old_values).clamp(-eps, eps)
        return 0.5 * torch.maximum(unclipped, (clipped_values - returns).pow(2))

    @torch.no_grad()
    def _merge_statistics(self, observations: Tensor) -> None:
        """Merge each pod's rollout observations into its agent's normaliser (`ObsNormalizer.update`,
        one pod at a time: once an iteration, and a pod's rows stay in cache), then take the rows."""
        if not self.agents[0].normalizer.enabled:
            return
        for agent, rows in zip(self.agents, self._pod_rows(observations), strict=True):
            agent.normalizer.update(rows)
        self._normaliser_rows()

    # -- the Runner contract, per pod
    def state_dict(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        if state:
            raise ConfigError(f"PPOGroupRunner keeps no state between iterations, got {sorted(state)}")


def _rows_forward(module: nn.Module, x: Tensor, pods: slice) -> Tensor:
    """A stacked module's forward for rows ``pods`` only (their parameters' slices, autograd
    through to the whole stack), or for every row."""
    if pods == slice(None):
        return module(x)
    params = {name: value[pods] for name, value in module.named_parameters()}
    return functional_call(module, params, (x,))


def gaussian_entropy_rows(log_std: Tensor) -> Tensor:
    """`trader.agents.ppo.gaussian_entropy` of each row's log-stds [P, A], [P]."""
    return (0.5 + 0.5 * math.log(2.0 * math.pi) + log_std).sum(dim=1)


def _explained_variances(predicted: Tensor, target: Tensor) -> Tensor:
    """`trader.agents.ppo._explained_variance` per row of [P, B]."""
    var_target = target.var(dim=1)
    return torch.where(var_target > 0, 1.0 - (target - predicted).var(dim=1) / var_target, torch.nan)
