"""The trials of a run (``trials.parquet``): each trial's key and its daily validation returns,
the evidence a selection's deflated Sharpe ratio is computed from."""

from __future__ import annotations

import os
from typing import Any

from trader.rundir.files import RunFileError
from trader.rundir.reads import read_parquet


TRIAL_KEYS = ("pod_id", "step", "score")
"""The columns of ``trials.parquet`` that describe a trial; every other column is one
validation day (``YYYY-MM-DD``) holding that trial's daily return."""


def trials_frame(keys: Any, daily: list[Any]) -> Any:
    """``trials.parquet``'s table: one row per validation pass (a trial), its
    `TRIAL_KEYS` columns from the DataFrame ``keys`` (``pod_id`` only in a
    tournament), then its daily returns (``daily``, one pandas Series per trial,
    indexed by date), one column per date of their union (NaN where a trial has none)."""
    import pandas as pd

    if len(keys) != len(daily):
        raise ValueError(f"{len(keys)} trial keys for {len(daily)} return series")
    returns = pd.concat([pd.Series(d).rename(i) for i, d in enumerate(daily)], axis=1).T if daily else pd.DataFrame()
    returns.columns = [pd.Timestamp(c).strftime("%Y-%m-%d") for c in returns.columns]
    return pd.concat([keys.reset_index(drop=True), returns.reset_index(drop=True)], axis=1)


def read_trials(path: str | os.PathLike[str]) -> tuple[Any, Any]:
    """``(keys, returns)`` of a ``trials.parquet``: the `TRIAL_KEYS` columns present,
    and the daily returns [trials x days] with a DatetimeIndex of the days as columns."""
    import pandas as pd

    frame = read_parquet(path)
    key_columns = [c for c in TRIAL_KEYS if c in frame.columns]
    returns = frame.drop(columns=key_columns).astype(float)
    try:
        returns.columns = pd.DatetimeIndex(returns.columns)
    except (ValueError, TypeError) as err:
        raise RunFileError(f"{path}: a column is neither a trial key nor a date ({err})") from None
    return frame[key_columns], returns
