"""How long the `trader` command takes to answer `--help`: the CLI's start-up cost.

Runs each command line `--runs` times as a fresh subprocess (the installed `trader`
console script beside this Python, else the same entry point through `python -c`)
and prints the median, min and max wall-clock in a markdown table. The rows:

- ``python -c pass``: the interpreter's own start-up, the floor of every row;
- ``trader --help``, ``trader data --help``, ``trader train --help``: help only; a
  lazy CLI imports typer and rich here, never torch, scipy or pandas;
- ``trader data list``: a command that runs, for contrast: it reads the recipes,
  which loads the data layer (pandas, torch).

Target (issue 28): ``trader --help`` under 1 s on the 2-core reference machine.
Set PYTHONPATH to time another checkout, e.g. the commit before the CLI was lazy.

    OMP_NUM_THREADS=1 python benchmarks/cli_startup.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROWS = (
    ("python -c pass", ["-c", "pass"]),
    ("trader --help", ["--help"]),
    ("trader data --help", ["data", "--help"]),
    ("trader train --help", ["train", "--help"]),
    ("trader data list (runs)", ["data", "list"]),
)


def trader_command() -> list[str]:
    """The `trader` console script of this Python's environment, else its entry point via -c."""
    script = Path(sys.executable).parent / "trader"
    if script.is_file():
        return [str(script)]
    found = shutil.which("trader")
    return [found] if found else [sys.executable, "-P", "-c", "from podracer.cli import entry_point; entry_point()"]


def time_run(command: list[str], runs: int) -> list[float]:
    """Wall-clock seconds of ``runs`` fresh runs of ``command``; each must exit 0."""
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
        seconds.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return seconds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh runs per command (median reported)")
    args = parser.parse_args(argv)
    trader = trader_command()
    where = subprocess.run(
        [sys.executable, "-P", "-c", "import trader; print(trader.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"trader: {' '.join(trader)} (package {Path(where).parent})")
    print()
    print(f"| command | median of {args.runs} | min | max |")
    print("|---|---:|---:|---:|")
    for label, tail in ROWS:
        command = [sys.executable, *tail] if label.startswith("python") else [*trader, *tail]
        seconds = time_run(command, args.runs)
        print(
            f"| `{label}` | {statistics.median(seconds):.2f} s | {min(seconds):.2f} s | {max(seconds):.2f} s |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
