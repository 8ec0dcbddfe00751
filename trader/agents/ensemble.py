"""An ensemble: several agents acting as one policy (a tournament's members).

**Combined in portfolio space.** In the env's ``weights`` mode each member's action goes
through the env's own mapping to its aim portfolio (`market_envs.env.aim_weights`: the
linear or normalized map, market neutrality, the leverage), the aims are averaged with
the members' weights, and the ensemble's action is the one whose aim is that average
(`market_envs.env.aim_actions`); the env then moves the book toward it at its trade rate
and within its band, and applies its limits (cash, participation, leverage). Averaging
the raw actions instead would weight members by the size of their actions under the
normalized map (an action of gross 4 and one of gross 1 give aims of equal gross), and is
what the ensemble did before. Under a trade rate, averaging aims equals averaging the
books each member would move to (the rate is linear); under a no-trade band the band
applies once, to the averaged aim. With a trade rate the policy chooses
(``EnvConfig.rate_action``) the members' rates are averaged as well, stock by stock (the book
then moves toward the mean aim at the mean rate: a member that would hold still pulls the
ensemble's pace down by its weight). In ``shares`` mode the action is an order, and the
mean order is the combination.

It has ``act(obs, deterministic=True)`` like an agent, so `trader.backtest` takes it
wherever it takes a policy; give the backtest the members' env rules (`ensemble_rules`)
so it trades them as they were trained.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from torch import Tensor

from market_envs.config import EnvConfig
from market_envs.kernel import aim_actions, aim_weights, policy_rates, rate_actions
from trader.agents.base import Agent
from trader.rundir import config_from_dict
from trader.agents.checkpoint import load_policy, read_metadata
from trader.errors import UserError


class EnsemblePolicy:
    """The members' deterministic actions combined (see the module docstring).

    :param weights: one weight per member, >= 0 and summing to 1; None: equal weights.
    :param rules: the env rules the members trade under; in weights mode their aims are
        averaged (portfolio space), else (None, or shares mode) their actions.
    """

    def __init__(
        self, members: Sequence[Agent], weights: Sequence[float] | None = None, rules: EnvConfig | None = None
    ) -> None:
        if not members:
            raise UserError("an ensemble needs at least one member")
        dims = {(m.obs_dim, m.act_dim) for m in members}
        if len(dims) != 1:
            raise UserError(f"ensemble members differ in (obs_dim, act_dim): {sorted(dims)}")
        weights = [1.0 / len(members)] * len(members) if weights is None else [float(w) for w in weights]
        if len(weights) != len(members) or min(weights) < 0 or abs(sum(weights) - 1.0) > 1e-9:
            raise UserError(f"ensemble weights must be {len(members)} numbers >= 0 summing to 1, got {weights}")
        self.members = list(members)
        self.weights = weights
        self.rules = rules if rules is not None and rules.action_mode == "weights" else None
        self._weight_tensors: dict[tuple[torch.device, torch.dtype], Tensor] = {}
        self.obs_dim, self.act_dim = dims.pop()

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        """Weighted mean action [B, act_dim] in [-1, 1]; always deterministic (the members' means)."""
        raw = torch.stack([member.act(obs, deterministic=True) for member in self.members])
        dtype = raw.dtype
        if self.rules is None:
            return torch.tensordot(self._weights(raw), raw, dims=1)
        # portfolio space: the members' aims, averaged, back to an action
        stocks = raw.shape[-1] // self.rules.actions_per_stock
        aims = aim_weights(raw.flatten(0, 1), self.rules).view(*raw.shape[:-1], stocks)
        combined = aim_actions(torch.tensordot(self._weights(aims), aims, dims=1), self.rules)
        if self.rules.rate_action:  # and each stock's rate, averaged, back to its rate action
            rates = policy_rates(raw[..., stocks:].to(torch.float64).clamp(-1.0, 1.0))
            combined = torch.cat([combined, rate_actions(torch.tensordot(self._weights(rates), rates, dims=1))], -1)
        return combined.to(dtype)

    def _weights(self, like: Tensor) -> Tensor:
        """The members' weights on `like`'s device and dtype, made once per pair: no host copy per step."""
        key = (like.device, like.dtype)
        if key not in self._weight_tensors:
            self._weight_tensors[key] = torch.tensor(self.weights, dtype=like.dtype, device=like.device)
        return self._weight_tensors[key]


def load_ensemble(
    checkpoints: Sequence[str | os.PathLike[str]],
    device: torch.device | str = "cpu",
    weights: Sequence[float] | None = None,
) -> EnsemblePolicy:
    """An `EnsemblePolicy` of the agents saved at ``checkpoints`` (``weights`` as there),
    combined under the env rules they were trained under (`ensemble_rules`)."""
    return EnsemblePolicy([load_policy(path, device) for path in checkpoints], weights, ensemble_rules(checkpoints))


def ensemble_rules(checkpoints: Sequence[str | os.PathLike[str]]) -> EnvConfig:
    """The env rules the members were trained under; they must agree."""
    rules = set()
    for path in checkpoints:
        window = read_metadata(path).get("data_window") or {}
        if "env_config" not in window:
            raise UserError(f"checkpoint {path} records no env rules (not a market run)")
        rules.add(config_from_dict(EnvConfig, window["env_config"]))
    if len(rules) != 1:
        raise UserError(f"ensemble members were trained under different env rules: {len(rules)} variants")
    return rules.pop()
