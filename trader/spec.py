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
- `trader tournament` builds it once (`resolve_market`: a gymnasium id stays a name) and
  `TournamentConfig` carries it, as it is, into every `PodSpec` and so to `trader.train`;
- `trader.train` builds the envs from it (`MarketData.with_windows` takes the windows
  as bar positions) and writes it once into config.toml (``[env]``: the data set, the
  rules, the cost model's name and each window's first and last bar).

`MarketSpec.to_dict` / `MarketSpec.from_dict` are its codec to and from a JSON/TOML-able
dict (tournament.toml's ``[env]`` table, a pod's spec in pods.parquet and events.jsonl):
``dataset``, ``rules`` (every `EnvConfig` key) and, when set, ``windows`` (each window's
``[start, stop)`` bar positions).

Light to import (no torch): `EnvConfig` and the data are imported when used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from trader.errors import ConfigError
from trader.folds import WINDOWS, Windows

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

    def to_dict(self) -> dict[str, Any]:
        """The spec as a JSON/TOML-able dict: ``dataset``, ``rules`` (every `EnvConfig` key)
        and ``windows`` (name -> ``[start, stop)``; left out when None)."""
        from trader.rundir import config_to_dict

        values: dict[str, Any] = {"dataset": self.dataset, "rules": config_to_dict(self.rules)}
        if self.windows is not None:
            values["windows"] = {name: list(bounds) for name, bounds in self.windows.as_dict().items()}
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> MarketSpec:
        """The spec `to_dict` wrote; a missing or unknown key is one `ConfigError` naming it."""
        from market_envs.env import EnvConfig
        from trader.rundir import config_from_dict

        if not isinstance(values, Mapping):
            raise ConfigError(f"a market must be a table of dataset, rules and windows, got {type(values).__name__}")
        unknown = sorted(set(values) - {"dataset", "rules", "windows"})
        if unknown or "dataset" not in values:
            raise ConfigError(
                f"a market takes dataset, rules and windows; got {', '.join(map(str, values)) or 'nothing'}"
            )
        windows = values.get("windows")
        return cls(
            str(values["dataset"]),
            config_from_dict(EnvConfig, dict(values.get("rules") or {})),
            None if not windows else windows_from_dict(windows),
        )


def windows_from_dict(values: Mapping[str, Any]) -> Windows:
    """`Windows` from name -> ``[start, stop)`` bar positions (`MarketSpec.to_dict`'s ``windows``)."""
    missing = [name for name in WINDOWS if name not in values]
    extra = sorted(set(values) - set(WINDOWS))
    if missing or extra:
        raise ConfigError(f"windows needs train, validation and test, got {sorted(values)}")
    return Windows(**{name: (int(values[name][0]), int(values[name][1])) for name in WINDOWS})


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


def resolve_market(
    env: str | MarketSpec,
    rules: EnvConfig | Mapping[str, Any] | None = None,
    *,
    cost: float | None = None,
    costs: NamedCosts | None = None,
    periods: Mapping[str, Any] | None = None,
    windows: Windows | Mapping[str, Any] | None = None,
) -> MarketSpec | str:
    """What a run trains on, resolved once at its entry point: a `MarketSpec` for a data set
    recipe (`market_spec`; bar ``windows`` win over ``periods``, which are then not looked up
    in the data), a gymnasium id as its name (no market: rules, costs or windows beside it are
    one `ConfigError`), a `MarketSpec` as it is (nothing may be given beside it)."""
    given = rules is not None or cost is not None or costs is not None or bool(periods) or bool(windows)
    if isinstance(env, MarketSpec):
        if given:
            raise ConfigError("a MarketSpec carries its rules and windows; give nothing beside it")
        return env
    from trader.environments import resolve_env

    name = resolve_env(env)
    if name.is_gym:
        if given:
            raise ConfigError(
                f"env rules, costs and windows apply to market data sets, not to the gymnasium env {env!r}"
            )
        return name.value
    if windows:
        spec = market_spec(name.value, rules, cost=cost, costs=costs)
        return spec.with_windows(windows if isinstance(windows, Windows) else windows_from_dict(windows))
    return market_spec(name.value, rules, cost=cost, costs=costs, periods=periods)


def market_name(env: str | MarketSpec) -> str:
    """The data set of a market, or a gymnasium id as it is: what a run's line names."""
    return env.dataset if isinstance(env, MarketSpec) else env


__all__ = ["MarketSpec", "market_name", "market_spec", "resolve_market", "windows_from_dict"]
