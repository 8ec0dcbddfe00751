"""Does validation tell the tournament's pods apart? The test period of every kept pod (issue 42).

The runs ``tournament_value.py --keep-runs DIR`` kept hold each pod's validation record; this script
backtests what validation chose among. For each seed's PBT run (``pbt-S``) and single
run (``single-S``) in the folders given:

1. every pod whose best checkpoint was kept (the leaderboard's entries and their ancestors; the
   tournament deletes the weights of the others): its validation score (``pods.parquet``), its
   generation and its test Sharpe ratio;
2. the single run's ``best`` snapshot (the one its arm is scored by) and its ``final`` one;
3. ensembles of the leaderboard's top k pods, equally weighted, combined as the tournament combines
   its own (`trader.agents.ensemble`), for each k of ``--ks``: their test Sharpe, and their validation
   score by the evaluator the tournament chooses its result with
   (`tournament.orchestrator.validate_ensemble`). k = 1 is the best pod, whose validation score is the
   leaderboard's.

Every test backtest is ``tournament_value.py``'s (the run's recorded rules, `arms_backtest_config`), so
the best pod's test Sharpe equals the row's (checked when ``--rows`` are given). Nothing in the run
folders is written.

Printed per seed: the pods (generation: validation / test), then a Markdown table: the single run's
best and final test Sharpe, the best pod's validation and test, the kept pods' test median and range,
the Spearman rank correlation of validation and test over the kept pods, and each ensemble's validation
and test; then the counts and Wilcoxon tests a reader needs: is the single run above the median kept pod,
does the top-k ensemble beat the best pod, and the single run, on test; and the **hindsight ceiling**: the
best test Sharpe of any kept pod or ensemble, chosen on the test period itself, against the single run. No
rule that chooses among these pods and ensembles on validation can do better than that ceiling, so where
the ceiling does not beat the single run, the loss is in what was bred, not in how it was chosen. Last,
today's result rule replayed on each run (`tournament.selection.select`, the run's own members): what it
chooses, its result's test Sharpe against the single run and against the result the run recorded (chosen
by the rule of the run's day). ``--versus`` pairs those results with another arm's, replayed the same way
(random search's runs, linked as ``pbt-S`` beside ``single-S`` in a folder of their own).

``--records`` reports again from records an earlier ``--out`` wrote (benchmarks/rows/), with no backtest.

    OMP_NUM_THREADS=1 python benchmarks/tournament_pods_test.py runs/deep-24 runs/deep-25 --ks 1,3,8
    OMP_NUM_THREADS=1 python benchmarks/tournament_pods_test.py runs/deep-24 --rows rows/tournament_value_minute_deep_seed24.json
    python benchmarks/tournament_pods_test.py --records benchmarks/rows/tournament_pods_test_minute_deep_seeds24-29.json
    python benchmarks/tournament_pods_test.py --records pbt.json --versus random.json   # the two arms' results, paired
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import pandas as pd
from scipy import stats as scipy_stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the checkout's root, for benchmarks.

from benchmarks.tournament_value import NOT_WORSE_MARGIN, arms_backtest_config, not_worse, today_rule, wilcoxon_words
from tournament import TournamentConfig
from tournament.leaderboard import Leaderboard
from tournament.orchestrator import validate_ensemble
from tournament.pod import pod_dir
from tournament.selection import Candidate, Selection
from trader import rundir
from trader.agents.ensemble import load_ensemble
from trader.backtesting.config import BacktestConfig
from trader.backtesting.engine import run_backtest
from trader.backtesting.runs import read_run
from trader.rundir import config_to_dict


def best_checkpoint(folder: Path, pod: str) -> Path:
    """A pod's best checkpoint (path without suffix) in a tournament's run folder."""
    return pod_dir(folder, pod) / rundir.CHECKPOINTS / "best"


def run_backtest_rules(folder: Path) -> tuple[str, BacktestConfig]:
    """The data set and the test backtest's rules as tournament_value.py builds them, from the run's env rules."""
    contents = read_run(folder)
    return contents.dataset, arms_backtest_config(config_to_dict(contents.env_config))


def read_rows(paths: list[Path]) -> dict[int, dict]:
    """tournament_value.py's rows (``--out`` / ``--with-rows`` files) by seed."""
    rows = {}
    for path in paths:
        values = json.loads(path.read_text())
        for row in values if isinstance(values, list) else values["rows"]:
            rows[int(row["seed"])] = row
    return rows


