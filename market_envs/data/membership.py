"""Point-in-time universes: who was in the index when, and the tradable mask it implies.

A **membership file** (CSV) lists, one row per stay in the index:

    ticker,from,to
    AAPL,1985-01-01,
    SIRI,2013-12-23,2021-12-20
    ZM,2020-04-30,2022-12-19

`from` is the first day of membership and `to` the first day *out* (exclusive, like
every range here); an empty `to` means still a member. A ticker may come back (one
row per stay); stays of one ticker may not overlap.

With such a file a recipe's universe is every ticker that was a member at some time
in the window (so the panel holds the firms that left, not only the survivors), and
a ticker is tradable only on days it was a member: masked untradable before it joined
and after it left (`apply_membership`). Its prices stay in the panel, so the
observation never changes shape. On a bar where a ticker has a price but is not a
member (`MarketData.reducible`) a position in it may only shrink: the env sells a long
and covers a short, down to zero at most, and never buys it, sells it short or turns
a position through zero (`market_envs.kernel.toward_zero`). So a stock held when it
leaves the index can be sold (it is not sold by force: the policy decides when), and
a stock never held while it was out is never traded then.

Without a membership file, `survivorship_gap` tells how far a window lies from the
date its ticker list was taken (`[universe] as_of`), and recipes warn beyond a year.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from market_envs.data.panel import EXCHANGE_TZ, DataError, MarketData

SURVIVORSHIP_DAYS = 365
"""Beyond this distance between a window and its list's as_of date, recipes warn."""


def read_membership(path: str | Path) -> pd.DataFrame:
    """A membership file as a frame: ticker (str), from, to (naive dates; `to` NaT if open).

    Lines starting with ``#`` are comments (a source, a licence). One of them may state
    the dates the file is complete for, ``# covers: FROM TO`` (inclusive days): they go
    into ``frame.attrs["covers"]`` as two timestamps (absent: the file is taken to hold
    every stay of every time; see `uncovered_days`).

    Refuses a missing file or column, an unreadable date, `to` not after `from` and
    overlapping stays of one ticker, naming the file and the row.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(f"membership file {path}: no such file")
    try:
        lines = path.read_text().splitlines()
        table = pd.read_csv(path, dtype=str, keep_default_na=False, comment="#")
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.EmptyDataError) as err:
        raise DataError(f"membership file {path}: unreadable ({err})") from None
    table.columns = [str(c).strip().lower() for c in table.columns]
    missing = [c for c in ("ticker", "from", "to") if c not in table.columns]
    if missing:
        raise DataError(f"membership file {path}: missing column(s) {missing}; expected ticker, from, to")
    if len(table) == 0:
        raise DataError(f"membership file {path}: no rows")
    out = pd.DataFrame({"ticker": table["ticker"].str.strip().str.upper()})
    for column in ("from", "to"):
        text = table[column].str.strip()
        parsed = pd.to_datetime(text.where(text != ""), errors="coerce", format="ISO8601")
        bad = parsed.isna() & (text != "") | (column == "from") & (text == "")
        if bad.any():
            row = int(np.argmax(bad.to_numpy()))
            raise DataError(
                f"membership file {path}, row {row + 2} ({out['ticker'].iloc[row]}): {column} {text.iloc[row]!r} is not a date"
            )
        out[column] = parsed.dt.normalize()
    backwards = out["to"].notna() & (out["to"] <= out["from"])
    if backwards.any():
        row = int(np.argmax(backwards.to_numpy()))
        raise DataError(f"membership file {path}, row {row + 2} ({out['ticker'].iloc[row]}): to must be after from")
    _refuse_overlaps(out, path)
    covers = [line.split(":", 1)[1].split() for line in lines if line.startswith("# covers:")]
    if covers:
        try:
            first, last = (pd.Timestamp(day).normalize() for day in covers[0])
        except (ValueError, TypeError):
            raise DataError(f"membership file {path}: '# covers:' needs two dates, FROM TO; got {covers[0]}") from None
        out.attrs["covers"] = (first, last)
    return out


def uncovered_days(membership: pd.DataFrame, start, end) -> int:
    """Days of the window [start, end) outside the dates the file covers (its ``# covers:``
    line; 0 for a file without one): there the universe is not known, and the file's
    members of its first (or last) covered day stand in for it."""
    if "covers" not in membership.attrs:
        return 0
    first, last = membership.attrs["covers"]
    lo, hi = _day(start), _day(end) - pd.Timedelta(days=1)
    before = max(0, (min(hi, first - pd.Timedelta(days=1)) - lo).days + 1) if lo < first else 0
    after = max(0, (hi - max(lo, last + pd.Timedelta(days=1))).days + 1) if hi > last else 0
    return before + after


@dataclass(frozen=True)
class Rename:
    """A firm's ticker change: it trades as ``ticker`` from ``until`` on, as ``old`` before."""

    ticker: str
    old: str
    until: pd.Timestamp


