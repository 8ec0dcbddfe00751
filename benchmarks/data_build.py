"""Time to build and cache a data set recipe, and to load it back from the cache.

Default: builds the recipe (the embedded default `synthetic-minute`, 100 tickers x
about a year of minute bars x 13 features) into a fresh temporary data directory,
then loads it from the cache `--loads` times and reports the median.

`--vendor-scale`: the scale of issue 31 (years of vendor minute bars). Writes a
synthetic market of `--tickers` tickers plus QQQ over 2016-01-04 .. 2021-01-05
(1,260 sessions, 489,420 regular-session minutes; with 15 pre-market bars a day and
about 2% of minutes missing at random) as the alpaca provider's ticker-month chunk
files (UTC bars, as the vendor sends them), then, each in a fresh process, builds
the `alpaca` recipe from those files (streaming, no network: the recipe points at a
closed loopback port), loads the cached panel, and builds the env
(`StockTradingVecEnv`, default rules and features) on the loaded panel. Reports
wall-clock times, each process's peak resident memory against the finished panel's
size, and the env's observation table.

    python benchmarks/data_build.py                       # the default recipe
    python benchmarks/data_build.py --set n_tickers=10    # a smaller variant
    python benchmarks/data_build.py --vendor-scale        # 101 tickers x 489k bars
    python benchmarks/data_build.py --vendor-scale --tickers 10 --end 2017-01-03   # quick
    python benchmarks/data_build.py --vendor-scale --modes build env --end 2017-01-03   # no load timing
    python benchmarks/data_build.py nasdaq100-minute-alpaca --download-estimate   # a real download, estimated

`--download-estimate` fetches nothing: it counts a vendor recipe's chunks and pages
and turns them into requests, minutes at Alpaca's free rate limit and disk.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from market_envs.data import load  # noqa: E402
from market_envs.data.cache import DataCache  # noqa: E402
from market_envs.data.recipes import parse_overrides  # noqa: E402

VENDOR_START, VENDOR_END = "2016-01-04", "2021-01-05"
DUMMY_KEYS = {"APCA_API_KEY_ID": "benchmark-key-id", "APCA_API_SECRET_KEY": "benchmark-secret"}
CLOSED_PORT_URL = "http://127.0.0.1:9"  # the discard port: nothing answers, so any fetch fails


def _folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _current_rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def machine_line() -> str:
    return f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, torch threads 1"


# ------------------------------------------------------------ the default recipe
def recipe_benchmark(args) -> None:
    overrides = parse_overrides(args.overrides)
    with tempfile.TemporaryDirectory(prefix="podracer-bench-") as root:
        start = time.perf_counter()
        data = load(args.recipe, data_dir=root, **overrides)
        build_s = time.perf_counter() - start
        (entry,) = [Path(root) / "panels" / p["key"] for p in DataCache(root).panels()]
        loads = []
        for _ in range(args.loads):
            start = time.perf_counter()
            again = load(args.recipe, data_dir=root, **overrides)
            loads.append(time.perf_counter() - start)
        assert torch.equal(again.features, data.features), "cache round trip changed the panel"
        entry_mb = _folder_mb(entry)

    t, n, f = data.features.shape
    print(machine_line())
    print(
        f"recipe: {args.recipe} {overrides or ''}  panel: {t} bars x {n} tickers x {f} features "
        f"({data.features.numel() * 4 / 2**20:.0f} MiB float32), cache entry {entry_mb:.0f} MiB"
    )
    print(f"build + validate + cache: {build_s:8.2f} s")
    print(
        f"load from cache (median of {args.loads}): {statistics.median(loads):8.2f} s "
        f"(min {min(loads):.2f}, max {max(loads):.2f})"
    )


# ------------------------------------------------------------ vendor scale
def vendor_recipe(folder: Path, tickers: list[str], end: str) -> Path:
    days = pd.date_range(VENDOR_START, end, periods=5)
    path = folder / "vendor-scale.toml"
    path.write_text(
        f'source = "alpaca"\ninterval = "1min"\nstart = "{VENDOR_START}"\nend = "{end}"\n'
        f'train_end = "{days[2]:%Y-%m-%d}"\nval_end = "{days[3]:%Y-%m-%d}"\nbenchmark = "QQQ"\n'
        f'tickers = {json.dumps(tickers)}\n\n[alpaca]\nurl = "{CLOSED_PORT_URL}"\nretries = 0\n'
    )
    return path


def write_vendor_files(root: Path, tickers: list[str], end: str, seed: int = 0) -> tuple[int, int]:
    """Every ticker-month chunk of `tickers` as the alpaca provider caches it; (files, bars)."""
    from market_envs.data.alpaca import AlpacaBars
    from market_envs.data.calendar import sessions
    from market_envs.data.chunks import chunk_key, month_chunks

    os.environ.update(DUMMY_KEYS)
    vendor = AlpacaBars("1min", url=CLOSED_PORT_URL)
    store = DataCache(root)
    table = sessions(VENDOR_START, end)
    length = ((table["close"] - table["open"]) / pd.Timedelta(minutes=1)).to_numpy().astype(int)
    pre = 15
    minutes = np.concatenate([np.arange(-pre, n) for n in length])
    day = np.repeat(np.arange(len(table)), length + pre)
    opens = table["open"].dt.tz_convert("UTC").dt.tz_localize(None).to_numpy(dtype="datetime64[ns]")
    stamps = pd.DatetimeIndex(opens[day] + minutes.astype("timedelta64[m]")).tz_localize("UTC")
    rng = np.random.default_rng(seed)
    files = bars = 0
    for i, ticker in enumerate(tickers):  # one ticker at a time, as a vendor serves them
        keep = rng.random(len(stamps)) > 0.02
        keep[0] = True
        ts = stamps[keep]
        close = 50.0 * np.exp(np.cumsum(rng.normal(0, 0.0008, len(ts))) + 0.1 * i)
        open_ = close * np.exp(rng.normal(0, 0.0003, len(ts)))
        frame = pd.DataFrame(
            {
                "timestamp": ts,
                "ticker": ticker,
                "open": open_,
                "high": np.maximum(open_, close) * 1.0005,
                "low": np.minimum(open_, close) * 0.9995,
                "close": close,
                "volume": rng.integers(100, 10_000, len(ts)).astype(float),
            }
        )
        local = pd.DatetimeIndex(frame["timestamp"]).tz_convert("America/New_York")
        for chunk in month_chunks(ticker, VENDOR_START, end):
            part = frame[(local >= chunk.start) & (local < chunk.end)].reset_index(drop=True)
            store.save_frame(vendor.name, chunk_key(vendor, chunk), part)
            files += 1
        bars += len(frame)
    return files, bars


def child(mode: str, data_dir: str, recipe: str) -> None:
    """One build or load in this fresh process; prints a JSON line of figures."""
    os.environ.update(DUMMY_KEYS)
    torch.set_num_threads(1)
    import warnings

    warnings.simplefilter("ignore")  # the synthetic walks may look like a split now and then
    baseline = _current_rss_mib()
    times, data = [], None
    for _ in range(1 if mode == "build" else 3):
        data = None  # drop the previous load before the next one
        start = time.perf_counter()
        data = load(recipe, data_dir=data_dir, refresh=(mode == "build"))
        times.append(time.perf_counter() - start)
    panel = (data.features.numel() * data.features.element_size() + data.tradable.numel()) / 2**20
    print(
        json.dumps(
            {
                "mode": mode,
                "seconds": times,
                "baseline_rss_mib": baseline,
                "peak_rss_mib": _peak_rss_mib(),
                "panel_mib": panel,
                "shape": list(data.features.shape),
                "tradable": float(data.tradable.float().mean()),
            }
        )
    )


def env_child(data_dir: str, recipe: str) -> None:
    """Load the cached panel, then build the env on all of it; prints a JSON line of figures."""
    os.environ.update(DUMMY_KEYS)
    torch.set_num_threads(1)
    import warnings

    from market_envs import EnvConfig, StockTradingVecEnv

    warnings.simplefilter("ignore")
    data = load(recipe, data_dir=data_dir)
    loaded = _peak_rss_mib()
    start = time.perf_counter()
    env = StockTradingVecEnv(data, num_envs=64, device="cpu", config=EnvConfig())
    seconds = time.perf_counter() - start
    env.reset(seed=0)
    env.step(torch.zeros((64, env.act_dim)))
    table = env.tables.obs
    panel = (data.features.numel() * data.features.element_size() + data.tradable.numel()) / 2**20
    print(
        json.dumps(
            {
                "mode": "env",
                "seconds": [seconds],
                "baseline_rss_mib": loaded,
                "peak_rss_mib": _peak_rss_mib(),
                "panel_mib": panel,
                "obs_table_mib": table.numel() * table.element_size() / 2**20,
                "obs_dtype": str(table.dtype),
                "obs_dim": env.obs_dim,
                "shape": list(data.features.shape),
            }
        )
    )


def vendor_benchmark(args) -> None:
    tickers = [f"T{i:03d}" for i in range(args.tickers)]
    with tempfile.TemporaryDirectory(prefix="podracer-vendor-bench-") as root:
        recipe = vendor_recipe(Path(root), tickers, args.end)
        start = time.perf_counter()
        files, bars = write_vendor_files(Path(root) / "data", [*tickers, "QQQ"], args.end)
        write_s = time.perf_counter() - start
        results = {}
        for mode in args.modes:
            out = subprocess.run(
                [sys.executable, __file__, "--child", mode, str(Path(root) / "data"), str(recipe)],
                capture_output=True,
                text=True,
                check=False,
                env={
                    **os.environ,
                    "PYTHONPATH": os.pathsep.join(
                        [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
                    ),
                },
            )
            if out.returncode != 0:
                raise SystemExit(f"{mode} failed:\n{out.stderr[-3000:]}")
            results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        downloads_mb = _folder_mb(Path(root) / "data" / "downloads")
        panel_mb = _folder_mb(Path(root) / "data" / "panels")
    first = next(iter(results.values()))
    t, n, f = first["shape"]
    panel = first["panel_mib"]
    print(machine_line())
    print(
        f"vendor-shaped files: {files} ticker-month chunks, {bars:,} bars ({len(tickers)} tickers + QQQ), "
        f"{downloads_mb:.0f} MiB on disk, written in {write_s:.1f} s"
    )
    print(
        f"panel: {t:,} bars x {n} tickers x {f} features, {panel:.0f} MiB in memory (features + mask), "
        f"cache entry {panel_mb:.0f} MiB"
        + (f", tradable {results['build']['tradable']:.3f}" if "build" in results else "")
    )
    names = {"build": "build (stream, validate, cache)", "load": "load from cache", "env": "env on the loaded panel"}
    for mode, r in results.items():
        above = r["peak_rss_mib"] - r["baseline_rss_mib"]
        after = "after imports" if mode != "env" else "after loading the panel"
        print(
            f"{names[mode]}: {statistics.median(r['seconds']):8.1f} s (runs {', '.join(f'{s:.1f}' for s in r['seconds'])}); "
            f"peak RSS {r['peak_rss_mib']:.0f} MiB = {r['peak_rss_mib'] / panel:.2f}x the panel; "
            f"above the process's {r['baseline_rss_mib']:.0f} MiB {after}: {above:.0f} MiB = {above / panel:.2f}x"
        )
        if mode == "env":
            print(
                f"env observation table: {r['obs_table_mib']:.0f} MiB ({r['obs_dtype']}, {t:,} bars x {r['obs_dim']} columns)"
            )


# ------------------------------------------------------------ a real download, estimated
ALPACA_PAGE_BARS = 10_000
"""Bars per page of alpaca-py's `get_stock_bars` (its `page_size`, the API's maximum `limit`)."""
ALPACA_FREE_REQUESTS_PER_MINUTE = 200
"""The free plan's documented rate limit (docs.alpaca.markets/docs/api-rate-limits)."""
EXTENDED_MINUTES = 16 * 60
"""Minutes from 04:00 to 20:00, the extended-hours day Alpaca's SIP bars cover."""


