"""Would PBT's ensemble do better with its members drawn from distinct lineages? Kept runs re-selected (issue 42).

The tournament's ensemble takes the best pods that clear the bar on validation (PSR(0) >= 0.95), at most
``ensemble_k`` (`tournament.selection`). Exploit breeds children from the top pods, so those members are often
one family: on TD3 alone over the minute edge, the three members came from one lineage on 8 seeds of 10
(`tournament_lineage.py`'s last column), near-copies of one validated pod, while random search's ensemble
averages independently trained pods. This script asks what the tournament's result would have been had each
lineage (a fresh pod and every pod that continued its weights, `tournament.leaderboard.lineage`) given at
most one member, the best qualified of it:

1. for each seed's PBT run that ``tournament_value.py --keep-runs DIR`` kept (``pbt-S``), the members by
   lineage, from the run's own ``selection.json`` (its ranking and who qualified) and ``pods.parquet``;
2. with two or more, that ensemble validated as the tournament validates its own
   (`tournament.orchestrator.validate_ensemble`: the same evaluator, the members' env rules), and the
   result chosen as the tournament chooses today (`tournament.selection.choose`: the ensemble unless the
   best pod beats it on validation by more than being the best of its N validation passes explains; runs kept
   before 2026-11-29 recorded their own result by the earlier rule, the higher validation score);
3. the test period backtested as ``tournament_value.py`` backtests its arms (the run's recorded env
   rules and costs), with today's result beside it: its Sharpe must equal the row's (a check that the
   two backtests are the same).

Nothing in the run folders is written. Printed: a Markdown table per seed, then the medians and the
Wilcoxon signed-rank tests of the lineage rule's result against the single run and against today's
result (the rows' ``single`` and ``result`` test Sharpe, from ``--rows``). The rule was read off seeds 0 to
6 of the TD3 runs: those seeds are where it was found, not a test of it. On the ten seeds it did not help
(benchmarks/RESULTS.md, "PBT's ensemble with one member per lineage"): the rule is not the tournament's.

    OMP_NUM_THREADS=1 python benchmarks/ensemble_lineages.py runs/td3 --rows rows/tournament_value_td3_minute_seeds0-5.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tournament import TournamentConfig
from tournament.orchestrator import validate_ensemble
from tournament.pod import pod_dir
from tournament.selection import Candidate, best_of, choose, member_weights, validation_record
from trader import rundir
from trader.backtesting.engine import BacktestConfig, run_backtest
from trader.backtesting.runs import read_run
from trader.rundir import config_to_dict

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks beside it
from tournament_lineage import lineage_root, pod_parents
from tournament_value import arms_backtest_config, wilcoxon_words


def lineage_members(folder: Path, k: int) -> tuple[list[str], list[str]]:
    """(today's members, the members by lineage) of a kept tournament: the best qualified pod of each
    lineage, best first, at most ``k``."""
    selection = rundir.read_json(folder / rundir.SELECTION, version=rundir.SELECTION_VERSION)
    parents = pod_parents(pd.read_parquet(folder / rundir.PODS))
    chosen, roots = [], set()
    for candidate in selection["candidates"]:  # ranked, best first
        root = lineage_root(parents, candidate["pod_id"])
        if candidate["qualified"] and root not in roots and len(chosen) < k:
            chosen.append(candidate["pod_id"])
            roots.add(root)
    return list(selection["members"]), chosen


def best_checkpoint(folder: Path, pod: str) -> Path:
    """A pod's best checkpoint (path without suffix) in a tournament's run folder."""
    return pod_dir(folder, pod) / rundir.CHECKPOINTS / "best"


def run_backtest_rules(folder: Path) -> tuple[str, BacktestConfig]:
    """The data set and the test backtest's rules as tournament_value.py builds them, from the run's env rules."""
    contents = read_run(folder)
    return contents.dataset, arms_backtest_config(config_to_dict(contents.env_config))


def one_seed(folder: Path, device: str) -> dict:
    """The seed's lineage rule beside today's: members, validation scores, results and test Sharpe ratios."""
    config = TournamentConfig.from_dict(rundir.read_toml(folder / rundir.TOURNAMENT))
    today, by_lineage = lineage_members(folder, config.ensemble_k)
    selection = rundir.read_json(folder / rundir.SELECTION, version=rundir.SELECTION_VERSION)
    best_score = selection["best_score"]

    found = {"today": today, "today_result": selection["result"], "lineages": by_lineage, "best_score": best_score}
    found.update(today_score=selection["ensemble_score"], lineages_score=None, lineages_result="best")
    strategies = {"best_pod": best_checkpoint(folder, selection["candidates"][0]["pod_id"])}
    if len(today) >= 2:  # today's ensemble, whether or not it was the result: how the choice did on test
        strategies["today"] = ([best_checkpoint(folder, p) for p in today], selection["weights"])
    if by_lineage == today:  # the same ensemble: the same validation and result
        found.update(lineages_score=selection["ensemble_score"], lineages_result=selection["result"])
    elif len(by_lineage) >= 2:
        members = [
            Candidate(p, str(best_checkpoint(folder, p).relative_to(folder)), math.nan, math.nan) for p in by_lineage
        ]
        weights = member_weights(members, config.ensemble_weighting)
        score, daily = validate_ensemble(config, config.env, folder, members, weights)
        best_id = selection["candidates"][0]["pod_id"]
        best = Candidate(best_id, "", best_score, math.nan, validation_record(pod_dir(folder, best_id)))
        choice = choose(best, score, daily, best_of(folder, len(selection["candidates"])))
        found.update(lineages_score=score, lineages_result=choice.result)
        if found["lineages_result"] == "ensemble":
            strategies["lineages"] = ([best_checkpoint(folder, p) for p in by_lineage], weights)
    dataset, backtest = run_backtest_rules(folder)
    result = run_backtest(dataset, _loaded(strategies, device), period="test", config=backtest, device=device)
    sharpe = {name: float(result.metrics.loc[name, "sharpe_ratio"]) for name in strategies}
    found["best_pod_test"] = sharpe["best_pod"]
    found["ensemble_test"] = sharpe.get("today")  # None without an ensemble
    found["today_test"] = sharpe["today"] if selection["result"] == "ensemble" else sharpe["best_pod"]
    if by_lineage == today:
        found["lineages_test"] = found["today_test"]
    else:
        found["lineages_test"] = sharpe.get("lineages", sharpe["best_pod"])
    return found


def _loaded(strategies: dict, device: str) -> dict:
    """Checkpoint paths as `run_backtest` takes them; an ensemble (paths, weights) as an `EnsemblePolicy`."""
    from trader.agents.ensemble import load_ensemble

    return {
        name: load_ensemble(value[0], device, value[1]) if isinstance(value, tuple) else value
        for name, value in strategies.items()
    }


def read_rows(paths: list[Path]) -> dict[int, dict]:
    """tournament_value.py's rows (``--out`` / ``--with-rows`` files) by seed."""
    rows = {}
    for path in paths:
        values = json.loads(path.read_text())
        for row in values if isinstance(values, list) else values["rows"]:
            rows[int(row["seed"])] = row
    return rows


def report(found: dict[int, dict], rows: dict[int, dict]) -> str:
    lines = [
        (
            "| seed | today's members | members by lineage | validation: best pod / today's ensemble / by lineage "
            "| result today / by lineage | test: single | test: best pod / today's ensemble | test: today's result "
            "| test: by lineage |"
        ),
        "|---:|---|---|---|---|---:|---|---:|---:|",
    ]

    def show(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}"

    for seed, f in sorted(found.items()):
        lines.append(
            f"| {seed} | {', '.join(f['today'])} | {', '.join(f['lineages'])} "
            f"| {show(f['best_score'])} / {show(f['today_score'])} / {show(f['lineages_score'])} "
            f"| {f['today_result']} / {f['lineages_result']} | {rows[seed]['single']['sharpe']:.2f} "
            f"| {f['best_pod_test']:.2f} / {show(f['ensemble_test'])} | {f['today_test']:.2f} | {f['lineages_test']:.2f} |"
        )
    seeds = sorted(found)
    single = [rows[s]["single"]["sharpe"] for s in seeds]
    today = [found[s]["today_test"] for s in seeds]
    by_lineage = [found[s]["lineages_test"] for s in seeds]
    formed = [s for s in seeds if found[s]["ensemble_test"] is not None]
    ensemble = [found[s]["ensemble_test"] for s in formed]
    best = [found[s]["best_pod_test"] for s in formed]
    lines += [
        "",
        (
            f"Today's ensemble against the best pod on test, where it was formed ({len(formed)} seeds): "
            f"{wilcoxon_words(ensemble, best)}."
        ),
        (
            f"Medians over {len(seeds)} seeds: single {statistics.median(single):.2f}, today's result "
            f"{statistics.median(today):.2f}, by lineage {statistics.median(by_lineage):.2f}."
        ),
        (f"By lineage against single: {wilcoxon_words(by_lineage, single)}."),
        (
            f"By lineage against today's result: {wilcoxon_words(by_lineage, today)}; below on "
            f"{sum(x < y for x, y in zip(by_lineage, today, strict=True))}."
        ),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", type=Path, help="folders written by tournament_value.py --keep-runs")
    parser.add_argument("--rows", type=Path, action="append", required=True, help="tournament_value.py's rows (repeat)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    rows = read_rows(args.rows)
    found = {}
    for root in args.roots:
        if not root.is_dir() or not any(root.glob("pbt-*")):
            parser.error(f"{root}: no PBT run folder (pbt-S) of tournament_value.py --keep-runs in it")
    for root in args.roots:
        for folder in sorted(root.glob("pbt-*")):
            seed = int(folder.name.split("-")[1])
            if seed not in rows:
                parser.error(f"{folder}: seed {seed} has no row in --rows")
            found[seed] = one_seed(folder, args.device)
            row = rows[seed]
            for arm, key in (("best_pod", "best_pod_test"), ("result", "today_test")):
                if not math.isclose(found[seed][key], row[arm]["sharpe"], rel_tol=1e-9, abs_tol=1e-9):
                    raise SystemExit(
                        f"seed {seed}: the {arm}'s test Sharpe {found[seed][key]:.6f} is not the row's "
                        f"{row[arm]['sharpe']:.6f}: this backtest is not tournament_value.py's"
                    )
            print(f"seed {seed}: {json.dumps(found[seed])}", flush=True)
    print(report(found, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
