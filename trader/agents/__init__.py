"""Agents (PPO, SAC, TD3) on one contract, and the registry that builds them by name.

Each algorithm module defines a module-level ``SPEC = AlgoSpec(name, config_cls,
agent_cls, runner_cls)`` (see ``trader.agents.base``). Plugging in an algorithm is one
entry in ``SPEC_MODULES`` (name -> module path) plus its name in ``ALGOS``
(``trader.names``, light, so the CLI lists the names without importing torch); modules
are imported lazily, so an algorithm whose module is absent fails with a clear
``UserError`` only when it is asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from trader.agents.base import Agent, AlgoSpec, Runner
from trader.rundir import config_from_dict
from trader.errors import UserError
from trader.names import ALGOS

SPEC_MODULES: dict[str, str] = {
    "ppo": "trader.agents.ppo",
    "sac": "trader.agents.sac",
    "td3": "trader.agents.td3",
}
"""The registry: algorithm name -> the module that defines its ``SPEC``."""

__all__ = ["ALGOS", "SPEC_MODULES", "Agent", "AlgoSpec", "Runner", "get_spec", "make_agent", "make_config"]


def get_spec(algo: str) -> AlgoSpec:
    """The ``AlgoSpec`` of ``algo``; unknown or missing algorithms raise ``UserError``."""
    if algo not in SPEC_MODULES:
        raise UserError(f"unknown algo '{algo}'; choose one of {', '.join(ALGOS)}")
    module_name = SPEC_MODULES[algo]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name != module_name:
            raise
        raise UserError(f"algo '{algo}' is not available yet ({module_name} missing)") from err
    spec = getattr(module, "SPEC", None)
    if not isinstance(spec, AlgoSpec):
        raise UserError(f"algo '{algo}': {module_name} defines no SPEC = AlgoSpec(...)")
    return spec


def make_config(algo: str, overrides: dict[str, Any] | None = None) -> Any:
    """The algorithm's default config with ``overrides`` applied (unknown keys raise)."""
    return config_from_dict(get_spec(algo).config_cls, overrides or {})


def make_agent(
    algo: str,
    obs_dim: int,
    act_dim: int,
    config: Any = None,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> Agent:
    """Build an agent by name; ``config`` is a config instance, a dict of overrides or None."""
    spec = get_spec(algo)
    if config is None or isinstance(config, dict):
        config = config_from_dict(spec.config_cls, config or {})
    return spec.agent_cls(obs_dim, act_dim, config, device, seed)
