"""Walk-forward folds: where each fold trains, validates and tests (pure, torch-free).

A fold is three windows of bars of one data set, in this order and never overlapping:
**train**, then **validation** (where the fold selects its snapshot, pod or model),
then **test** (traded once, never seen by the fold's choices). The windows are laid
out in calendar time from the first session of the data (its midnight, exchange time):

- fold k's base is ``first + k x step``; its training window runs from the base
  (rolling) or from the first session (``expanding``) to ``base + train``; its
  validation window covers the next ``validation``; its test window the next ``test``;
- a fold exists when its whole test window lies inside the data (a shorter last window
  is left out, not tested on a stub); a window whose calendar end falls after the
  data's last day by days without an exchange session only (a weekend, New Year's
  Day) is whole: yearly windows anchored on 2 January test the data's last year;
- ``embargo`` bars are purged from the end of the training window and from the end of
  the validation window (López de Prado's purged cross-validation): a label or an
  indicator that looks a few bars ahead cannot carry the next window into this one.
  The test windows keep every bar, so they stay consecutive.

Test windows never overlap (a ``step`` shorter than ``test`` is refused: the stitched
record would count a day twice); with ``step == test`` (the default) they are
consecutive, as the stitched out-of-sample record needs.

Bars are positions in the data's timestamp index; calendar bounds become positions by
``searchsorted``, so any bar interval (minutes, days) works, and a window always holds
whole sessions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trader.durations import parse_calendar_length
from trader.errors import UserError

WINDOWS = ("train", "validation", "test")
MIN_BARS = 2
"""Fewest bars a window may hold: one to decide on, one to fill at."""


@dataclass(frozen=True)
class FoldSpec:
    """How to cut a data set into folds (lengths in the calendar grammar: 5y, 6m, 2w, 10d).

    :param train: length of each training window (the first one's, with ``expanding``).
    :param validation: length of each validation window.
    :param test: length of each test window.
    :param step: how far each fold moves on; None: the test length.
    :param expanding: training windows all start at the first session (anchored).
    :param embargo: bars purged between train | validation and validation | test.
    """

    train: str
    validation: str
    test: str
    step: str | None = None
    expanding: bool = False
    embargo: int = 0

    def __post_init__(self) -> None:
        for name in ("train", "validation", "test", "step"):
            value = getattr(self, name)
            if value is not None:
                parse_calendar_length(value, f"--{name}")
        if isinstance(self.embargo, bool) or not isinstance(self.embargo, int) or self.embargo < 0:
            raise UserError(f"--embargo must be a whole number of bars >= 0, got {self.embargo!r}")

    def offsets(self) -> dict[str, Any]:
        """``train``, ``validation``, ``test`` and ``step`` as `pandas.DateOffset`."""
        out = {name: parse_calendar_length(getattr(self, name), f"--{name}") for name in WINDOWS}
        out["step"] = out["test"] if self.step is None else parse_calendar_length(self.step, "--step")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "train": self.train,
            "validation": self.validation,
            "test": self.test,
            "step": self.step or self.test,
            "expanding": self.expanding,
            "embargo": self.embargo,
        }


@dataclass(frozen=True)
class Windows:
    """A run's train, validation and test periods as bar positions ``[start, stop)`` of
    its data set's index: what `MarketData.with_windows` cuts, as it is."""

    train: tuple[int, int]
    validation: tuple[int, int]
    test: tuple[int, int]

    def window(self, name: str) -> tuple[int, int]:
        return {"train": self.train, "validation": self.validation, "test": self.test}[name]

    def as_dict(self) -> dict[str, tuple[int, int]]:
        """Period name -> ``(start, stop)``, as `MarketData.with_windows` takes them."""
        return {name: self.window(name) for name in WINDOWS}

    def periods(self, timestamps: Any) -> dict[str, list[str]]:
        """Each window as ``[first bar, last bar]`` (ISO timestamps, both included): how a
        run directory records it (config.toml's ``[env.periods]``, fold.json's ``windows``)."""
        return {
            name: [timestamps[lo].isoformat(), timestamps[hi - 1].isoformat()]
            for name, (lo, hi) in self.as_dict().items()
        }

    @classmethod
    def from_periods(cls, periods: Any, timestamps: Any) -> Windows:
        """The windows a run file records as ``[first, last]`` bounds (`periods`), found in
        ``timestamps`` (both bounds included; naive bounds are read in the index's zone)."""
        import pandas as pd

        missing = [name for name in WINDOWS if name not in periods]
        if missing:
            raise UserError(f"periods need {list(WINDOWS)}; missing {missing}")
        bars = {}
        for name in WINDOWS:
            first, last = (pd.Timestamp(str(b)) for b in periods[name])
            first, last = (
                t.tz_localize(timestamps.tz) if t.tzinfo is None else t.tz_convert(timestamps.tz) for t in (first, last)
            )
            lo, hi = int(timestamps.searchsorted(first, "left")), int(timestamps.searchsorted(last, "right"))
            if hi <= lo:
                raise UserError(
                    f"{name} period {periods[name][0]} .. {periods[name][1]} holds no bar of the data "
                    f"({timestamps[0]} .. {timestamps[-1]})"
                )
            bars[name] = (lo, hi)
        return cls(**bars)


@dataclass(frozen=True)
class Fold:
    """One fold: each window as bar positions ``[start, stop)`` of the data's index."""

    index: int
    train: tuple[int, int]
    validation: tuple[int, int]
    test: tuple[int, int]

    def window(self, name: str) -> tuple[int, int]:
        return {"train": self.train, "validation": self.validation, "test": self.test}[name]

    @property
    def windows(self) -> Windows:
        """The fold's windows, as a run takes them (`trader.spec.MarketSpec`)."""
        return Windows(self.train, self.validation, self.test)

    def periods(self, timestamps: Any) -> dict[str, list[str]]:
        """Each window as ``[first bar, last bar]`` (ISO timestamps, both included), as
        the fold's record (fold.json) and its run directory write it."""
        return self.windows.periods(timestamps)


def make_folds(timestamps: Any, spec: FoldSpec) -> list[Fold]:
    """The folds of a data set whose bars are ``timestamps`` (a sorted, tz-aware
    `pandas.DatetimeIndex`), laid out as the module docstring says.

    :raises UserError: no fold fits the data, a window of a fold holds fewer than
        `MIN_BARS` bars (after the embargo), or the test windows would overlap.
    """
    if len(timestamps) < MIN_BARS:
        raise UserError(f"the data holds {len(timestamps)} bar(s); walk-forward needs far more")
    offsets = spec.offsets()
    anchor = timestamps[0].normalize()
    data_end = timestamps[-1].normalize() + _one_day()
    if anchor + offsets["step"] < anchor + offsets["test"]:
        raise UserError(f"--step {spec.step} is shorter than --test {spec.test}: the test windows would overlap")
    folds: list[Fold] = []
    while True:
        base = anchor + offsets["step"] * len(folds) if folds else anchor
        train_end = base + offsets["train"]
        val_end = train_end + offsets["validation"]
        test_end = val_end + offsets["test"]
        if test_end > data_end and not _closed_days_only(data_end, test_end):
            break
        start = anchor if spec.expanding else base
        cut = [int(timestamps.searchsorted(b, "left")) for b in (start, train_end, val_end, test_end)]
        fold = Fold(len(folds), (cut[0], cut[1] - spec.embargo), (cut[1], cut[2] - spec.embargo), (cut[2], cut[3]))
        _check(fold, timestamps, spec)
        folds.append(fold)
    if not folds:
        first_end = anchor + offsets["train"] + offsets["validation"] + offsets["test"]
        raise UserError(
            f"the data ({timestamps[0].date()} .. {timestamps[-1].date()}) is too short for one fold: "
            f"train {spec.train} + validation {spec.validation} + test {spec.test} reach {first_end.date()}"
        )
    return folds


def _check(fold: Fold, timestamps: Any, spec: FoldSpec) -> None:
    for name in WINDOWS:
        lo, hi = fold.window(name)
        if hi - lo < MIN_BARS:
            purged = f" after an embargo of {spec.embargo} bars" if spec.embargo and name != "test" else ""
            where = f"from {timestamps[min(lo, len(timestamps) - 1)].date()}"
            raise UserError(
                f"fold {fold.index}: the {name} window {where} holds {max(hi - lo, 0)} bar(s){purged}; "
                f"it needs at least {MIN_BARS} (lengthen --{name} or shorten --embargo)"
            )


def _closed_days_only(start: Any, end: Any) -> bool:
    """No exchange session lies in [start, end) (a weekend, a holiday): data that ends
    before ``end`` misses nothing there. Stretches longer than a week never qualify."""
    from market_envs.data.calendar import sessions
    from market_envs.errors import ConfigError

    if end - start > _one_day() * 7 or start.year < 1990:
        return False
    try:
        sessions(start, end)
    except ConfigError:  # the range holds no session
        return True
    return False


def consecutive(folds: list[Fold]) -> bool:
    """Each test window starts at the bar after the previous one's last bar."""
    return all(a.test[1] == b.test[0] for a, b in zip(folds, folds[1:]))


def _one_day() -> Any:
    import pandas as pd

    return pd.Timedelta(days=1)


__all__ = ["MIN_BARS", "WINDOWS", "Fold", "FoldSpec", "Windows", "consecutive", "make_folds"]
