"""How fast the dashboard's strategies page draws a big run: 20 strategies over a year of minute bars.

Builds (once, into ``--runs``) a run directory with the real backtest engine: the
whole year of the ``synthetic-minute`` recipe (about 98k minute bars, 100 tickers)
with 17 random-weight strategies beside the three baselines (20 strategies). Then:

1. **script time** (Streamlit's AppTest, in process): the strategies page run
   once cold (empty cache: Parquet reads, daily reduction) and ``--repeats`` times
   warm; the median warm run is the server's share of a refresh;
2. **first paint in a browser** (headless Chromium via Selenium, when installed):
   the dashboard served on localhost, the page loaded once to warm the cache, then
   loaded ``--repeats`` times; each time from navigation until the first moment
   Streamlit reports the run finished and every Plotly chart is drawn (checked every
   0.1 s; the page must then stay unchanged for one more check). Target: under 3 s (issue 13).

    OMP_NUM_THREADS=1 python benchmarks/dashboard_paint.py [--runs /tmp/paint-runs] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

STRATEGIES = 20
"""Strategies in the run: 17 random policies and the 3 baselines."""


def build_run(runs: Path) -> Path:
    """A year-long backtest of 20 strategies, written as `trader backtest` writes it."""
    run_dir = runs / "year-20-strategies"
    if (run_dir / "report.json").exists():
        return run_dir
    import torch

    from market_envs.data import load
    from trader.backtesting import BacktestConfig, run_backtest

    data = load("synthetic-minute")
    policies = {}
    for k in range(STRATEGIES - 3):
        generator = torch.Generator().manual_seed(k)

        def policy(obs, generator=generator):
            return torch.rand((obs.shape[0], data.num_tickers), generator=generator) * 2.0 - 1.0

        policies[f"random_{k:02d}"] = policy
    start = time.perf_counter()
    run_backtest(
        data, policies, period="all", config=BacktestConfig(record_positions="day", tear_sheet=False), run_dir=run_dir
    )
    print(
        f"built {run_dir}: {data.num_bars} bars x {STRATEGIES} strategies in {time.perf_counter() - start:.0f} s",
        flush=True,
    )
    return run_dir


def script_times(runs: Path, repeats: int) -> tuple[float, list[float]]:
    """Seconds of one cold and `repeats` warm runs of the strategies page under AppTest."""
    from streamlit.testing.v1 import AppTest

    os.environ["PODRACER_RUNS_DIR"] = str(runs)
    app = Path(__file__).resolve().parents[1] / "dashboards" / "app.py"
    at = AppTest.from_file(str(app), default_timeout=300)
    start = time.perf_counter()
    at.run()
    cold = time.perf_counter() - start
    if at.exception:
        raise RuntimeError(at.exception[0].value)
    warm = []
    for _ in range(repeats):
        start = time.perf_counter()
        at.run()
        warm.append(time.perf_counter() - start)
    return cold, warm


def browser_times(runs: Path, repeats: int) -> list[float] | None:
    """Seconds from navigation to a fully drawn strategies page in Chromium, cache warm."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))  # a developer's tool, outside the package
    import dashboard_screenshots as screenshots

    if screenshots.find_browser() is None:
        return None
    with screenshots.serve(runs) as url:
        driver = screenshots.browser_driver()
        try:
            driver.get(url)
            screenshots.wait_until_drawn(driver, timeout=300)  # warms the cache
            times = []
            for _ in range(repeats):
                start = time.monotonic()
                driver.get(url)
                drawn = screenshots.wait_until_drawn(driver, timeout=300, poll=0.1)
                times.append(drawn - start)
            return times
        finally:
            driver.quit()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=Path("/tmp/podracer-paint-runs"), help="runs folder (built once)")
    parser.add_argument("--repeats", type=int, default=5, help="warm repetitions")
    args = parser.parse_args(argv)
    run_dir = build_run(args.runs)
    cold, warm = script_times(run_dir.parent, args.repeats)
    paint = browser_times(run_dir.parent, args.repeats)
    print(f"machine: {platform.platform()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"strategies page, {STRATEGIES} strategies over a year of minute bars:")
    print(
        f"  script run (AppTest): cold {cold:.2f} s, warm median {statistics.median(warm):.2f} s "
        f"(min {min(warm):.2f}, max {max(warm):.2f})"
    )
    if paint is None:
        print("  browser first paint: not measured (chromium and chromedriver not installed: make chromium)")
        return 0
    median = statistics.median(paint)
    print(
        f"  browser first paint (cache warm): median {median:.2f} s (min {min(paint):.2f}, max {max(paint):.2f}); "
        f"target < 3 s: {'met' if median < 3.0 else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
