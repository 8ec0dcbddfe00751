"""What the environment string of a run means, decided once.

A run names its environment by one string: a gymnasium id (``Pendulum-v1``), the
same id after ``warp:`` (``warp:Ant-v5``: the env stepped on the device by MuJoCo Warp,
`market_envs.warp_mujoco`), the name of a data set recipe in ``datasets/``
(``synthetic-edge-daily``), or the path of a recipe file (``my-universe.toml``). `resolve_env` reads that string once, at
the edge, into an `EnvName`; `trader.train`, a tournament's pods and its
orchestrator all act on the `EnvName`, never on the string.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from market_envs.errors import ConfigError

EnvKind = Literal["gymnasium", "recipe", "recipe_file"]
WARP_PREFIX = "warp:"
"""``warp:Ant-v5``: gymnasium's Ant-v5 on `market_envs.warp_mujoco.WarpMujocoEnv`."""


@dataclass(frozen=True)
class EnvName:
    """A resolved environment name."""

    kind: EnvKind
    """``gymnasium`` (an id of gymnasium's registry, or ``warp:`` and one), ``recipe`` (a recipe of
    ``datasets/`` by name) or ``recipe_file`` (a recipe file)."""
    value: str
    """The gymnasium id, the recipe's name, or the recipe file's absolute path: what
    a run directory records, so that any later stage (or a worker on another machine
    with the same paths) finds the same environment."""

    @property
    def is_gym(self) -> bool:
        return self.kind == "gymnasium"


def resolve_env(name: str | EnvName) -> EnvName:
    """The `EnvName` of a gymnasium id, a recipe name or a recipe path.

    A gymnasium id wins over a file of the same name; a ``.toml`` path that exists is
    a recipe file; anything else is a recipe name, checked when the data set is loaded
    (`market_envs.data.load` names the recipes it knows)."""
    if isinstance(name, EnvName):
        return name
    import gymnasium

    if name in gymnasium.envs.registry:
        return EnvName("gymnasium", name)
    if name.startswith(WARP_PREFIX):
        from market_envs.warp_mujoco import LOCOMOTION

        if name[len(WARP_PREFIX) :] not in LOCOMOTION:
            raise ConfigError(f"{name!r}: MuJoCo Warp runs {', '.join(WARP_PREFIX + i for i in LOCOMOTION)}")
        return EnvName("gymnasium", name)
    path = Path(name)
    if path.suffix == ".toml" and path.is_file():
        return EnvName("recipe_file", str(path.resolve()))
    return EnvName("recipe", name)


def load_market(recipe: str, periods: Mapping[str, Any] | None = None, windows: Mapping[str, Any] | None = None) -> Any:
    """The `MarketData` of a recipe (name or path), loaded once per process and kept
    (the Parquet cache is read on the first call only), cut to explicit bar ``windows``
    (`MarketData.with_windows`) or else ``periods`` (`MarketData.with_periods`) when given:
    a walk-forward fold's windows, a view of the same tensors. Every stage that trains or scores on a recipe loads it here, so a
    fold's periods apply alike in `trader.train`, a tournament's pods and the backtest."""
    from market_envs.data.recipes import find_recipe

    key = find_recipe(recipe).resolved().key()  # a recipe file changed on disk is a new data set
    panel = _load_panel(recipe, key, os.environ.get("PODRACER_DATA_DIR"))
    return panel.with_windows(windows) if windows else panel.with_periods(periods)


@functools.lru_cache(maxsize=4)
def _load_panel(recipe: str, key: str, data_dir: str | None) -> Any:
    """``data_dir`` (the cache's place) is part of the key: another cache is another load."""
    from market_envs.data import load

    return load(recipe)


def run_periods(values: Any) -> dict[str, list[str]] | None:
    """The explicit periods a run file records (``periods`` of config.toml's ``[env]``
    or of tournament.toml), or None when it records none (the recipe's split dates)."""
    if not isinstance(values, Mapping) or not values.get("periods"):
        return None
    return {str(name): [str(b) for b in bounds] for name, bounds in dict(values["periods"]).items()}


__all__ = ["EnvName", "load_market", "resolve_env", "run_periods"]
