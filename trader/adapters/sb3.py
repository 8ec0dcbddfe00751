"""A Stable-Baselines3 model file as one of our policies: `load_model` reads SB3's own zip format,
`SB3Policy` gives it our ``act(obs, deterministic)`` signature.

SB3 is an optional extra (``baselines``): `sb3_version` says how to install it when it is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from trader.errors import UserError

ALGOS = ("ppo", "sac", "td3", "a2c", "ddpg")
"""SB3 algorithms a baseline may use (continuous actions)."""


def sb3_version() -> str:
    """The installed Stable-Baselines3 version; a clear error when it is missing."""
    try:
        import stable_baselines3
    except ImportError as err:
        raise UserError(
            "Stable-Baselines3 is not installed: run `make` (it installs the 'baselines' extra) "
            "or pip install 'podracer-trader[baselines]'"
        ) from err
    return str(stable_baselines3.__version__)


def algorithm_class(algo: str) -> type:
    """SB3's class for `algo` ("ppo" -> stable_baselines3.PPO)."""
    if algo not in ALGOS:
        raise UserError(f"unknown SB3 algorithm {algo!r}; choose from {list(ALGOS)}")
    sb3_version()
    import stable_baselines3

    return getattr(stable_baselines3, algo.upper())


class SB3Policy:
    """An SB3 model's deterministic policy as ``act(obs [E, obs_dim]) -> actions [E, act_dim]``.

    Observations come from our env as torch tensors; SB3 takes numpy, so each call
    crosses to the host (SB3's own boundary: its policies run from numpy).
    """

    def __init__(self, model: Any) -> None:
        self.model = model

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        actions, _ = self.model.predict(obs.cpu().numpy(), deterministic=True)
        return torch.as_tensor(np.asarray(actions, dtype=np.float32), device=obs.device).clamp(-1.0, 1.0)


def load_model(algo: str, path: Path, device: str = "cpu") -> Any:
    """An SB3 model saved by `fit` (SB3's own zip format)."""
    if not path.is_file():
        raise UserError(f"SB3 model file missing: {path}")
    return algorithm_class(algo).load(str(path), device=device)
