"""Would a finer validation score order the tournament's pods better? A pilot on kept runs (issue 42).

The leaderboard scores a pod by the Sharpe ratio of its daily returns over the validation period
(`trader.training.market_evaluator`): on the costly minute market that is 63 daily returns, and the
best pod it picks is not reliably the best on test (Spearman of validation and test over a run's pods
near zero on most seeds, RESULTS "Today's rule, every arm, both markets"). Its daily Sharpe ratio's
error has two parts: the mean's, and, at these Sharpe ratios (about 1.5 a day), the standard
deviation's, as large again. The per-bar returns of the same period estimate the standard deviation
from thousands of bars instead of 63 days; the mean is the same. This script measures whether that
orders the pods better, before any change to the evaluator:

for every kept tournament run (``pbt-S`` and ``random-S`` of ``tournament_value.py --keep-runs``, found
in the folders given, `tournament_value.kept_runs`), every kept pod is backtested on
the validation period as ``tournament_pods_test.py`` backtests them on test (the run's recorded rules,
`arms_backtest_config`), and scored twice: the daily Sharpe ratio (the leaderboard's score until
2026-11-29) and the Sharpe ratio of its bar returns (`trader.metrics.bar_sharpe_ratio`, the evaluator's
score since; the backtest's first bar, before any position, left out as the evaluator leaves it out; the
scores kept in benchmarks/rows/ were computed with it in, one zero return among 16,380 bars, which scales
every pod's figure alike). Their test Sharpe ratios
come from ``tournament_pods_test.py``'s records (``--records``, benchmarks/rows/), which also give the
single run's, so nothing is backtested on test again.

Printed per arm: per seed, the Spearman correlation of each validation score with test over the kept
pods, and the pod each score ranks first with its test Sharpe; then the medians and paired Wilcoxon
tests (the per-bar choice against the daily one and against the single run). Nothing in the run folders
is written. ``--out`` keeps the per-pod scores as JSON; ``--scores`` reports again from such a file.

    OMP_NUM_THREADS=1 python benchmarks/validation_resolution.py runs/fresh-50 runs/random-50 \\
        --records pbt:benchmarks/rows/tournament_pods_test_minute_rule_seeds50-55.json \\
        --records random:benchmarks/rows/tournament_pods_test_minute_rule_random_seeds50-54.json --out scores.json
    python benchmarks/validation_resolution.py --scores scores.json --records ...   # report again
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from scipy import stats as scipy_stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tournament import TournamentConfig
from tournament.leaderboard import Leaderboard
from tournament.orchestrator import validate_ensemble
from tournament.selection import select
from trader import metrics, rundir
from trader.agents.ensemble import load_ensemble
from trader.backtesting.engine import run_backtest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks beside it
from ensemble_lineages import best_checkpoint, run_backtest_rules
from tournament_pods_test import kept_pods
from tournament_value import kept_runs, not_worse, wilcoxon_words

ARMS = ("pbt", "random")


def validation_scores(folder: Path, device: str) -> dict[str, dict[str, float]]:
    """Pod id -> {"daily", "bar"}: every kept pod of a tournament run backtested on its validation period."""
    strategies = {p: str(best_checkpoint(folder, p)) for p in kept_pods(folder)["pod_id"]}
    dataset, rules = run_backtest_rules(folder)
    result = run_backtest(dataset, strategies, baselines=[], period="validation", config=rules, device=device)
    return {
        p: {
            "daily": float(result.metrics.loc[p, "sharpe_ratio"]),
            "bar": metrics.bar_sharpe_ratio(result.series[p]["return"].iloc[1:], result.series[p].index[1:]),
        }
        for p in strategies
    }


def bar_rule(folder: Path, bars: dict[str, dict[str, float]], device: str) -> dict:
    """Today's result rule (`tournament.selection.select`) replayed on a kept run with its leaderboard ranked
    by the bars' Sharpe ratio (``bars``: `validation_scores`), as a run trained today ranks it: the members
    (PSR(0) of their daily records, unchanged), the ensemble validated again by today's evaluator, the choice.
    Then the best pod and the ensemble backtested on test: their Sharpe ratio and max drawdown."""
    config = TournamentConfig.from_dict(rundir.read_toml(folder / rundir.TOURNAMENT))
    entries = [replace(e, score=bars[e.pod_id]["bar"]) for e in Leaderboard.load(folder / rundir.LEADERBOARD).ranked()]
    entries.sort(key=lambda e: -e.score)

    def validate(members: list, weights: list[float]) -> tuple[float, object]:
        return validate_ensemble(config, config.env, folder, members, weights)

    rule, _ = select(folder, entries, config.ensemble_k, config.ensemble_weighting, validate)
    best = rule.candidates[0]
    strategies: dict = {"best": str(best_checkpoint(folder, best.pod_id))}
    if rule.has_ensemble:
        strategies["ensemble"] = load_ensemble([folder / m.checkpoint for m in rule.members], device, rule.weights)
    dataset, rules = run_backtest_rules(folder)
    result = run_backtest(dataset, strategies, baselines=[], period="test", config=rules, device=device)
    test = {n: [float(result.metrics.loc[n, c]) for c in ("sharpe_ratio", "max_drawdown")] for n in strategies}
    choice = rule.choice.to_dict()
    return {
        "best": {
            "pod_id": best.pod_id,
            "validation": best.score,
            "test": test["best"][0],
            "max_drawdown": test["best"][1],
        },
        "ensemble": None
        if not rule.has_ensemble
        else {
            "members": [m.pod_id for m in rule.members],
            "validation": rule.ensemble_score,
            "test": test["ensemble"][0],
            "max_drawdown": test["ensemble"][1],
        },
        "result": rule.result,
        "z": choice["z"],
        "critical": choice["critical"],
    }


def rule_test(replayed: dict) -> float:
    """The test Sharpe of the result a replay chose."""
    return replayed["best" if replayed["result"] == "best" else "ensemble"]["test"]


def rule_report(rules: dict[str, dict[int, dict]], records: dict[str, dict[int, dict]]) -> list[str]:
    """The replays per seed, then issue 42's tests on them: PBT's result against the single run and against
    random search's result (paired Wilcoxon, and "not worse" by `tournament_value.NOT_WORSE_MARGIN`), and the
    ensemble's drawdown against the best pod's."""
    lines = [
        "## Today's result rule, the leaderboard ranked by the bars' Sharpe ratio",
        "",
        (
            "| arm | seed | best pod: validation (bar) / test / max DD | ensemble: members, validation (bar) / test / max DD "
            "| z (needs) | result: test | today's rule on the daily ranking: test | single: test |"
        ),
        "|---|---:|---|---|---|---|---:|---:|",
    ]
    for arm, by_seed in rules.items():
        for seed, r in sorted(by_seed.items()):
            b, e = r["best"], r["ensemble"]
            ens = (
                "none"
                if e is None
                else f"{len(e['members'])}, {e['validation']:.2f} / {e['test']:.2f} / {e['max_drawdown']:.2%}"
            )
            z = "n/a" if r["z"] is None else f"{r['z']:.2f} ({r['critical']:.2f})"
            record = records[arm][seed]
            lines.append(
                f"| {arm} | {seed} | {b['pod_id']} {b['validation']:.2f} / {b['test']:.2f} / {b['max_drawdown']:.2%} "
                f"| {ens} | {z} | {r['result']} {rule_test(r):.2f} | {record['rule']['test']:.2f} "
                f"| {record['single_best']:.2f} |"
            )
    lines.append("")
    for arm, by_seed in rules.items():
        seeds = sorted(by_seed)
        ours = [rule_test(by_seed[s]) for s in seeds]
        single = [records[arm][s]["single_best"] for s in seeds]
        daily = [records[arm][s]["rule"]["test"] for s in seeds]
        with_ensemble = [by_seed[s]["ensemble"] for s in seeds if by_seed[s]["ensemble"] is not None]
        shallower = sum(
            by_seed[s]["ensemble"]["max_drawdown"] >= by_seed[s]["best"]["max_drawdown"]
            for s in seeds
            if by_seed[s]["ensemble"] is not None
        )
        lines += [
            (
                f"{arm}: result medians, test: {statistics.median(ours):.2f} (single {statistics.median(single):.2f}, "
                f"the daily ranking's result {statistics.median(daily):.2f}); chose the ensemble on "
                f"{sum(by_seed[s]['result'] == 'ensemble' for s in seeds)} of {len(seeds)}."
            ),
            (
                f"{arm}: result against the single run: {wilcoxon_words(ours, single)}; not worse by 1%: one-sided "
                f"p = {not_worse(ours, single):.3f}."
            ),
            f"{arm}: result against the daily ranking's result: {wilcoxon_words(ours, daily)}.",
            (
                f"{arm}: the ensemble's max drawdown no larger than the best pod's on {shallower} of the "
                f"{len(with_ensemble)} seeds with an ensemble."
            ),
        ]
    if set(rules) == set(ARMS):
        seeds = sorted(set(rules["pbt"]) & set(rules["random"]))
        pbt = [rule_test(rules["pbt"][s]) for s in seeds]
        random = [rule_test(rules["random"][s]) for s in seeds]
        lines.append(
            f"PBT's result against random search's (both ranked by the bars), test: {wilcoxon_words(pbt, random)}; "
            f"not worse by 1%: one-sided p = {not_worse(pbt, random):.3f}."
        )
    return lines


def read_records(given: list[str]) -> dict[str, dict[int, dict]]:
    """Arm -> seed -> ``tournament_pods_test.py`` record (its pods' test Sharpe, the single run's), from
    ``ARM:PATH`` arguments. Raises ValueError for another form, an unknown arm or a seed given twice."""
    found: dict[str, dict[int, dict]] = {arm: {} for arm in ARMS}
    for item in given:
        arm, _, path = item.partition(":")
        if arm not in ARMS or not path:
            raise ValueError(f"--records takes ARM:PATH with ARM one of {', '.join(ARMS)}, got {item!r}")
        for record in json.loads(Path(path).read_text()):
            if record["seed"] in found[arm]:
                raise ValueError(f"--records: {arm}'s seed {record['seed']} is given twice")
            found[arm][record["seed"]] = record
    return found


def choice(scores: dict[str, dict[str, float]], tests: dict[str, float], by: str) -> tuple[str, float]:
    """The pod ``by`` ranks first, and its test Sharpe."""
    pod = max(scores, key=lambda p: scores[p][by])
    return pod, tests[pod]


def spearman(scores: dict[str, dict[str, float]], tests: dict[str, float], by: str) -> float:
    pods = sorted(scores)
    return float(scipy_stats.spearmanr([scores[p][by] for p in pods], [tests[p] for p in pods])[0])


def arm_report(arm: str, scores: dict[int, dict], records: dict[int, dict]) -> list[str]:
    lines = [
        f"## {arm}",
        "",
        (
            "| seed | pods | Spearman (daily, test) | Spearman (bar, test) | daily's choice: test | bar's choice: test "
            "| single: test | recorded validation vs backtest's daily, max abs difference |"
        ),
        "|---:|---:|---:|---:|---|---|---:|---:|",
    ]
    rows = []
    for seed in sorted(scores):
        pods, record = scores[seed], records[seed]
        tests = pod_tests(record)
        recorded = {p["pod_id"]: p["validation"] for p in record["pods"]}
        daily, bar = choice(pods, tests, "daily"), choice(pods, tests, "bar")
        gap = max(abs(pods[p]["daily"] - recorded[p]) for p in pods)
        rows.append((daily[1], bar[1], record["single_best"]))
        lines.append(
            f"| {seed} | {len(pods)} | {spearman(pods, tests, 'daily'):+.2f} | {spearman(pods, tests, 'bar'):+.2f} "
            f"| {daily[0]} {daily[1]:.2f} | {bar[0]} {bar[1]:.2f} | {record['single_best']:.2f} | {gap:.3f} |"
        )
    daily, bar, single = (list(column) for column in zip(*rows, strict=True))
    rho = {
        by: statistics.median(spearman(scores[s], pod_tests(records[s]), by) for s in scores) for by in ("daily", "bar")
    }
    lines += [
        "",
        (
            f"Median Spearman with test: daily {rho['daily']:+.2f}, bar {rho['bar']:+.2f}. Medians of the chosen pod's "
            f"test Sharpe: daily {statistics.median(daily):.2f}, bar {statistics.median(bar):.2f}; single "
            f"{statistics.median(single):.2f}."
        ),
        f"Bar's choice against daily's, test: {wilcoxon_words(bar, daily)}.",
        f"Bar's choice against the single run, test: {wilcoxon_words(bar, single)}.",
        f"Daily's choice against the single run, test: {wilcoxon_words(daily, single)}.",
    ]
    return lines


def pod_tests(record: dict) -> dict[str, float]:
    """Pod id -> test Sharpe, from a ``tournament_pods_test.py`` record."""
    return {p["pod_id"]: p["test"] for p in record["pods"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="*", type=Path, help="folders of tournament_value.py --keep-runs")
    parser.add_argument(
        "--records", action="append", default=[], help="ARM:PATH, tournament_pods_test.py --out of that arm (repeat)"
    )
    parser.add_argument("--scores", type=Path, default=None, help="report again from an earlier --out")
    parser.add_argument("--arms", default="pbt,random", help="tournament arms to score (default pbt,random)")
    parser.add_argument("--out", type=Path, default=None, help="write the per-pod validation scores as JSON here")
    parser.add_argument(
        "--rule",
        action="store_true",
        help="also replay today's result rule on each run with the leaderboard ranked by the bars (folders needed; "
        "the scores of --scores are reused where given)",
    )
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    arms = args.arms.split(",")
    if set(arms) - set(ARMS):
        parser.error(f"--arms takes {', '.join(ARMS)}, got {args.arms!r}")
    try:
        records = read_records(args.records)
    except (ValueError, OSError) as error:
        parser.error(str(error))
    if any(not records[arm] for arm in arms):
        parser.error("give each arm's test records of tournament_pods_test.py --out (--records ARM:PATH)")
    if args.out is not None and args.out.exists():
        parser.error(f"--out {args.out} exists: give a new path")
    if not args.folders and args.scores is None:
        parser.error("give the folders of tournament_value.py --keep-runs, or --scores")
    if args.folders and args.scores is not None and not args.rule:
        parser.error("folders with --scores: only to replay the rule on the saved scores (--rule)")
    if args.rule and not args.folders:
        parser.error("--rule replays the rule on the runs: give their folders")
    saved = {} if args.scores is None else json.loads(args.scores.read_text())
    scores = {arm: {int(s): v for s, v in by_seed.items()} for arm, by_seed in saved.get("scores", {}).items()}
    rules = {arm: {int(s): v for s, v in by_seed.items()} for arm, by_seed in saved.get("rule", {}).items()}
    if args.folders:
        try:
            found = kept_runs(args.folders, tuple(arms))
        except ValueError as error:
            parser.error(str(error))
        for arm in arms:
            for seed, folder in ((s, held[arm]) for s, held in found.items() if arm in held):
                if seed not in scores.setdefault(arm, {}):
                    scores[arm][seed] = validation_scores(folder, args.device)
                    print(f"seed {seed} {arm}: {len(scores[arm][seed])} pods scored on validation", flush=True)
                if args.rule:
                    rules.setdefault(arm, {})[seed] = bar_rule(folder, scores[arm][seed], args.device)
                    print(f"seed {seed} {arm}: the rule replayed ({rules[arm][seed]['result']})", flush=True)
        if args.out is not None:
            args.out.write_text(json.dumps({"scores": scores, "rule": rules}, indent=1))
    for arm in (a for a in arms if scores.get(a)):
        lacking = sorted(
            s for s in scores[arm] if s not in records[arm] or set(scores[arm][s]) - set(pod_tests(records[arm][s]))
        )
        if lacking:
            parser.error(f"--records: no {arm} record with every kept pod for seed(s) {lacking}")
        print("\n".join(arm_report(arm, scores[arm], records[arm])) + "\n")
    if rules:
        print("\n".join(rule_report({a: rules[a] for a in arms if rules.get(a)}, records)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
