"""The layers depend downwards only: market_envs never imports trader, tournament or dashboards."""

from __future__ import annotations

import subprocess
import sys

from market_envs.data import DataError
from market_envs.errors import ConfigError as LowerConfigError
from trader.errors import CheckpointError, ConfigError, UserError


def test_market_envs_imports_nothing_from_the_layers_above() -> None:
    script = (  # every module: the packages import their names lazily
        "import importlib, pkgutil, sys, market_envs\n"
        "for module in pkgutil.walk_packages(market_envs.__path__, 'market_envs.'):\n"
        "    importlib.import_module(module.name)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'trader', 'tournament', 'dashboards'}))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-1000:]
    assert out.stdout.strip() == "[]"


def test_the_errors_are_one_family_whichever_layer_names_them() -> None:
    assert ConfigError is LowerConfigError
    assert issubclass(DataError, UserError) and issubclass(CheckpointError, UserError)
