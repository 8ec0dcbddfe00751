"""The spec of a market run, built once where the run starts and handed down as it is.

A `MarketSpec` is what a market run trains and is judged on: the data set, its periods
as bar windows (`trader.folds.Windows`; None: the recipe's split dates) and the env
rules (`EnvConfig`, the cost model in them as a `CostModel`), all as objects.

- `trader train` builds it once (`market_spec`) from its flags or from a run's
  config.toml: the rules' keys (a preset's, a file's) become an `EnvConfig` once, and
  ``--costs MODEL`` / ``--cost RATE`` are set on that object (`NamedCosts.apply`), never
  written into a dict on the way;
- `trader walkforward` builds one per fold (its rules once, each fold's windows as
  `trader.folds` cut them) and hands it to training, to the baselines and to the test
  step, none of which reads it back from the fold's files;
- `trader.train` builds the envs from it (`MarketData.with_windows` takes the windows
  as bar positions) and writes it once into config.toml (``[env]``: the data set, the
  rules, the cost model's name and each window's first and last bar).

Light to import (no torch): `EnvConfig` and the data are imported when used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from trader.errors import ConfigError
from trader.folds import Windows

if TYPE_CHECKING:
    from market_envs.costs import NamedCosts
    from market_envs.data import MarketData
    from market_envs.config import EnvConfig


@dataclass(frozen=True)
class MarketSpec:
    """A market run's data set, bar windows and env rules."""

    dataset: str
    """The data set recipe as a run records it (`trader.environments.resolve_env`: a
    recipe of ``datasets/`` by name, a recipe file by its absolute path)."""
    rules: EnvConfig
    """The env rules, the cost model in them (``buy_cost``, ``sell_cost``, ``costs``)."""
    windows: Windows | None = None
    """The train / validation / test bar windows of the data set's index; None: the
    recipe's split dates."""

    def __post_init__(self) -> None:
        from market_envs.config import EnvConfig

        if not isinstance(self.rules, EnvConfig):
            raise ConfigError(f"MarketSpec.rules must be an EnvConfig, got {type(self.rules).__name__}")
        if self.windows is not None and not isinstance(self.windows, Windows):
            raise ConfigError(
                f"MarketSpec.windows must be trader.folds.Windows or None, got {type(self.windows).__name__}"
            )

    def data(self) -> MarketData:
        """The data set (loaded once per process, `trader.environments.load_market`) cut
        to the windows: a view whose `period` reads them as bar positions."""
        from trader.environments import load_market

        data = load_market(self.dataset)
        return data if self.windows is None else data.with_windows(self.windows.as_dict())

    def with_windows(self, windows: Windows | None) -> MarketSpec:
        """This spec on other windows (a walk-forward's next fold)."""
        return replace(self, windows=windows)


def market_spec(
    dataset: str,
    rules: EnvConfig | Mapping[str, Any] | None = None,
    *,
    cost: float | None = None,
    costs: NamedCosts | None = None,
    periods: Mapping[str, Any] | None = None,
) -> MarketSpec:
    """The spec of a market run, built at its entry point.

    :param dataset: a data set recipe (name or path).
    :param rules: `EnvConfig` keys as a preset or a run file gives them (read once into
        an `EnvConfig` here), an `EnvConfig`, or None (the defaults).
    :param cost: ``--cost RATE``: the commission rate on both sides (other terms kept).
    :param costs: ``--costs MODEL``: a `NamedCosts` whose rates and `CostModel` replace the
        rules' own, set on the `EnvConfig` as they are.
    :param periods: ``[first, last]`` bounds a run file records (config.toml's
        ``[env.periods]``), found once in the data as bar windows; None: the split dates.
    """
    from market_envs.config import EnvConfig
    from trader.environments import load_market, resolve_env
    from trader.rundir import config_from_dict

    name = resolve_env(dataset)
    if name.is_gym:
        raise ConfigError(f"a market spec needs a data set recipe, not the gymnasium env {dataset!r}")
    if costs is not None and cost is not None:
        raise ConfigError("give a commission rate or a named cost model, not both")
    env = rules if isinstance(rules, EnvConfig) else config_from_dict(EnvConfig, dict(rules or {}))
    if costs is not None:
        env = costs.apply(env)
    elif cost is not None:
        env = replace(env, buy_cost=cost, sell_cost=cost)
    windows = None if not periods else Windows.from_periods(periods, load_market(name.value).timestamps)
    return MarketSpec(name.value, env, windows)


__all__ = ["MarketSpec", "market_spec"]
