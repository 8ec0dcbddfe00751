"""Market data: one in-memory panel (`MarketData`) from several providers.

Entry points: `MarketData`, `DataError`, `from_frame`, `read_files`, `synthetic`,
`yahoo`, `load` (recipes). Every provider builds its panel through `from_frame`, so
validation and indicators live in one place.

The names are imported on first use, so that importing one submodule (the recipes
for `trader data list`, the edge rule) does not load every provider: the synthetic
market alone pulls in scipy.
"""

from __future__ import annotations

import importlib
import sys
import types

_LAZY = {
    "EXCHANGE_TZ": "market_envs.data.panel",
    "FEATURE_NAMES": "market_envs.data.panel",
    "INDICATOR_NAMES": "market_envs.data.panel",
    "DataError": "market_envs.data.panel",
    "MarketData": "market_envs.data.panel",
    "EdgeSpec": "market_envs.data.edge",
    "oracle_weights": "market_envs.data.edge",
    "from_frame": "market_envs.data.frame",
    "load": "market_envs.data.recipes",
    "read_files": "market_envs.data.files",
    "write_files": "market_envs.data.files",
    "synthetic": "market_envs.data.synthetic",
    "yahoo": "market_envs.data.yahoo",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'market_envs.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """`synthetic` and `yahoo` name both a function and the submodule defining it.
    Python binds a submodule on its package when it is first imported, which would
    turn `market_envs.data.synthetic` into the module whenever something imported
    the submodule first; the package keeps the function instead, as it did when it
    imported every provider eagerly."""

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, types.ModuleType) and _LAZY.get(name) == value.__name__:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
