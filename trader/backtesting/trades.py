"""The trade list of a backtest: every fill, with its price and its costs by term.

A strategy's per-bar positions say what it held after each bar's fill; the difference
between two bars is the fill at the later bar's open. Each fill is valued and charged by
the env's own cost functions (`market_envs.fill.fill_costs`), so the list sums to the
report: its values to the strategy's traded value, its commission, spread and impact
to the report's cost breakdown (the borrow fee is charged on a position at the close,
not on a fill, and is not in the list). Computed once after the backtest, from the
positions it recorded, never inside its per-bar loop.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from market_envs.fill import FILL_PARTS

COLUMNS = ("timestamp", "ticker", "side", "shares", "price", *FILL_PARTS)
"""The columns of a trade list, one row per fill of one ticker."""

CHUNK = 4096
"""Bars valued per call (bounds the [bars, tickers] temporaries)."""


def trade_list(env, positions: pd.DataFrame, value: np.ndarray) -> pd.DataFrame:
    """The fills of one strategy (see the module docstring).

    :param env: the backtest's env of the strategy (its panel, tables and rules).
    :param positions: shares held after each bar's fill, one row per bar of the env's panel;
        the first row is the start (all cash, or the strategy's starting book).
    :param value: the strategy's value at each bar; 0 from a ruin on (no fill is recorded there).
    """
    held = positions.to_numpy(dtype=np.float64)
    before_all = np.vstack([held[:1], held[:-1]])
    frames = []
    for first in range(1, len(held), CHUNK):  # bar 0 is the start: its record holds no fill
        bars = np.arange(first, min(first + CHUNK, len(held)))
        before, after = before_all[bars], held[bars]
        moved = (before != after).any(axis=1) & (value[bars] != 0)
        if not moved.any():
            continue
        bars, before, after = bars[moved], before[moved], after[moved]
        parts = env.fill_costs(torch.from_numpy(before), torch.from_numpy(after), torch.from_numpy(bars))
        parts = {key: tensor.cpu().numpy() for key, tensor in parts.items()}
        rows, cols = np.nonzero(before != after)
        delta = after[rows, cols] - before[rows, cols]
        frames.append(
            pd.DataFrame(
                {
                    "timestamp": positions.index[bars[rows]],
                    "ticker": np.asarray(positions.columns)[cols],
                    "side": np.where(delta > 0, "buy", "sell"),
                    "shares": np.abs(delta),
                    **{key: parts[key][rows, cols] for key in ("price", *FILL_PARTS)},
                }
            )
        )
    if not frames:
        return pd.DataFrame(
            {c: pd.Series(dtype=float if c not in ("timestamp", "ticker", "side") else object) for c in COLUMNS}
        )
    return pd.concat(frames, ignore_index=True)[list(COLUMNS)]
