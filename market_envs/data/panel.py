"""`MarketData`: one market panel as tensors, and `DataError`.

A panel is T bars x N tickers x F features. Every provider builds one through
`market_envs.data.frame.from_frame`, so this class only holds, slices and moves data;
it never validates raw input.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import torch

from market_envs.devices import resolve_device
from market_envs.errors import UserError

EXCHANGE_TZ = "America/New_York"
PRICE_COLUMNS = ("open", "high", "low", "close", "volume")


def fill_price(missing_columns) -> str:
    """Where an order decided at a bar fills: the next bar's "open", or its "close" when
    the data has no open prices (`MarketData.meta["missing_columns"]`)."""
    return "close" if "open" in missing_columns else "open"


FEATURES_NEED = {"cci_30": ("high", "low"), "dx_30": ("high", "low")}
"""Source columns each derived feature is made of, beyond the close (a price column
needs itself); a feature that needs a column the data lacks is unavailable."""
INDICATOR_NAMES = (
    "macd",
    "boll_ub",
    "boll_lb",
    "rsi_30",
    "cci_30",
    "dx_30",
    "close_30_sma",
    "close_60_sma",
)
FEATURE_NAMES = PRICE_COLUMNS + INDICATOR_NAMES
PERIODS = ("train", "validation", "test")


class DataError(UserError):
    """Bad market data. The message names the file, ticker and timestamp concerned."""


def _as_timestamp(value, tz: str) -> pd.Timestamp:
    """A str, date or Timestamp as a tz-aware Timestamp in the panel's time zone.

    Naive values are read as exchange time.
    """
    stamp = pd.Timestamp(value)
    if stamp.tzinfo is None:
        return stamp.tz_localize(tz)
    return stamp.tz_convert(tz)


@dataclass(frozen=True, eq=False)
class MarketData:
    """A market panel: T bars x N tickers x F features, as tensors on one device.

    :param timestamps: bar times [T], tz-aware, exchange time, strictly increasing.
    :param tickers: ticker symbols [N].
    :param features: float32 [T, N, F]; `feature_names` starts with open, high, low,
        close, volume, then the indicators.
    :param tradable: bool [T, N]; False where a bar was filled forward over a gap, an
        indicator is still warming up, or (a point-in-time universe) the ticker is not a
        member. A stock is traded freely only on its tradable bars.
    :param feature_names: names of the last dimension of `features`.
    :param interval: bar length as a pandas offset alias ("1min", "5min", "1D").
    :param benchmark: optional benchmark close [T] (QQQ for the NASDAQ-100).
    :param benchmark_name: the benchmark's ticker or description.
    :param feature_mean: per-feature mean [F] fitted on the training period only.
    :param feature_std: per-feature standard deviation [F], same period.
    :param name: the data set (recipe) name, for reports and checkpoints.
    :param lookback: float32 [H, N, F]: the features of the H bars before the first, when
        this panel was cut from a longer one (`take`, `slice`, `period`: a view of the longer
        panel's features; a cut of a cut joins its parent's lookback to the bars before it, a
        copy); None: no earlier bar is known. Only estimates over a trailing window read it
        (`features_with_lookback`: the env's cost tables, and its observed features, so that
        the first bars of a period are observed as a live trader sees them); no agent
        observes its bars as rows of its own. `to` leaves it on its device.
    :param reducible: bool [T, N], or None (the default: a panel without a point-in-time
        universe): True where a ticker has a price of its own but is not a member of the
        index (`market_envs.data.membership.apply_membership`; never where `tradable`).
        On those bars a position in it may only shrink: the env sells a long and covers a
        short down to zero at most, and never buys it or sells it short
        (`market_envs.kernel.toward_zero`), so a stock held when it leaves the index can be
        sold.
    """

    timestamps: pd.DatetimeIndex
    tickers: tuple[str, ...]
    features: torch.Tensor
    tradable: torch.Tensor
    feature_names: tuple[str, ...] = FEATURE_NAMES
    interval: str = "1min"
    benchmark: torch.Tensor | None = None
    benchmark_name: str | None = None
    feature_mean: torch.Tensor | None = None
    feature_std: torch.Tensor | None = None
    name: str = "unnamed"
    meta: dict = field(default_factory=dict)
    lookback: torch.Tensor | None = None
    reducible: torch.Tensor | None = None

    def __post_init__(self) -> None:
        t, n = len(self.timestamps), len(self.tickers)
        if self.features.shape != (t, n, len(self.feature_names)):
            raise DataError(
                f"features have shape {tuple(self.features.shape)}, expected "
                f"({t}, {n}, {len(self.feature_names)}) from timestamps, tickers, feature_names"
            )
        if self.tradable.shape != (t, n):
            raise DataError(f"tradable has shape {tuple(self.tradable.shape)}, expected ({t}, {n})")
        if self.reducible is not None and self.reducible.shape != (t, n):
            raise DataError(f"reducible has shape {tuple(self.reducible.shape)}, expected ({t}, {n})")
        if self.benchmark is not None and self.benchmark.shape != (t,):
            raise DataError(f"benchmark has shape {tuple(self.benchmark.shape)}, expected ({t},)")
        if self.timestamps.tz is None:
            raise DataError("timestamps have no time zone; MarketData needs exchange time")
        if self.lookback is not None and self.lookback.shape[1:] != self.features.shape[1:]:
            raise DataError(
                f"lookback has shape {tuple(self.lookback.shape)}, expected (bars, {n}, "
                f"{len(self.feature_names)}) like the features"
            )

    # ----------------------------------------------------------------- views
    @property
    def num_bars(self) -> int:
        return len(self.timestamps)

    @property
    def num_tickers(self) -> int:
        return len(self.tickers)

    @property
    def device(self) -> torch.device:
        return self.features.device

    def feature(self, name: str) -> torch.Tensor:
        """One feature as a [T, N] view."""
        try:
            index = self.feature_names.index(name)
        except ValueError:
            raise DataError(f"no feature {name!r}; the panel has {list(self.feature_names)}") from None
        return self.features[:, :, index]

    @property
    def open(self) -> torch.Tensor:
        return self.feature("open")

    @property
    def close(self) -> torch.Tensor:
        return self.feature("close")

    @property
    def volume(self) -> torch.Tensor:
        return self.feature("volume")

    @property
    def priced(self) -> torch.Tensor:
        """bool [T, N]: the bars where a ticker has a price of its own (not filled over a gap nor
        warming up), member of the index or not: `tradable`, or `reducible` where it is set."""
        return self.tradable if self.reducible is None else self.tradable | self.reducible

    @property
    def start(self) -> pd.Timestamp:
        return self.timestamps[0]

    @property
    def end(self) -> pd.Timestamp:
        return self.timestamps[-1]

    def __repr__(self) -> str:
        span = f"{self.start} .. {self.end}" if self.num_bars else "empty"
        return (
            f"MarketData(name={self.name!r}, bars={self.num_bars}, tickers={self.num_tickers}, "
            f"features={len(self.feature_names)}, interval={self.interval!r}, {span}, "
            f"device={self.device})"
        )

    # ------------------------------------------------------------ transforms
    def to(self, device: torch.device | str) -> MarketData:
        """The same panel with every tensor on `device` (but `lookback`, which stays where it
        is: `features_with_lookback` moves only the bars it is asked for)."""
        device = resolve_device(device)

        def move(x):
            return None if x is None else x.to(device)

        return replace(
            self,
            features=move(self.features),
            tradable=move(self.tradable),
            reducible=move(self.reducible),
            benchmark=move(self.benchmark),
            feature_mean=move(self.feature_mean),
            feature_std=move(self.feature_std),
        )

    def take(self, index: slice) -> MarketData:
        """Bars `index` (a slice over the time axis, step 1) as a new panel; the bars before
        it become its `lookback`."""
        first = index.indices(self.num_bars)[0]
        lookback = self.features[:first]
        if self.lookback is not None:
            lookback = torch.cat([self.lookback, lookback]) if first > 0 else self.lookback
        return replace(
            self,
            timestamps=self.timestamps[index],
            features=self.features[index],
            tradable=self.tradable[index],
            reducible=None if self.reducible is None else self.reducible[index],
            benchmark=None if self.benchmark is None else self.benchmark[index],
            lookback=lookback if len(lookback) else None,
        )

    def lookback_bars(self, bars: int, names: tuple[str, ...] | None = None) -> torch.Tensor:
        """The last h <= `bars` bars of `lookback` (h = 0 without one), [h, N, F], or of the
        features `names` only, [h, N, len(names)], on the features' device."""
        index = None if names is None else self._indices(names)
        if self.lookback is None or bars <= 0:
            width = len(self.feature_names) if index is None else len(index)
            return self.features.new_empty((0, self.num_tickers, width))
        earlier = self.lookback[-bars:] if index is None else self.lookback[-bars:, :, index]
        return earlier.to(self.features.device)

    def _indices(self, names: tuple[str, ...]) -> list[int]:
        """The positions of features `names` in `feature_names`; an unknown name raises `feature`'s error."""
        for name in names:
            self.feature(name)
        return [self.feature_names.index(name) for name in names]

    def features_with_lookback(self, bars: int, names: tuple[str, ...] | None = None) -> tuple[torch.Tensor, int]:
        """The features [h + T, N, F] (or only `names`, in that order) with the h <= `bars` bars
        of `lookback` before them (`lookback_bars`), and h: what an estimate over a trailing
        window reads at the first bars, the costs' (`market_envs.fill.market_tables`) and the
        observed features' (`market_envs.tables.observed_feature_table`)."""
        earlier = self.lookback_bars(bars, names)
        features = self.features if names is None else self.features[:, :, self._indices(names)]
        if not len(earlier):
            return features, 0
        return torch.cat([earlier, features]), len(earlier)

    def slice(self, start=None, end=None) -> MarketData:
        """Bars with `start <= timestamp < end`; either bound may be None.

        Bounds are timestamps, dates or strings; naive ones are read as exchange time.
        """
        tz = str(self.timestamps.tz)
        lo = 0 if start is None else int(self.timestamps.searchsorted(_as_timestamp(start, tz), "left"))
        hi = self.num_bars if end is None else int(self.timestamps.searchsorted(_as_timestamp(end, tz), "left"))
        if hi <= lo:
            raise DataError(
                f"period {start} .. {end} holds no bar of {self.name!r} (data spans {self.start} .. {self.end})"
            )
        return self.take(slice(lo, hi))

    def split(self, train_end, val_end) -> tuple[MarketData, MarketData, MarketData]:
        """Train [start, train_end), validation [train_end, val_end), test [val_end, end].

        Normalisation statistics are fitted on the training part only and carried by
        all three parts.
        """
        tz = str(self.timestamps.tz)
        if _as_timestamp(train_end, tz) >= _as_timestamp(val_end, tz):
            raise DataError(f"split dates out of order: train_end {train_end} >= val_end {val_end}")
        train = self.slice(None, train_end)
        mean, std = train.fit_normalization()
        parts = (train, self.slice(train_end, val_end), self.slice(val_end, None))
        return tuple(replace(p, feature_mean=mean, feature_std=std) for p in parts)

    @property
    def unavailable_features(self) -> tuple[str, ...]:
        """Features the source data could not supply (close-only data, `meta["missing_columns"]`):
        in the panel they are filled from the close (volume: 0) and the env leaves them out
        of its default observation. Empty for full OHLCV data."""
        missing = set(self.meta.get("missing_columns", ()))
        return tuple(name for name in self.feature_names if missing.intersection(FEATURES_NEED.get(name, (name,))))

    @property
    def fill_price(self) -> str:
        """ "open" (the next bar's open) or "close" when the data has no open prices."""
        return fill_price(self.meta.get("missing_columns", ()))

    def with_periods(self, periods) -> MarketData:
        """The same panel (tensors shared, nothing copied) whose `period` reads explicit
        bounds instead of the recipe's split dates: a walk-forward fold's windows.

        :param periods: "train", "validation" and "test" -> ``[first, last]`` bar
            timestamps (ISO strings or timestamps, both included), as
            `trader.folds.Fold.periods` gives them; an empty mapping or None keeps the
            split dates.

        The panel's normalisation statistics are refitted on the new training period
        alone, so nothing after it (a recipe's later training period) leaks into them.
        """
        if not periods:
            return self
        missing = [name for name in PERIODS if name not in periods]
        if missing:
            raise DataError(f"explicit periods need {list(PERIODS)}; missing {missing}")
        bounds = {name: [str(bound) for bound in periods[name]] for name in PERIODS}
        for name, pair in bounds.items():
            if len(pair) != 2:
                raise DataError(f"period {name!r} must be [first, last], got {pair}")
        meta = {key: value for key, value in self.meta.items() if key != "windows"}
        return self._refit(replace(self, meta={**meta, "periods": bounds}))

    def with_windows(self, windows) -> MarketData:
        """The same panel (tensors shared) whose `period` reads bar windows: a walk-forward
        fold's, as `trader.folds` cut them, used as they are (no timestamp in between).

        :param windows: "train", "validation" and "test" -> ``(start, stop)`` bar positions
            of this panel's index (stop excluded); None keeps the panel as it is.

        ``meta["periods"]`` records each window's first and last bar (ISO timestamps), what a
        run directory writes; the statistics are refitted on the training window alone.
        """
        if windows is None:
            return self
        missing = [name for name in PERIODS if name not in windows]
        if missing:
            raise DataError(f"bar windows need {list(PERIODS)}; missing {missing}")
        bars = {}
        for name in PERIODS:
            lo, hi = (int(b) for b in windows[name])
            if not 0 <= lo < hi <= self.num_bars:
                raise DataError(f"{name} window [{lo}, {hi}) is not inside the {self.num_bars} bars of {self.name!r}")
            bars[name] = (lo, hi)
        periods = {
            name: [self.timestamps[lo].isoformat(), self.timestamps[hi - 1].isoformat()]
            for name, (lo, hi) in bars.items()
        }
        return self._refit(replace(self, meta={**self.meta, "periods": periods, "windows": bars}))

    @staticmethod
    def _refit(bounded: MarketData) -> MarketData:
        """``bounded`` with the normalisation statistics of its own training period."""
        mean, std = bounded._bounded("train").fit_normalization()
        return replace(bounded, feature_mean=mean, feature_std=std)

    def period(self, which: str) -> MarketData:
        """ "train", "validation" or "test": the explicit bounds of `with_periods` when
        the panel carries them (`meta["periods"]`), else the split dates in `meta` (set
        by recipes), as in `split`. Normalisation statistics are fitted on the training
        period only and carried by every period."""
        if which not in PERIODS:
            raise DataError(f"unknown period {which!r}; expected one of {list(PERIODS)}")
        if "periods" not in self.meta:
            if "train_end" not in self.meta or "val_end" not in self.meta:
                raise DataError(f"data set {self.name!r} has no split dates (meta train_end/val_end)")
            return self._split_periods[which]
        return self._bounded(which)  # carries the training window's statistics (`with_periods`)

    @functools.cached_property
    def _split_periods(self) -> dict[str, MarketData]:
        """The periods at the split dates of `meta`, split once per panel (fitting the statistics
        reads every bar of the training period): each `period` call returns the same panel, so the
        env tables built on it are built once (`market_envs.tables.shared_tables`)."""
        return dict(zip(PERIODS, self.split(self.meta["train_end"], self.meta["val_end"])))

    def _bounded(self, which: str) -> MarketData:
        """The bars of one explicit period: its bar window (`with_windows`), else its
        bounds (`with_periods`, both included)."""
        if "windows" in self.meta:
            return self.take(slice(*self.meta["windows"][which]))
        first, last = self.meta["periods"][which]
        tz = str(self.timestamps.tz)
        lo = int(self.timestamps.searchsorted(_as_timestamp(first, tz), "left"))
        hi = int(self.timestamps.searchsorted(_as_timestamp(last, tz), "right"))
        if hi <= lo:
            raise DataError(
                f"{which} period {first} .. {last} holds no bar of {self.name!r} "
                f"(data spans {self.start} .. {self.end})"
            )
        return self.take(slice(lo, hi))

    def _period_bars(self) -> dict[str, MarketData]:
        """Each period's bars, without normalisation statistics (for descriptions)."""
        if "periods" in self.meta:
            return {name: self._bounded(name) for name in PERIODS}
        train_end, val_end = self.meta["train_end"], self.meta["val_end"]
        return dict(
            zip(PERIODS, (self.slice(None, train_end), self.slice(train_end, val_end), self.slice(val_end, None)))
        )

    @property
    def has_periods(self) -> bool:
        """The panel knows its train / validation / test periods (explicit or split dates)."""
        return "periods" in self.meta or ("train_end" in self.meta and "val_end" in self.meta)

    def fit_normalization(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-feature mean and std over the tradable bars of this panel.

        Prices and volume are normalised in log space by the env; the statistics here
        are plain moments of the raw features, for indicators and diagnostics.
        """
        mask = self.tradable.unsqueeze(-1).to(self.features.dtype)
        count = mask.sum(dim=(0, 1)).clamp_min(1.0)
        mean = (self.features * mask).sum(dim=(0, 1)) / count
        # one panel-sized temporary at a time, squared and masked in place (a panel of
        # years of minute bars is gigabytes)
        centred = self.features - mean
        var = centred.square_().mul_(mask).sum(dim=(0, 1)) / count
        del centred
        return mean, var.sqrt().clamp_min(1e-8)

    def normalized_features(self) -> torch.Tensor:
        """Features standardised with the training statistics (fitted here if absent)."""
        mean, std = (self.feature_mean, self.feature_std) if self.feature_mean is not None else self.fit_normalization()
        return (self.features - mean) / std

    def with_normalization(self, mean: torch.Tensor, std: torch.Tensor) -> MarketData:
        """The same panel carrying the given normalisation statistics."""
        return replace(self, feature_mean=mean.to(self.device), feature_std=std.to(self.device))

    # ------------------------------------------------------------ conversion
    def to_frame(self) -> pd.DataFrame:
        """The panel as a long DataFrame: timestamp, ticker, features, tradable (and reducible,
        when the panel has it)."""
        t, n = self.num_bars, self.num_tickers
        values = self.features.detach().cpu().numpy().reshape(t * n, -1)
        frame = pd.DataFrame(values, columns=list(self.feature_names))
        frame.insert(0, "ticker", np.tile(np.asarray(self.tickers, dtype=object), t))
        frame.insert(0, "timestamp", np.repeat(self.timestamps, n))
        frame["tradable"] = self.tradable.detach().cpu().numpy().reshape(-1)
        if self.reducible is not None:
            frame["reducible"] = self.reducible.detach().cpu().numpy().reshape(-1)
        return frame

    def benchmark_series(self) -> pd.Series | None:
        """The benchmark close as a pandas Series over the panel's timestamps."""
        if self.benchmark is None:
            return None
        return pd.Series(self.benchmark.detach().cpu().numpy(), index=self.timestamps, name=self.benchmark_name)

    def describe(self) -> dict:
        """`summary` plus the tickers and, when the panel has periods (split dates or
        explicit bounds), each period.

        Written as ``dataset.json`` into run directories (docs/contracts.md), where the
        dashboard's data page reads it without loading the panel.
        """
        card = {**self.summary(), "tickers": [str(t) for t in self.tickers]}
        if self.has_periods:
            card["periods"] = {}
            for name, part in self._period_bars().items():
                card["periods"][name] = {
                    "start": str(part.start),
                    "end": str(part.end),
                    "bars": part.num_bars,
                    "trading_days": int(pd.Index(part.timestamps.date).nunique()),
                    "tradable_fraction": float(part.tradable.float().mean()),
                }
        return card

    def summary(self) -> dict:
        """Plain facts about the panel, for `trader data info` and logs."""
        close = self.close
        first, last = close[0], close[-1]
        days = pd.Index(self.timestamps.date).nunique()
        return {
            "name": self.name,
            "interval": self.interval,
            "start": str(self.start),
            "end": str(self.end),
            "bars": self.num_bars,
            "trading_days": int(days),
            "tickers": self.num_tickers,
            "features": len(self.feature_names),
            "benchmark": self.benchmark_name,
            "tradable_fraction": float(self.tradable.float().mean()),
            # quantile, not torch.median: the mean of the two middle values for an even count
            "median_total_return": float(torch.quantile((last / first - 1.0).double(), 0.5)),
            "memory_mb": round(self.features.numel() * self.features.element_size() / 2**20, 1),
            **({"missing_columns": ",".join(self.meta["missing_columns"])} if self.meta.get("missing_columns") else {}),
            **({"membership_changes": int(self.meta["membership"]["changes"])} if self.meta.get("membership") else {}),
        }