def read_renames(path: str | Path) -> list[Rename]:
    """A renames file (CSV, ``#`` comments): ticker, old_symbol, until (the first day as ``ticker``).

    A membership file names each firm by one symbol (the later one); a vendor that lists
    securities under the symbol they had on each day (Polygon) is asked for the old
    symbol before ``until`` (`symbol_segments`). Refuses a missing file or column or an
    unreadable date, naming the file and the row.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(f"renames file {path}: no such file")
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False, comment="#")
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.EmptyDataError) as err:
        raise DataError(f"renames file {path}: unreadable ({err})") from None
    if [str(c).strip().lower() for c in table.columns] != ["ticker", "old_symbol", "until"]:
        raise DataError(
            f"renames file {path}: expected the columns ticker, old_symbol, until; got {list(table.columns)}"
        )
    out = []
    for row, (ticker, old, until) in enumerate(table.itertuples(index=False), start=2):
        day = pd.to_datetime(until.strip(), errors="coerce", format="ISO8601")
        if pd.isna(day):
            raise DataError(f"renames file {path}, row {row} ({ticker}): until {until!r} is not a date")
        out.append(Rename(ticker.strip().upper(), old.strip().upper(), day.normalize()))
    return out


def symbol_segments(
    ticker: str, start: pd.Timestamp, end: pd.Timestamp, renames: list[Rename]
) -> list[tuple[str, pd.Timestamp, pd.Timestamp]]:
    """[(symbol, lo, hi)] covering [start, end): the symbol a point-in-time vendor lists
    ``ticker`` under in each part of the window (one segment without a rename in it).
    ``until`` is a day in exchange time; ``start`` and ``end`` may carry a time zone."""
    cuts = sorted((r.until, r.old) for r in renames if r.ticker == ticker)
    segments, lo = [], start
    for until, old in cuts:
        day = until.tz_localize(EXCHANGE_TZ) if start.tzinfo is not None else until
        if lo < day:
            segments.append((old, lo, min(day, end)))
            lo = max(lo, day)
        if lo >= end:
            return segments
    return segments + [(ticker, lo, end)]


def _refuse_overlaps(table: pd.DataFrame, path: Path) -> None:
    ordered = table.assign(row=np.arange(len(table)) + 2).sort_values(["ticker", "from"], kind="stable")
    previous_to = ordered.groupby("ticker")["to"].shift(1)
    previous_open = ordered.groupby("ticker")["to"].transform(lambda s: s.isna().shift(1, fill_value=False))
    overlap = ordered["ticker"].duplicated() & ((previous_to > ordered["from"]) | previous_open)
    if overlap.any():
        row = ordered[overlap].iloc[0]
        raise DataError(
            f"membership file {path}, row {row['row']} ({row['ticker']}): this stay overlaps an earlier one"
        )


def _day(value) -> pd.Timestamp:
    stamp = pd.Timestamp(value)
    return (stamp.tz_convert(EXCHANGE_TZ).tz_localize(None) if stamp.tzinfo else stamp).normalize()


def members_in_window(membership: pd.DataFrame, start, end) -> list[str]:
    """Every ticker that was a member on some day of [start, end), in the file's order."""
    lo, hi = _day(start), _day(end)
    overlaps = (membership["from"] < hi) & (membership["to"].isna() | (membership["to"] > lo))
    return list(dict.fromkeys(membership.loc[overlaps, "ticker"]))


def membership_changes(membership: pd.DataFrame, start, end) -> dict:
    """Joins and departures strictly inside the window: {"joined": [...], "left": [...]}
    (a ticker's stay that starts after `start`, or ends before `end`)."""
    events = membership_events(membership, start, end)
    return {
        "joined": sorted(e["ticker"] for e in events if e["change"] == "joined"),
        "left": sorted(e["ticker"] for e in events if e["change"] == "left"),
    }


def membership_events(membership: pd.DataFrame, start, end) -> list[dict]:
    """The joins and departures of `membership_changes` as dated events, by date then
    ticker: [{"date": "YYYY-MM-DD", "ticker": ..., "change": "joined" | "left"}, ...]
    (a departure's date is its first day out)."""
    lo, hi = _day(start), _day(end)
    joined = membership[(membership["from"] > lo) & (membership["from"] < hi)]
    left = membership[membership["to"].notna() & (membership["to"] > lo) & (membership["to"] < hi)]
    events = [
        {"date": f"{d:%Y-%m-%d}", "ticker": t, "change": "joined"} for t, d in zip(joined["ticker"], joined["from"])
    ]
    events += [{"date": f"{d:%Y-%m-%d}", "ticker": t, "change": "left"} for t, d in zip(left["ticker"], left["to"])]
    return sorted(events, key=lambda e: (e["date"], e["ticker"], e["change"]))


