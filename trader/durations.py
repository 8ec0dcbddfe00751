"""The one grammar of wall-clock durations on the command line and in config files.

``90`` and ``90s`` are seconds, ``10m`` minutes, ``1.5h`` hours, ``2d`` days: time
budgets of tournaments and baselines. (Calendar lengths of data windows, where
``6m`` means six months, are another grammar and not read here.)
"""

from __future__ import annotations

import math
import re

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


__all__ = ["parse_duration"]