def kept_pods(folder: Path) -> pd.DataFrame:
    """The finished pods of a tournament whose best checkpoint is still on disk: id, generation, validation score."""
    pods = pd.read_parquet(folder / rundir.PODS)
    pods = pods[pods["status"] == "finished"]
    kept = [best_checkpoint(folder, pod).with_suffix(".safetensors").is_file() for pod in pods["pod_id"]]
    return pods.loc[kept, ["pod_id", "generation", "score"]].reset_index(drop=True)


def one_seed(seed: int, root: Path, ks: list[int], device: str, replay: tuple[Selection, str]) -> dict:
    """The seed's test Sharpe of every kept pod, of the single run's two snapshots and of the top-k ensembles,
    and of today's rule's result (``replay``: `tournament_value.today_rule` on the seed's run)."""
    folder, single = root / f"pbt-{seed}", root / f"single-{seed}"
    config = TournamentConfig.from_dict(rundir.read_toml(folder / rundir.TOURNAMENT))
    ranked = Leaderboard.load(folder / rundir.LEADERBOARD).ranked()
    pods = kept_pods(folder)
    strategies: dict = {p: str(best_checkpoint(folder, p)) for p in pods["pod_id"]}
    for snapshot in ("best", "final"):
        strategies[f"single_{snapshot}"] = str(single / rundir.CHECKPOINTS / snapshot)
    ensembles = {}
    for k in (k for k in ks if 2 <= k <= len(ranked)):
        members = [Candidate(e.pod_id, e.checkpoint, e.score, math.nan) for e in ranked[:k]]
        paths = [folder / e.checkpoint for e in ranked[:k]]
        strategies[f"top{k}"] = load_ensemble(paths, device)
        ensembles[k], _ = validate_ensemble(config, folder, members, [1.0 / k] * k)
    rule, recorded = replay
    same = top_k_of(rule, ranked, ensembles)
    if rule.has_ensemble and same is None:  # else the top-k ensemble already backtested is the rule's
        paths = [folder / m.checkpoint for m in rule.members]
        strategies["ensemble"] = load_ensemble(paths, device, rule.weights)
    dataset, backtest = run_backtest_rules(folder)
    result = run_backtest(dataset, strategies, baselines=[], period="test", config=backtest, device=device)
    test = {name: float(result.metrics.loc[name, "sharpe_ratio"]) for name in strategies}
    best = ranked[0]
    test_of = {"best": test[best.pod_id], "ensemble": test.get("ensemble" if same is None else f"top{same}")}
    return {
        "seed": seed,
        "pods": [
            {"pod_id": p, "generation": int(g), "validation": float(v), "test": test[p]}
            for p, g, v in pods.itertuples(index=False)
        ],
        "single_best": test["single_best"],
        "single_final": test["single_final"],
        "best_pod": {"pod_id": best.pod_id, "validation": best.score, "test": test[best.pod_id]},
        "ensembles": {
            str(k): {
                "validation": ensembles.get(k, best.score),
                "test": test[f"top{k}"] if k > 1 else test[best.pod_id],
            }
            for k in ks
            if k <= len(ranked)
        },
        "rule": {
            "result": rule.result,
            "members": [m.pod_id for m in rule.members],
            "z": rule.choice.to_dict()["z"],
            "critical": rule.choice.to_dict()["critical"],
            "test": test_of[rule.result],
        },
        "recorded_result": {"result": recorded, "test": test_of[recorded]},
    }


