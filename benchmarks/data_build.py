"""Time to build and cache a data set recipe, and to load it back from the cache.

Builds the recipe (default: the embedded default `synthetic-minute`, 100 tickers x
about a year of minute bars x 13 features) into a fresh temporary data directory,
then loads it from the cache `--loads` times and reports the median. Prints the
machine, the panel's shape, the cache entry's size and the timings.

    python benchmarks/data_build.py                       # the default recipe
    python benchmarks/data_build.py --set n_tickers=10    # a smaller variant
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from market_envs.data import load  # noqa: E402
from market_envs.data.cache import DataCache  # noqa: E402
from market_envs.data.recipes import parse_overrides  # noqa: E402


def _folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", nargs="?", default="synthetic-minute", help="recipe name or path")
    parser.add_argument("--loads", type=int, default=5, help="cache loads to time (median reported)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="KEY=VALUE override")
    args = parser.parse_args()
    torch.set_num_threads(1)
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
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, torch threads 1")
    print(f"recipe: {args.recipe} {overrides or ''}  panel: {t} bars x {n} tickers x {f} features "
          f"({data.features.numel() * 4 / 2**20:.0f} MiB float32), cache entry {entry_mb:.0f} MiB")
    print(f"build + validate + cache: {build_s:8.2f} s")
    print(f"load from cache (median of {args.loads}): {statistics.median(loads):8.2f} s "
          f"(min {min(loads):.2f}, max {max(loads):.2f})")


if __name__ == "__main__":
    main()
