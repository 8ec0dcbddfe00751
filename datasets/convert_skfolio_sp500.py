"""Convert skfolio's S&P 500 closes (a public data set on PyPI) into our `files` source layout.

    python datasets/convert_skfolio_sp500.py --download          # what `make real-data` runs
    python datasets/convert_skfolio_sp500.py WHEEL [--out DIR]   # a wheel fetched by hand

The wheel of skfolio (https://github.com/skfolio/skfolio, BSD 3-Clause licence) ships two
gzipped CSV files in ``skfolio/datasets/data/``: ``sp500_dataset.csv.gz``, daily adjusted
closes of 20 S&P 500 stocks (a ``Date`` column, then one column per ticker), and
``sp500_index.csv.gz``, the S&P 500 index's close (``Date``, ``SP500``), both 1990-01-02 to
2022-12-28. Only the wheel is fetched (``pip download --no-deps``; a wheel is a zip), never
installed: skfolio itself pulls cvxpy and scikit-learn. ``--download`` fetches the pinned
version (`VERSION`) with this interpreter's pip into a temporary folder and deletes it after.

What the conversion does:

- **Checks** the wheel's sha256 against `WHEEL_SHA256` before reading it (``--sha256``
  names another); a wrong one is one line, and nothing is written.
- **Dates** become daily bars stamped at the session's open, 09:30 America/New_York,
  the library's rule for a "1D" bar (`market_envs.data.calendar`). The two files must
  hold the same dates, sorted and without repeats.
- **Closes are copied as they are** (float64, three decimals as the source rounds them):
  read back, the files give the source's numbers exactly; the panel holds them in float32,
  as every provider does.
- **Closes only.** Open, high, low and volume are not made up: the files hold one close
  per ticker and day, and the files source treats them as close-only data
  (`market_envs.data.frame.complete_ohlcv`): open, high and low are the close and volume
  is 0 inside the panel, an order fills at the next bar's close, the features made of
  absent columns (cci_30, dx_30, volume) are left out of the observation, and cost terms
  that read volume, high or low (square-root impact, the participation cap, the
  ``high_low`` spread: the ``institutional`` model) are refused with one line naming
  volume. Flat commission rates (``--commission``, ``--costs flat``) apply as they are.
- **The index** is written as one more ticker, ``SP500``; the recipe names it as its
  ``benchmark``, so it is taken out of the traded tickers.

Written into ``--out`` (default ``datasets/data/skfolio-sp500/``, the folder recipe
``sp500-20-daily`` names, relative to itself): ``closes.parquet`` (long: timestamp, ticker,
close), ``source.json`` (the wheel, its sha256, the files read, the conversion date, the
rows, tickers and dates) and ``LICENSE.skfolio`` (the licence from the wheel, kept beside
the data as BSD-3 asks). The folder is built under a temporary name beside ``--out``, read
back through `market_envs.data.files.read_files` and renamed into place when whole, so a
failed conversion leaves nothing half-written and an earlier conversion stays as it was.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tempfile
import uuid
import warnings
import zipfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout: the package beside it
from market_envs.data.files import read_files  # noqa: E402
from market_envs.data.panel import EXCHANGE_TZ, DataError  # noqa: E402

VERSION = "1.12.2"
WHEEL = f"skfolio-{VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "2d324c62a4188dc0b62a713f8d5cea177e208a5b45987e3d3f204dd56d3a669b"
"""sha256 of `WHEEL` as PyPI serves it (https://pypi.org/project/skfolio/1.12.2/#files)."""
STOCKS = "skfolio/datasets/data/sp500_dataset.csv.gz"
INDEX = "skfolio/datasets/data/sp500_index.csv.gz"
BENCHMARK = "SP500"
"""The index's column in `INDEX`, written as a ticker of that name (the recipe's benchmark)."""
LICENCE_SUFFIX = ".dist-info/licenses/LICENSE"
SOURCE_URL = "https://github.com/skfolio/skfolio"
LICENCE = "BSD 3-Clause (Copyright (c) 2023-2026 The skfolio developers)"
SESSION_OPEN = pd.Timedelta(hours=9, minutes=30)
HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "data" / "skfolio-sp500"
FILES = ("closes.parquet", "source.json", "LICENSE.skfolio")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_wheel(wheel: Path, expected: str) -> None:
    """Refuse a wheel that is missing or whose sha256 is not `expected` (one line)."""
    if not wheel.is_file():
        raise SystemExit(f"{wheel}: no such file")
    got = sha256(wheel)
    if got != expected.lower():
        raise SystemExit(f"{wheel}: sha256 {got} is not the pinned {expected.lower()}; refusing to convert it")


def read_member(archive: zipfile.ZipFile, member: str, wheel: Path) -> pd.DataFrame:
    """One gzipped CSV of the wheel, as a frame with its ``Date`` column parsed (naive days)."""
    try:
        raw = archive.read(member)
    except KeyError:
        raise SystemExit(f"{wheel}: holds no {member}") from None
    try:
        table = pd.read_csv(io.BytesIO(gzip.decompress(raw)))
    except (OSError, ValueError) as err:
        raise SystemExit(f"{wheel}: {member} is not a gzipped CSV ({err})") from None
    if "Date" not in table.columns or len(table.columns) < 2:
        raise SystemExit(f"{wheel}: {member} needs a Date column and at least one price column")
    try:
        table["Date"] = pd.to_datetime(table["Date"], format="%Y-%m-%d")
    except ValueError as err:
        raise SystemExit(f"{wheel}: {member}: a Date is not YYYY-MM-DD ({err})") from None
    dates = table["Date"]
    if not dates.is_monotonic_increasing or dates.duplicated().any():
        first = dates[dates.duplicated() | (dates.diff() <= pd.Timedelta(0))].iloc[0]
        raise SystemExit(f"{wheel}: {member}: dates unsorted or repeated at {first:%Y-%m-%d}")
    return table


def long_closes(stocks: pd.DataFrame, index: pd.DataFrame, wheel: Path) -> pd.DataFrame:
    """The stocks' and the index's closes as one long frame (timestamp, ticker, close), by
    timestamp then ticker, the index as ticker `BENCHMARK`."""
    if BENCHMARK not in index.columns:
        raise SystemExit(f"{wheel}: {INDEX} has no {BENCHMARK} column (columns {list(index.columns)})")
    if BENCHMARK in stocks.columns:
        raise SystemExit(f"{wheel}: {STOCKS} has a column {BENCHMARK}, the benchmark's name")
    if not stocks["Date"].equals(index["Date"]):
        only = sorted(set(stocks["Date"]).symmetric_difference(index["Date"]))
        day = f"{only[0]:%Y-%m-%d}" if only else "the same days in another order"
        raise SystemExit(f"{wheel}: {STOCKS} and {INDEX} hold different dates (first: {day})")
    wide = stocks.set_index("Date").join(index.set_index("Date")[[BENCHMARK]])
    wide.index = pd.DatetimeIndex(wide.index).tz_localize(EXCHANGE_TZ) + SESSION_OPEN
    wide.index.name = "timestamp"
    wide.columns.name = "ticker"
    long = wide.stack(future_stack=True).rename("close").reset_index()
    long["ticker"] = long["ticker"].astype(str)
    long["close"] = long["close"].astype("float64")
    return long


def convert(wheel: Path, out: Path, expected_sha256: str = WHEEL_SHA256) -> dict:
    """Convert `wheel` into `out` (whole or not at all); return what source.json records."""
    check_wheel(wheel, expected_sha256)
    try:
        archive = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile:
        raise SystemExit(f"{wheel}: not a wheel (not a zip file)") from None
    with archive:
        stocks = read_member(archive, STOCKS, wheel)
        index = read_member(archive, INDEX, wheel)
        licences = [name for name in archive.namelist() if name.endswith(LICENCE_SUFFIX)]
        licence = archive.read(licences[0]) if licences else LICENCE.encode() + b"\n"
    long = long_closes(stocks, index, wheel)
    tickers = [str(c) for c in stocks.columns if c != "Date"]
    record = {
        "source": SOURCE_URL,
        "licence": LICENCE,
        "wheel": wheel.name,
        "sha256": expected_sha256.lower(),
        "members": [STOCKS, INDEX],
        "converted": datetime.date.today().isoformat(),
        "written_by": "datasets/convert_skfolio_sp500.py",
        "tickers": tickers,
        "benchmark": BENCHMARK,
        "first_day": f"{stocks['Date'].iloc[0]:%Y-%m-%d}",
        "last_day": f"{stocks['Date'].iloc[-1]:%Y-%m-%d}",
        "days": len(stocks),
        "rows": len(long),
        "columns": list(long.columns),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".tmp-{out.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        long.to_parquet(tmp / "closes.parquet", index=False)
        (tmp / "source.json").write_text(json.dumps(record, indent=2) + "\n")
        (tmp / "LICENSE.skfolio").write_bytes(licence)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                read_files(tmp, benchmark=BENCHMARK)  # the library reads it back: a bad price fails here, named
            except DataError as err:
                raise SystemExit(f"{wheel}: {str(err).replace(str(tmp), str(out))}") from None
        for warning in caught:  # e.g. a real one-day crash that looks like a split: said, not refused
            print(f"note: {str(warning.message).replace(str(tmp), str(out))}", file=sys.stderr)
        if out.exists():  # the earlier conversion moves aside, and comes back if the new one cannot take its place
            old = out.parent / f".old-{out.name}-{uuid.uuid4().hex[:8]}"
            out.rename(old)
            try:
                tmp.rename(out)
            except OSError:
                old.rename(out)
                raise
            shutil.rmtree(old)
        else:
            tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return record


def download(folder: Path) -> Path:
    """Fetch the pinned wheel (no dependencies) into `folder` with this interpreter's pip."""
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"skfolio=={VERSION}", "-d", str(folder)]
    try:
        subprocess.run(command, check=True)
    except subprocess.CalledProcessError as err:
        raise SystemExit(f"pip download skfolio=={VERSION} failed (exit code {err.returncode}); see above") from None
    wheel = folder / WHEEL
    if not wheel.is_file():
        raise SystemExit(f"pip download skfolio=={VERSION} wrote no {WHEEL} into {folder}")
    return wheel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheel", type=Path, nargs="?", help=f"a downloaded {WHEEL} (or give --download)")
    parser.add_argument("--download", action="store_true", help=f"fetch {WHEEL} from PyPI with pip first")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the folder to write (replaced when whole)")
    parser.add_argument("--sha256", default=WHEEL_SHA256, help="the wheel's expected sha256 (default: the pinned)")
    args = parser.parse_args(argv)
    if (args.wheel is None) == (not args.download):
        parser.error("give a WHEEL or --download (one of them)")
    if args.download:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".tmp-download-", dir=args.out.parent) as folder:
            record = convert(download(Path(folder)), args.out, args.sha256)
    else:
        record = convert(args.wheel, args.out, args.sha256)
    print(
        f"wrote {args.out}: {record['rows']:,} closes of {len(record['tickers'])} tickers and {BENCHMARK}, "
        f"{record['first_day']} .. {record['last_day']} ({record['days']:,} days), from {record['wheel']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
