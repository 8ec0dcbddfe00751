"""An ensemble: several agents acting as one policy (the tournament's top-k pods).

Its action is the mean of the members' deterministic actions. In the env's
``weights`` mode that is the mean target portfolio; in ``shares`` mode the mean
order. It has ``act(obs, deterministic=True)`` like an agent, so `trader.backtest`
takes it wherever it takes a policy; give the backtest the members' env rules
(`ensemble_rules`) so it trades them as they were trained.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from torch import Tensor

from market_envs.env import EnvConfig
from trader.agents.base import Agent
from trader.rundir import config_from_dict
from trader.agents.checkpoint import load_policy, read_metadata
from trader.errors import UserError


class EnsemblePolicy:
    """Weighted mean of the deterministic actions of ``members`` (same obs and action sizes).

    :param weights: one weight per member, >= 0 and summing to 1; None: equal weights.
    """

    def __init__(self, members: Sequence[Agent], weights: Sequence[float] | None = None) -> None:
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
        self._weight_tensors: dict[tuple[torch.device, torch.dtype], Tensor] = {}
        self.obs_dim, self.act_dim = dims.pop()

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        """Weighted mean action [B, act_dim] in [-1, 1]; always deterministic (the members' means)."""
        actions = torch.stack([member.act(obs, deterministic=True) for member in self.members])
        key = (actions.device, actions.dtype)
        if key not in self._weight_tensors:  # made once per device: no host copy per step
            self._weight_tensors[key] = torch.tensor(self.weights, dtype=actions.dtype, device=actions.device)
        return torch.tensordot(self._weight_tensors[key], actions, dims=1)


def load_ensemble(checkpoints: Sequence[str | os.PathLike[str]], device: torch.device | str = "cpu",
                  weights: Sequence[float] | None = None) -> EnsemblePolicy:  # fmt: skip
    """An `EnsemblePolicy` of the agents saved at ``checkpoints`` (``weights`` as there)."""
    return EnsemblePolicy([load_policy(path, device) for path in checkpoints], weights)


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