def top_k_of(rule: Selection, ranked: list, ensembles: dict[int, float]) -> int | None:
    """k where the rule's ensemble is the leaderboard's equally weighted top k among ``ensembles`` (already
    validated and backtested); None where it is another or there is none."""
    k = len(rule.members)
    equal = all(math.isclose(w, 1.0 / k) for w in rule.weights)
    ids = [m.pod_id for m in rule.members]
    return k if rule.has_ensemble and equal and k in ensembles and ids == [e.pod_id for e in ranked[:k]] else None


def spearman(record: dict) -> float:
    """The rank correlation of validation and test over a seed's kept pods."""
    return float(
        scipy_stats.spearmanr([p["validation"] for p in record["pods"]], [p["test"] for p in record["pods"]])[0]
    )


def hindsight_ceiling(record: dict) -> float:
    """The best test Sharpe of a seed's kept pods and ensembles: what a choice that saw the test period would get."""
    return max([p["test"] for p in record["pods"]] + [e["test"] for e in record["ensembles"].values()])


def report(found: list[dict], ks: list[int]) -> str:
    lines = []
    for f in found:
        pods = " ".join(f"{p['pod_id']} (g{p['generation']}) {p['validation']:.2f}/{p['test']:.2f}" for p in f["pods"])
        lines.append(f"seed {f['seed']}, kept pods (validation/test): {pods}")
    shown = [k for k in ks if k > 1]
    head = (
        "| seed | single: best / final snapshot, test | best pod: validation / test | kept pods: test median "
        "(min to max) | Spearman (validation, test) over kept pods | "
        + " | ".join(f"top-{k} ensemble: validation / test" for k in shown)
        + " |"
    )
    lines += ["", head, "|---:|---|---|---|---:|" + "---|" * len(shown)]
    for f in found:
        tests = [p["test"] for p in f["pods"]]
        cells = [
            f"{f['ensembles'][str(k)]['validation']:.2f} / {f['ensembles'][str(k)]['test']:.2f}"
            if str(k) in f["ensembles"]
            else "n/a"
            for k in shown
        ]
        lines.append(
            f"| {f['seed']} | {f['single_best']:.2f} / {f['single_final']:.2f} "
            f"| {f['best_pod']['validation']:.2f} / {f['best_pod']['test']:.2f} "
            f"| {statistics.median(tests):.2f} ({min(tests):.2f} to {max(tests):.2f}) | {spearman(f):+.2f} | "
            + " | ".join(cells)
            + " |"
        )
    single = [f["single_best"] for f in found]
    median_pod = [statistics.median(p["test"] for p in f["pods"]) for f in found]
    best = [f["best_pod"]["test"] for f in found]
    lines += [
        "",
        f"Single run's best snapshot against the median kept pod, test: {wilcoxon_words(single, median_pod)}.",
    ]
    rhos = [spearman(f) for f in found]
    lines.append(f"Spearman (validation, test) over kept pods: median {statistics.median(rhos):+.2f}.")
    for k in shown:
        have = [f for f in found if str(k) in f["ensembles"]]
        if not have:
            continue
        ens = [f["ensembles"][str(k)]["test"] for f in have]
        lines.append(
            f"Top-{k} ensemble, test, against the best pod: "
            f"{wilcoxon_words(ens, [f['best_pod']['test'] for f in have])}; against the single run: "
            f"{wilcoxon_words(ens, [f['single_best'] for f in have])}; above the best pod on validation on "
            f"{sum(f['ensembles'][str(k)]['validation'] > f['best_pod']['validation'] for f in have)} of {len(have)}."
        )
    ceiling = [hindsight_ceiling(f) for f in found]
    lines.append(
        "Hindsight ceiling (the best kept pod or ensemble chosen on the test period), against the single run: "
        f"{wilcoxon_words(ceiling, single)}; by {', '.join(f'{c - s:+.2f}' for c, s in zip(ceiling, single, strict=True))}."
    )
    lines.append(
        f"Medians: single {statistics.median(single):.2f}, best pod {statistics.median(best):.2f}, "
        f"hindsight ceiling {statistics.median(ceiling):.2f}."
    )
    if all("rule" in f for f in found):  # records written before 2026-11-29 lack today's rule
        lines += result_rule_lines(found, single)
    return "\n".join(lines)


