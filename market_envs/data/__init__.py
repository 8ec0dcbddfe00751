"""Market data: one in-memory panel (`MarketData`) from several providers.

Entry points: `MarketData`, `DataError`, `from_frame`, `read_files`, `synthetic`,
`yahoo`, `load` (recipes). Every provider builds its panel through `from_frame`, so
validation and indicators live in one place.
"""

from market_envs.data.edge import EdgeSpec, oracle_weights
from market_envs.data.files import read_files, write_files
from market_envs.data.frame import from_frame
from market_envs.data.panel import EXCHANGE_TZ, FEATURE_NAMES, INDICATOR_NAMES, DataError, MarketData
from market_envs.data.recipes import load
from market_envs.data.synthetic import synthetic
from market_envs.data.yahoo import yahoo

__all__ = [
    "EXCHANGE_TZ",
    "FEATURE_NAMES",
    "INDICATOR_NAMES",
    "DataError",
    "EdgeSpec",
    "MarketData",
    "from_frame",
    "load",
    "oracle_weights",
    "read_files",
    "synthetic",
    "write_files",
    "yahoo",
]
