"""The two grammars of lengths on the command line and in config files.

- **Wall-clock durations** (`parse_duration`): ``90`` and ``90s`` are seconds, ``10m``
  minutes, ``1.5h`` hours, ``2d`` days: time budgets of tournaments and baselines.
- **Calendar lengths** of data windows (`parse_calendar_length`): ``5y`` years, ``6m``
  months, ``2w`` weeks, ``10d`` calendar days: walk-forward folds. Here ``m`` means
  months, as a quant writes a window, not minutes; the two grammars never meet in one
  flag.
"""

from __future__ import annotations

import math
import re
from typing import Any

from trader.errors import UserError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_SECONDS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str | float, what: str = "duration") -> float:
    """Seconds from ``"90"``, ``"90s"``, ``"10m"``, ``"1.5h"`` or ``"2d"``; anything
    else, or a duration that is not positive, is one `UserError` naming ``what``."""
    match = _DURATION.match(str(text))
    if match is None:
        raise UserError(f"{what} must be a duration like 90s, 10m, 1.5h or 2d, got {text!r}")
    seconds = float(match.group(1)) * _SECONDS[match.group(2)]
    if not seconds > 0 or not math.isfinite(seconds):
        raise UserError(f"{what} must be positive, got {text!r}")
    return seconds


_CALENDAR = re.compile(r"^\s*(\d+)\s*([ymwd])\s*$")
_CALENDAR_UNITS = {"y": "years", "m": "months", "w": "weeks", "d": "days"}


def parse_calendar_length(text: str, what: str = "length") -> Any:
    """A `pandas.DateOffset` from ``"5y"``, ``"6m"`` (months), ``"2w"`` or ``"10d"``
    (calendar days); anything else, or a zero length, is one `UserError` naming ``what``."""
    import pandas as pd

    match = _CALENDAR.match(str(text))
    if match is None or int(match.group(1)) == 0:
        raise UserError(f"{what} must be a positive calendar length like 5y, 6m (months), 2w or 10d, got {text!r}")
    return pd.DateOffset(**{_CALENDAR_UNITS[match.group(2)]: int(match.group(1))})


__all__ = ["parse_calendar_length", "parse_duration"]
