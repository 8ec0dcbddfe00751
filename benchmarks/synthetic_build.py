"""Time to generate the synthetic market, split into its two steps.

`market_envs.data.synthetic.synthetic` draws the market (`generate_frame`: factors,
GARCH, intraday profile, the planted edge, OHLCV) and then validates it and computes
the indicators (`from_frame`, the path every provider shares). This times both steps
`--repeat` times on the default model (minute bars) and prints each run and the
median. `benchmarks/data_build.py` times the whole recipe build, cache included.

    OMP_NUM_THREADS=1 python benchmarks/synthetic_build.py                 # 100 tickers, 2023
    OMP_NUM_THREADS=1 python benchmarks/synthetic_build.py --edge --tickers 30
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from market_envs.data.edge import EdgeSpec
from market_envs.data.frame import from_frame
from market_envs.data.synthetic import BENCHMARK_NAME, MarketModel, generate_frame


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tickers", type=int, default=100)
    parser.add_argument("--start", default="2023-01-03")
    parser.add_argument("--end", default="2024-01-01")
    parser.add_argument("--edge", action="store_true", help="plant the default EdgeSpec")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    spec = EdgeSpec() if args.edge else None
    total, generate, validate = [], [], []
    for _ in range(args.repeat):
        began = time.perf_counter()
        frame, benchmark, _ = generate_frame(args.tickers, args.start, args.end, 0, "1min", spec, MarketModel())
        generated = time.perf_counter()
        data = from_frame(frame, benchmark, name="synthetic", benchmark_name=BENCHMARK_NAME, source="synthetic")
        done = time.perf_counter()
        total.append(done - began)
        generate.append(generated - began)
        validate.append(done - generated)
    print(data)
    for label, times in (("build", total), ("  generate_frame", generate), ("  from_frame", validate)):
        print(f"{label} (s): {[round(s, 2) for s in times]}, median {statistics.median(times):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