def result_rule_lines(found: list[dict], single: list[float]) -> list[str]:
    """Today's result rule replayed, against the single run and the result each run recorded."""
    rule = [f["rule"]["test"] for f in found]
    recorded = [f["recorded_result"]["test"] for f in found]
    chosen = ", ".join(
        f"{f['seed']}: {f['rule']['result']} (z {_z(f['rule']['z'])}, needs {_z(f['rule']['critical'])}; "
        f"recorded {f['recorded_result']['result']})"
        for f in found
    )
    against = (
        f"Its result, test, against the single run: {wilcoxon_words(rule, single)}, not worse by "
        f"{100 * NOT_WORSE_MARGIN:g}%: one-sided p = {not_worse(rule, single):.3f}; against the result each run "
        f"recorded: {wilcoxon_words(rule, recorded)}; medians {statistics.median(rule):.2f} and "
        f"{statistics.median(recorded):.2f}."
    )
    return [f"Today's result rule, replayed: {chosen}.", against, *earlier_rule_lines(found, single, "the single run")]


def earlier_rule_test(record: dict) -> float | None:
    """The test Sharpe of what the earlier rule (issue 42's own: the higher validation score of the best pod and the
    ensemble, a tie to the best pod) chooses between the record's best pod and today's rule's ensemble; None where
    the record holds no validation of that ensemble (its members not the top pods, or their number not in --ks)."""
    members = record["rule"]["members"]
    if len(members) < 2:
        return record["best_pod"]["test"]
    ranked = [p["pod_id"] for p in sorted(record["pods"], key=lambda p: p["validation"], reverse=True)]
    ensemble = record["ensembles"].get(str(len(members)))
    if ensemble is None or set(ranked[: len(members)]) != set(members):
        return None
    return (
        record["best_pod"]["test"] if record["best_pod"]["validation"] >= ensemble["validation"] else ensemble["test"]
    )


def earlier_rule_lines(found: list[dict], other: list[float], name: str) -> list[str]:
    """The earlier rule's result (`earlier_rule_test`) against ``other`` (test Sharpe ratios paired by seed)."""
    earlier = [earlier_rule_test(f) for f in found]
    unknown = [f["seed"] for f, e in zip(found, earlier, strict=True) if e is None]
    if unknown:
        return [f"The earlier rule's result: not in these records (seeds {unknown})."]
    line = (
        f"The earlier rule's result (the higher validation score), test, against {name}: {wilcoxon_words(earlier, other)}, "
        f"not worse by {100 * NOT_WORSE_MARGIN:g}%: one-sided p = {not_worse(earlier, other):.3f}; medians "
        f"{statistics.median(earlier):.2f} and {statistics.median(other):.2f}."
    )
    return [line]


def versus_lines(found: list[dict], other: list[dict]) -> list[str]:
    """Today's rule's result against another arm's, replayed the same way on the same seeds (``--versus``)."""
    if [f["seed"] for f in found] != [o["seed"] for o in other]:
        raise ValueError(f"--versus: other seeds ({[o['seed'] for o in other]}) than the records'")
    ours, theirs = [f["rule"]["test"] for f in found], [o["rule"]["test"] for o in other]
    line = (
        f"Today's rule's result against the other arm's (--versus), test: {wilcoxon_words(ours, theirs)}, not worse by "
        f"{100 * NOT_WORSE_MARGIN:g}%: one-sided p = {not_worse(ours, theirs):.3f}; medians "
        f"{statistics.median(ours):.2f} and {statistics.median(theirs):.2f}."
    )
    theirs_earlier = [earlier_rule_test(o) for o in other]
    if None in theirs_earlier:
        return [line, "The other arm's earlier rule: not in its records."]
    return [line, *earlier_rule_lines(found, theirs_earlier, "the other arm's earlier rule")]


