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
    """Mean of the deterministic actions of ``members`` (same obs and action sizes)."""

    def __init__(self, members: Sequence[Agent]) -> None:
        if not members:
            raise UserError("an ensemble needs at least one member")
        dims = {(m.obs_dim, m.act_dim) for m in members}
        if len(dims) != 1:
            raise UserError(f"ensemble members differ in (obs_dim, act_dim): {sorted(dims)}")
        self.members = list(members)
        self.obs_dim, self.act_dim = dims.pop()

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        """Mean action [B, act_dim] in [-1, 1]; always deterministic (the members' means)."""
        return torch.stack([member.act(obs, deterministic=True) for member in self.members]).mean(dim=0)


def load_ensemble(checkpoints: Sequence[str | os.PathLike[str]], device: torch.device | str = "cpu") -> EnsemblePolicy:
    """An `EnsemblePolicy` of the agents saved at ``checkpoints``."""
    return EnsemblePolicy([load_policy(path, device) for path in checkpoints])


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
