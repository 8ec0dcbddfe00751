"""Convert jmccarrell/n100tickers (the NASDAQ-100's membership history) into our format.

    python datasets/convert_n100tickers.py SOURCE [--out datasets/nasdaq100-membership.csv]

SOURCE is a checkout of https://github.com/jmccarrell/n100tickers (MIT licence), or
its ``src/nasdaq_100_ticker_history`` folder: one YAML file per year,
``n100-ticker-changes-YYYY.yaml``, each with the tickers on 1 January
(``tickers_on_Jan_1``) and dated changes (``changes: {date: {union: [...],
difference: [...]}}``). A change dated D takes effect on D, as the source's own
``tickers_as_of`` applies it: a ticker in ``union`` is a member from D, one in
``difference`` is out from D (its first day out). That is our membership format's
meaning of ``from`` and ``to`` (market_envs/data/membership.py), so dates are copied
as they are.

What the conversion adds:

- **Renames** (`RENAMES`): where the source records a company's ticker change as a
  departure and an arrival on the same day (FB out and META in on 2022-06-09), the two
  stays become one, under the later symbol, so that a position is not forced out by a
  rename. `datasets/nasdaq100-renames.csv` lists them with the symbol a point-in-time
  vendor serves before the date (datasets/README.md says which vendor needs which).
- **Checks**: replaying each year's changes must give the next year's 1 January list
  (the source's own consistency); a ticker that is removed while not a member, or
  added while one, is an error naming the year and date.
- YAML is read with every value as a string: a plain YAML loader reads the ticker
  ``ON`` (ON Semiconductor) as the boolean True.

The header of the written file names the source, its commit when SOURCE is a git
checkout, its licence, the conversion date and the dates it covers (``# covers:``,
read by `market_envs.data.membership.read_membership`).
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout: the package beside it
from market_envs.data.membership import Rename, read_renames  # noqa: E402

SOURCE_URL = "https://github.com/jmccarrell/n100tickers"
LICENCE = "MIT (Copyright (c) 2021 - 2025 Jeff McCarrell)"
HERE = Path(__file__).resolve().parent


def year_files(source: Path) -> dict[int, Path]:
    """Year -> its YAML file, in SOURCE or its ``src/nasdaq_100_ticker_history`` folder."""
    for folder in (source, source / "src" / "nasdaq_100_ticker_history"):
        found = {int(p.stem.rsplit("-", 1)[1]): p for p in folder.glob("n100-ticker-changes-*.yaml")}
        if found:
            return dict(sorted(found.items()))
    raise SystemExit(f"{source}: no n100-ticker-changes-YYYY.yaml files (give a checkout of {SOURCE_URL})")


def read_year(path: Path) -> tuple[set[str], list[tuple[str, list[str], list[str]]]]:
    """(tickers on 1 January, [(date, removed, added)] by date) of one year's file."""
    values = yaml.load(path.read_text(), Loader=yaml.BaseLoader)  # strings only: "ON" stays "ON"
    start = set(values["tickers_on_Jan_1"])
    changes = []
    for date in sorted(values.get("changes") or {}):
        datetime.date.fromisoformat(date)  # a bad date fails here, naming it
        change = values["changes"][date]
        changes.append((date, list(change.get("difference") or []), list(change.get("union") or [])))
    return start, changes


