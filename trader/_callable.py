"""Callable modules, for the two entry points of the Python API.

`trader.train(...)` and `trader.backtest(...)` are the documented calls, while
`trader.train` and `trader.backtest` are also modules (with `TrainResult`,
`BacktestConfig`, ...). Python lets a module choose its class (`module.__class__`),
so each of the two sets a subclass whose `__call__` forwards to its main function.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any


def make_callable(module_name: str, function: Callable[..., Any]) -> None:
    """Calling module `module_name` calls `function` with the same arguments."""

    class CallableModule(types.ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs)

    CallableModule.__call__.__doc__ = function.__doc__
    sys.modules[module_name].__class__ = CallableModule
