"""The public paths a user's code and shell reach for keep working whatever the modules behind them
move (issue 76): the env and its config, the Python API, the tournament and the `trader` command."""

from __future__ import annotations

import inspect
from importlib.metadata import entry_points


def test_the_env_and_its_config_are_at_the_package():
    from market_envs import EnvConfig, StockTradingVecEnv

    assert inspect.isclass(StockTradingVecEnv) and inspect.isclass(EnvConfig)
    assert EnvConfig().initial_cash > 0


def test_the_python_api():
    import trader

    for name in ("train", "backtest", "baselines", "act"):
        assert callable(getattr(trader, name)), name
    assert "run_dir" in inspect.signature(trader.train).parameters


def test_the_tournament():
    import tournament

    assert callable(tournament.run) and inspect.isclass(tournament.TournamentConfig)


def test_the_trader_command_is_installed_and_loads():
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "trader"]
    assert script.value == "podracer.cli:entry_point"
    assert callable(script.load())
