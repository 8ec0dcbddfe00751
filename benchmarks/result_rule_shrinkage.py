"""Can a result rule tell the daily market from the costly minute one? Empirical-Bayes shrinkage, replayed (issue 42).

Today's rule (`tournament.selection.choose`) takes the ensemble unless the best pod's lead on validation is
more than being the best of N explains. It is right on the costly minute market, where validation orders the
pods at random, and costs 0.01 to 0.03 on the daily one, where it orders them well (benchmarks/RESULTS.md,
"The result rule"). The z of the lead is no help: it spans the same range on both. What does differ is how
much of the candidates' spread on validation is skill rather than noise: the **reliability** of validation.
This script replays a rule built on it, on kept runs, without writing anything:

1. the leaderboard's candidates' validation records (`tournament.selection.candidates`), on their common
   days: each one's per-day Sharpe ratio s_i, and the noise covariance of those estimates under normal
   returns, (rho_ij + s_i s_j rho_ij^2 / 2) / T (Jobson and Korkie; rho the records' correlation);
2. the skill variance tau^2: the candidates' sample variance of s_i less what the noise alone puts there,
   tr(C Sigma C) / (N - 1) with C the centring matrix (floored at 0);
3. the best pod's Sharpe shrunk toward the candidates' mean: mean + B (s_best - mean), with the reliability
   B = tau^2 / (tau^2 + v) and v the noise variance of the best pod's deviation from the mean;
4. the result: the best pod if its shrunk Sharpe exceeds the ensemble's validation Sharpe (the tournament's
   own ensemble, whose pass is in its ``trials.parquet``), else the ensemble.

Each seed's test Sharpe of the best pod and of the ensemble come from ``tournament_pods_test.py``'s records
(``--records``, its ``--out``), and the choice is compared with today's rule's and the earlier rule's (the
higher validation score). The rule was written after both markets' outcomes were seen: a pilot, not a test.

    OMP_NUM_THREADS=1 python benchmarks/result_rule_shrinkage.py runs/fresh-50 ... --records rows/pods_test.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tournament.leaderboard import Leaderboard
from tournament.selection import candidates, ensemble_record
from trader import rundir, stats

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks beside it
from tournament_pods_test import earlier_rule_test
from tournament_value import kept_run

ANNUAL = math.sqrt(252)


def shrunk_best(returns: np.ndarray) -> tuple[float, float, float]:
    """(the best candidate's per-day Sharpe, its shrunk Sharpe, the reliability B) of daily returns [days x N]."""
    days, n = returns.shape
    sharpe = returns.mean(axis=0) / returns.std(axis=0, ddof=1)
    rho = np.corrcoef(returns, rowvar=False)
    sigma = (rho + 0.5 * np.outer(sharpe, sharpe) * rho**2) / days
    centring = np.eye(n) - 1.0 / n
    noise = centring @ sigma @ centring
    tau2 = max(0.0, float(sharpe.var(ddof=1)) - float(np.trace(noise)) / (n - 1))
    best = int(np.argmax(sharpe))
    reliability = tau2 / (tau2 + noise[best, best]) if tau2 + noise[best, best] > 0 else 0.0
    mean = float(sharpe.mean())
    return float(sharpe[best]), mean + reliability * (float(sharpe[best]) - mean), reliability


def one_run(folder: Path, record: dict) -> dict:
    """The shrinkage rule on one kept tournament, beside the choices its record holds."""
    found = candidates(folder, Leaderboard.load(folder / rundir.LEADERBOARD).ranked())
    frame = pd.concat([c.daily for c in found], axis=1, join="inner")
    recorded = ensemble_record(folder)
    if recorded is None:
        raise SystemExit(f"{folder}: no ensemble in its trials.parquet (fewer than two qualified pods)")
    frame, ensemble = frame.align(recorded[1], join="inner", axis=0)
    best, shrunk, reliability = shrunk_best(frame.to_numpy(dtype=float))
    ensemble_sharpe = stats.sharpe_moments(ensemble.to_numpy(dtype=float)).sharpe
    choice = "best" if shrunk > ensemble_sharpe else "ensemble"
    test = {
        "best": record["best_pod"]["test"],
        "ensemble": record["ensembles"][str(len(record["rule"]["members"]))]["test"],
    }
    earlier = earlier_rule_test(record)
    if earlier is None:
        raise SystemExit(f"seed {record['seed']}: the record holds no validation of the rule's ensemble")
    return {
        "seed": record["seed"],
        "candidates": len(found),
        "days": len(frame),
        "reliability": reliability,
        "best": best * ANNUAL,
        "shrunk": shrunk * ANNUAL,
        "ensemble": ensemble_sharpe * ANNUAL,
        "choice": choice,
        "test": test[choice],
        "today": test[record["rule"]["result"]],
        "earlier": earlier,
    }


def report(found: list[dict]) -> str:
    lines = [
        "| seed | candidates, days | reliability B | validation: best / shrunk / ensemble | choice | test: shrinkage / today's / earlier rule's |",
        "|---:|---|---:|---|---|---|",
    ]
    for r in found:
        lines.append(
            f"| {r['seed']} | {r['candidates']}, {r['days']} | {r['reliability']:.2f} | {r['best']:.2f} / "
            f"{r['shrunk']:.2f} / {r['ensemble']:.2f} | {r['choice']} | {r['test']:.2f} / {r['today']:.2f} / "
            f"{r['earlier']:.2f} |"
        )
    chose_best = sum(r["choice"] == "best" for r in found)
    lines.append("")
    for other, label in (("today", "today's rule"), ("earlier", "the earlier rule")):
        gaps = [r["test"] - r[other] for r in found]
        lines.append(
            f"Shrinkage against {label}, test: above on {sum(g > 0 for g in gaps)}, below on "
            f"{sum(g < 0 for g in gaps)}, equal on {sum(g == 0 for g in gaps)} of {len(gaps)}; median "
            f"{statistics.median(gaps):+.3f}."
        )
    lines.append(f"The shrinkage rule chose the best pod on {chose_best} of {len(found)} seeds.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "folders", nargs="+", type=Path, help="folders holding pbt-S runs (tournament_value.py --keep-runs)"
    )
    parser.add_argument("--records", action="append", required=True, type=Path, help="tournament_pods_test.py --out")
    args = parser.parse_args(argv)
    records = {r["seed"]: r for path in args.records for r in json.loads(path.read_text())}
    runs = {
        kept[1]: p
        for folder in args.folders
        for p in sorted(folder.iterdir())
        if (kept := kept_run(p)) and kept[0] == "pbt"
    }
    missing = sorted(set(runs) - set(records))
    if not runs or missing:
        parser.error(f"no pbt-S run in {args.folders}" if not runs else f"seeds {missing} have no --records")
    unreplayed = sorted(seed for seed in runs if "rule" not in records[seed])
    if unreplayed:
        parser.error(f"seeds {unreplayed}: records without today's rule (written before it: replay them again)")
    print(report([one_run(runs[seed], records[seed]) for seed in sorted(runs)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