def download_estimate(args) -> None:
    """Requests, time and disk of a vendor recipe's download, estimated from its chunks.

    Counts the recipe's ticker-month chunks (`chunks.month_chunks`) and each month's
    regular-session bars (`calendar.sessions`); a chunk takes one request per started
    page of 10,000 bars. Low: a bar in every regular minute and none outside; high: a
    bar in every minute of the extended day (daily bars: one a session, both). Time: the requests at the free
    plan's 200 a minute (the floor: requests run one after another, so each one's own
    latency adds to it). Disk: the bytes a bar took in the vendor-scale benchmark.
    """
    import math

    from market_envs.data.calendar import bar_minutes, sessions
    from market_envs.data.chunks import month_chunks
    from market_envs.data.recipes import find_recipe

    recipe = find_recipe(args.recipe).resolved()
    symbols = len(recipe.tickers or ()) + (1 if recipe.benchmark else 0)
    table = sessions(recipe.start, recipe.end)
    regular = ((table["close"] - table["open"]) / pd.Timedelta(minutes=1)).groupby(table.index.to_period("M")).sum()
    days = table.groupby(table.index.to_period("M")).size()
    months = month_chunks("any", recipe.start, recipe.end, now=pd.Timestamp("2100-01-01", tz="America/New_York"))
    minutes = bar_minutes(recipe.interval)
    if minutes is None:  # daily bars: one a session
        regular, extended = days, days
    else:
        regular, extended = regular // minutes, days * (EXTENDED_MINUTES // minutes)
    low_pages = sum(math.ceil(bars / ALPACA_PAGE_BARS) for bars in regular)
    high_pages = sum(math.ceil(bars / ALPACA_PAGE_BARS) for bars in extended)
    low_bars, high_bars = symbols * regular.sum(), symbols * extended.sum()
    print(
        f"recipe: {recipe.name} ({recipe.source}, {recipe.interval}, {recipe.start} .. {recipe.end}): "
        f"{symbols} symbols x {len(months)} months = {symbols * len(months):,} ticker-month chunks"
    )
    for name, pages, bars in (("low", low_pages, low_bars), ("high", high_pages, high_bars)):
        requests = symbols * pages
        print(
            f"{name}: {bars:,.0f} bars, {requests:,} requests = {requests / ALPACA_FREE_REQUESTS_PER_MINUTE:.0f} min "
            f"at {ALPACA_FREE_REQUESTS_PER_MINUTE} a minute; downloads about {bars * args.bytes_per_bar / 2**30:.1f} GiB "
            f"at {args.bytes_per_bar:.1f} bytes a bar"
        )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        if sys.argv[2] == "env":
            env_child(*sys.argv[3:5])
        else:
            child(*sys.argv[2:5])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", nargs="?", default="synthetic-minute", help="recipe name or path")
    parser.add_argument("--loads", type=int, default=5, help="cache loads to time (median reported)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="KEY=VALUE override")
    parser.add_argument("--vendor-scale", action="store_true", help="vendor-shaped files at issue 31's scale")
    parser.add_argument("--tickers", type=int, default=101, help="--vendor-scale: tickers besides QQQ")
    parser.add_argument("--end", default=VENDOR_END, help="--vendor-scale: end of the window (exclusive)")
    parser.add_argument(
        "--download-estimate",
        action="store_true",
        help="estimate the requests, time and disk of RECIPE's download from Alpaca (no download)",
    )
    parser.add_argument(
        "--bytes-per-bar",
        type=float,
        default=2549 * 2**20 / 50_812_999,
        help="--download-estimate: cache bytes per bar (default: the vendor-scale run in RESULTS.md)",
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=("build", "load", "env"),
        default=["build", "load", "env"],
        help="--vendor-scale: fresh processes to run, in order (load and env read build's panel)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.download_estimate:
        download_estimate(args)
    elif args.vendor_scale:
        vendor_benchmark(args)
    else:
        recipe_benchmark(args)


if __name__ == "__main__":
    main()