def _z(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def read_records(paths: list[Path], parser: argparse.ArgumentParser) -> list[dict]:
    """The per-seed records of earlier ``--out`` files, in seed order; a missing or foreign file is refused."""
    records = []
    for path in paths:
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            parser.error(f"--records {path}: cannot read it as JSON ({error})")
        if not isinstance(found, list) or not all(isinstance(r, dict) and "pods" in r for r in found):
            parser.error(f"--records {path}: not the records of tournament_pods_test.py --out")
        records += found
    seeds = [r["seed"] for r in records]
    if len(set(seeds)) != len(seeds):
        parser.error(f"--records: a seed appears twice ({sorted(seeds)})")
    return sorted(records, key=lambda r: r["seed"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="*", type=Path, help="folders written by tournament_value.py --keep-runs")
    parser.add_argument(
        "--records", type=Path, action="append", default=[], help="report again from an earlier --out (repeat)"
    )
    parser.add_argument(
        "--versus",
        type=Path,
        action="append",
        default=[],
        help="with --records: another arm's records (random search kept as pbt-S), paired by seed (repeat)",
    )
    parser.add_argument("--ks", default="1,3,8", help="ensemble sizes, comma-separated (default 1,3,8)")
    parser.add_argument("--rows", type=Path, action="append", default=[], help="tournament_value.py's rows (repeat)")
    parser.add_argument("--out", type=Path, default=None, help="also write the per-seed records as JSON here")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    try:
        ks = sorted({int(k) for k in args.ks.split(",")})
    except ValueError:
        ks = []
    if not ks or ks[0] < 1:
        parser.error(f"--ks needs sizes >= 1, comma-separated, got {args.ks!r}")
    if args.out and args.out.exists():
        parser.error(f"--out {args.out} exists: give a new path")
    if bool(args.roots) == bool(args.records):
        parser.error("give the folders of tournament_value.py --keep-runs, or --records, not both")
    if args.records and (args.out or args.rows):
        parser.error("--records reports saved records again: --out and --rows belong to a run that backtests")
    if args.versus and not args.records:
        parser.error("--versus pairs saved records: give --records too")
    if args.records:
        found = read_records(args.records, parser)
        lines = [report(found, ks)]
        if args.versus:
            other = read_records(args.versus, parser)
            if not all("rule" in r for r in found + other):
                parser.error("--versus: records written before 2026-11-29 have no replayed rule")
            try:
                lines += versus_lines(found, other)
            except ValueError as error:
                parser.error(str(error))
        print("\n".join(lines))
        return 0
    rows = read_rows(args.rows) if args.rows else {}
    seeds = []
    for root in args.roots:
        found = sorted(
            int(p.name.split("-")[1]) for p in root.glob("pbt-*") if (root / f"single-{p.name[4:]}").is_dir()
        )
        if not found:
            parser.error(f"{root}: no pbt-S beside single-S of tournament_value.py --keep-runs in it")
        missing = [seed for seed in found if rows and seed not in rows]
        if missing:
            parser.error(f"{root}: seed(s) {missing} have no row in --rows")
        seeds += [(seed, root) for seed in found]
    replays = {}
    for seed, root in seeds:  # a run of another membership rule is refused before any backtest
        try:
            replays[seed] = today_rule(root / f"pbt-{seed}")
        except ValueError as error:
            parser.error(str(error))
        if replays[seed] is None:
            parser.error(f"{root / f'pbt-{seed}'}: no pod finished: nothing to backtest")
    records = []
    for seed, root in seeds:
        record = one_seed(seed, root, ks, args.device, replays[seed])
        if rows and not math.isclose(record["best_pod"]["test"], rows[seed]["best_pod"]["sharpe"], abs_tol=1e-9):
            raise SystemExit(
                f"seed {seed}: the best pod's test Sharpe is not the row's: this backtest is not the benchmark's"
            )
        print(json.dumps(record), flush=True)
        records.append(record)
    print(report(records, ks))
    if args.out:
        args.out.write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