def stays(source: Path) -> tuple[list[tuple[str, str, str]], str, str]:
    """([(ticker, from, to)] with to "" while a member, first day covered, last change's day)."""
    files = year_files(source)
    years = list(files)
    open_since: dict[str, str] = {}
    out: list[tuple[str, str, str]] = []
    first_day = f"{years[0]}-01-01"
    last_change = first_day
    members: set[str] | None = None
    for year in years:
        start, changes = read_year(files[year])
        if members is None:
            members = set(start)
            open_since = {ticker: first_day for ticker in members}
        elif members != start:
            raise SystemExit(
                f"{files[year]}: 1 January's list differs from the changes replayed to it: "
                f"missing {sorted(members - start)}, extra {sorted(start - members)}"
            )
        for date, removed, added in changes:
            for ticker in removed:
                if ticker not in members:
                    raise SystemExit(f"{files[year]}, {date}: {ticker} is removed but is not a member")
                members.remove(ticker)
                out.append((ticker, open_since.pop(ticker), date))
            for ticker in added:
                if ticker in members:
                    raise SystemExit(f"{files[year]}, {date}: {ticker} is added but is a member already")
                members.add(ticker)
                open_since[ticker] = date
            last_change = date
    out.extend((ticker, since, "") for ticker, since in open_since.items())
    return sorted(out, key=lambda row: (row[0], row[1])), first_day, last_change


def apply_renames(rows: list[tuple[str, str, str]], renames: list[Rename]) -> list[tuple[str, str, str]]:
    """Each rename's two stays (the old symbol's ending on its date, the new one's starting
    on it) as one stay under the new symbol; a rename the stays do not show is an error."""
    rows = list(rows)
    for rename in renames:
        date = f"{rename.until:%Y-%m-%d}"
        old = [r for r in rows if r[0] == rename.old and r[2] == date]
        new = [r for r in rows if r[0] == rename.ticker and r[1] == date]
        if len(old) != 1 or len(new) != 1:
            raise SystemExit(
                f"rename {rename.old} -> {rename.ticker} on {date}: the source has no stay of "
                f"{rename.old} ending and of {rename.ticker} starting that day"
            )
        rows.remove(old[0])
        rows.remove(new[0])
        rows.append((rename.ticker, old[0][1], new[0][2]))
    return sorted(rows, key=lambda row: (row[0], row[1]))


def git(source: Path, *args: str) -> str | None:
    """The output of a git command in SOURCE's checkout; None when it is not one."""
    try:
        done = subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def write(path: Path, rows: list[tuple[str, str, str]], covers: tuple[str, str], commit: str | None) -> None:
    header = [
        "# NASDAQ-100 membership, point in time: one row per stay in the index (ticker, first day in,",
        "# first day out; an empty `to` is still a member). Written by datasets/convert_n100tickers.py.",
        f"# source: {SOURCE_URL}" + (f" at commit {commit}" if commit else ""),
        f"# licence of the source: {LICENCE}",
        f"# converted: {datetime.date.today().isoformat()}",
        "# renamed tickers joined under their later symbol: datasets/nasdaq100-renames.csv",
        f"# covers: {covers[0]} {covers[1]}",
    ]
    lines = header + ["ticker,from,to"] + [",".join(row) for row in rows]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help=f"a checkout of {SOURCE_URL}")
    parser.add_argument("--out", type=Path, default=HERE / "nasdaq100-membership.csv")
    parser.add_argument("--renames", type=Path, default=HERE / "nasdaq100-renames.csv")
    parser.add_argument(
        "--commit", default=None, help="the source's commit (default: SOURCE's HEAD, when a git checkout)"
    )
    parser.add_argument(
        "--covers-to",
        default=None,
        help="the last day the source is complete to (default: the source commit's date; "
        "else the day of its last change)",
    )
    args = parser.parse_args(argv)
    rows, first_day, last_change = stays(args.source)
    rows = apply_renames(rows, read_renames(args.renames))
    commit = args.commit or git(args.source, "rev-parse", "HEAD")
    covers_to = args.covers_to or git(args.source, "log", "-1", "--format=%cs") or last_change
    if covers_to < last_change:
        raise SystemExit(f"--covers-to {covers_to} is before the source's last change ({last_change})")
    write(args.out, rows, (first_day, covers_to), commit)
    print(f"wrote {args.out}: {len(rows)} stays of {len({r[0] for r in rows})} tickers, {first_day} .. {covers_to}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
