"""How often the two deflated Sharpe ratios call the best of N trials real (issue 29).

Simulated daily returns: ``--trials`` independent Gaussian strategies over ``--days``
days, one of them carrying a true annual Sharpe of ``--edge`` (0: the global null).
The winner (highest sample Sharpe) is judged by `trader.stats.deflated_sharpe_ratio`
with V[SR_n] from the trials' own Sharpe ratios (`dsr`, Bailey and López de Prado)
and with the sampling variance of a zero-Sharpe trial (`dsr_null`,
`trader.stats.null_sharpe_variance`). Prints the share of draws above 0.95.

    python benchmarks/dsr_calibration.py                 # edge 0 and 3, 1,000 draws each
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from trader import stats


def shares(edge: float, draws: int, trials: int, days: int, seed: int) -> tuple[float, float]:
    """(share of draws with dsr > 0.95, share with dsr_null > 0.95)."""
    rng = np.random.default_rng(seed)
    returns = rng.normal(0.0, 0.01, size=(draws, trials, days))
    returns[:, 0, :] += edge / np.sqrt(stats.TRADING_DAYS) * 0.01
    sharpes = returns.mean(axis=2) / returns.std(axis=2, ddof=1)
    winners = returns[np.arange(draws), sharpes.argmax(axis=1)]
    empirical = null = 0
    for row, winner in zip(sharpes, winners, strict=True):
        m = stats.sharpe_moments(winner)
        empirical += (
            stats.deflated_sharpe_ratio(m.sharpe, m.days, m.skew, m.kurtosis, trials, np.var(row, ddof=1)) > 0.95
        )
        null += (
            stats.deflated_sharpe_ratio(
                m.sharpe, m.days, m.skew, m.kurtosis, trials, stats.null_sharpe_variance(m.days)
            )
            > 0.95
        )
    return empirical / draws, null / draws


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edges", default="0,3", help="true annual Sharpe of trial 0, comma-separated")
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--days", type=int, default=250)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    print("| true annual Sharpe of trial 0 | dsr > 0.95 | dsr_null > 0.95 |\n|---:|---:|---:|")
    for edge in (float(e) for e in args.edges.split(",")):
        empirical, null = shares(edge, args.draws, args.trials, args.days, args.seed)
        print(f"| {edge:g} | {empirical:.3f} | {null:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