def changes_between(record: dict, start, end) -> dict | None:
    """The membership changes of a panel's record (`apply_membership`) seen by a period
    whose first and last bars fall on the days of `start` and `end` (exchange time):
    events dated after the first day, up to the last (a ticker that joined on the first
    day was a member all along): {"changes": k, "joined": [...], "left": [...]}.
    None for a record without dated events (panels cached before they were kept)."""
    if "events" not in record:
        return None
    lo, hi = _day(start), _day(end)
    inside = [e for e in record["events"] if lo < pd.Timestamp(e["date"]) <= hi]
    joined = sorted(e["ticker"] for e in inside if e["change"] == "joined")
    left = sorted(e["ticker"] for e in inside if e["change"] == "left")
    return {"changes": len(inside), "joined": joined, "left": left}


def period_membership(record: dict | None, first, last) -> dict | None:
    """What a report says about a point-in-time universe: the panel's record (file,
    members, changes, joined, left over the data set's window) and `period`, the
    changes its period (first .. last bar) saw (`changes_between`; None when the
    record has no dated events). None for a panel without a membership file."""
    if not record:
        return None
    keys = ("file", "members", "changes", "joined", "left", "unserved", "unserved_share")
    kept = {key: record[key] for key in keys if key in record}
    return {**kept, "period": changes_between(record, first, last)}


def membership_mask(membership: pd.DataFrame, timestamps: pd.DatetimeIndex, tickers) -> np.ndarray:
    """bool [T, N]: True where the bar's exchange-time date is within one of the ticker's stays."""
    local = timestamps.tz_convert(EXCHANGE_TZ).tz_localize(None) if timestamps.tz else timestamps
    days = local.normalize().as_unit("ns").asi8
    mask = np.zeros((len(timestamps), len(tickers)), dtype=bool)
    far = np.iinfo(np.int64).max
    for j, ticker in enumerate(tickers):  # one vectorised test per ticker, at build time only
        stays = membership[membership["ticker"] == ticker]
        starts = pd.DatetimeIndex(stays["from"]).as_unit("ns").asi8
        ends = pd.DatetimeIndex(stays["to"]).as_unit("ns")
        for lo, hi in zip(starts, ends):
            end = far if pd.isna(hi) else hi.value
            mask[:, j] |= (days >= lo) & (days < end)
    return mask


def unserved(membership: pd.DataFrame, timestamps: pd.DatetimeIndex, served, start, end) -> tuple[list[str], float]:
    """Members of the window that the panel lacks (a vendor that does not serve them, or
    serves them under another symbol), and their share of the window's member-days: days
    of the panel's sessions on which a ticker was a member, summed over tickers."""
    universe = members_in_window(membership, start, end)
    sessions = pd.DatetimeIndex(pd.unique(timestamps.normalize()))
    if not universe or not len(sessions):
        return [], 0.0
    days = membership_mask(membership, sessions, universe).sum(axis=0)
    missing = [k for k, ticker in enumerate(universe) if ticker not in set(served)]
    total = int(days.sum())
    return sorted(universe[k] for k in missing), (float(days[missing].sum()) / total if total else 0.0)


def apply_membership(data: MarketData, membership: pd.DataFrame, start, end, source: str = "membership") -> MarketData:
    """The panel with non-members masked untradable, their bars with a price marked
    `reducible` (a position may only shrink there), and `meta["membership"]` set (file,
    members in the window, joined and left in it, `changes` their count, `events`: each
    change with its date, `membership_events`, and the members the panel lacks with
    their share of member-days, `unserved`)."""
    mask = torch.from_numpy(membership_mask(membership, data.timestamps, data.tickers)).to(data.tradable.device)
    changes = membership_changes(membership, start, end)
    missing, share = unserved(membership, data.timestamps, data.tickers, start, end)
    record = {
        "file": source,
        "members": len(members_in_window(membership, start, end)),
        "changes": len(changes["joined"]) + len(changes["left"]),
        **changes,
        "events": membership_events(membership, start, end),
        "unserved": missing,
        "unserved_share": share,
    }
    tradable = data.tradable & mask
    return replace(data, tradable=tradable, reducible=data.priced & ~tradable, meta={**data.meta, "membership": record})


def survivorship_gap(as_of, start, end) -> int:
    """Days between a ticker list's as_of date and the farthest day of [start, end)."""
    day, lo, hi = _day(as_of), _day(start), _day(end) - pd.Timedelta(days=1)
    return int(max(abs((day - lo).days), abs((day - hi).days)))
