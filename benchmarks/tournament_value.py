"""Tournament value: does the tournament beat one run, and random search, at equal wall-clock? (issue 42)

Per seed, four arms, each trained for ``--minutes`` of wall-clock on the same data,
rules (a `podracer.presets` preset at ``--cost``, or under a named ``--costs`` model)
and algorithm configs:

- **(a) single**: one `trader.train` run of ``--single`` (PPO by default), one process;
- **(b) random search**: a tournament with ``search="random"`` (every pod fresh, its
  hyperparameters drawn in their ranges; no exploit), on ``--workers`` processes; its
  result (`tournament.selection`) is the arm's strategy;
- **(c) best pod** and **(d) result** of a tournament with ``search="pbt"`` (exploit and
  explore), on the same workers: (d) is its pod or ensemble, whichever won on validation.

Then one backtest of the **test** period holds every arm (and equal weight), each with
the trials it was selected from, so its DSR counts them. Terms: **equal wall-clock**;
the tournaments use every worker they are given, the single run one process, as a user
would run either.

Printed: a per-seed table (test Sharpe, max drawdown, DSR of each arm; which strategy
each tournament's result was), and per arm the median test Sharpe with a bootstrap 95%
interval of the median, the median DSR and max drawdown; the Wilcoxon signed-rank tests
of (d) against (a) and (d) against (b), one-sided ("greater") and two-sided, and of "not
worse" (`NOT_WORSE_MARGIN`: non-inferiority by 1% of the other arm's Sharpe, fixed before
the runs that use it); and on how many seeds the ensemble's max drawdown was no larger than
the best pod's.

Targets (issue 42): on the costly minute market, (d) beats (a) at p < 0.05 over 10 seeds
and is not worse than (b); on ``synthetic-edge-daily`` (d) is not worse than either.

    OMP_NUM_THREADS=1 python benchmarks/tournament_value.py --dataset synthetic-edge-daily --preset market --cost 0.0005
    OMP_NUM_THREADS=1 python benchmarks/tournament_value.py --dataset synthetic-edge-minute-costs --costs institutional \
        --preset market-costs --capital 1e7 --algos ppo --single ppo --minutes 5 --pod-steps 131072 --num-envs 128
    OMP_NUM_THREADS=1 python benchmarks/tournament_value.py --algos td3 --single td3       # where single runs are unstable
    python benchmarks/tournament_value.py --seeds 2 --minutes 0.5                           # a smoke run
    python benchmarks/tournament_value.py --first-seed 3 --seeds 7 --with-rows seeds0-2.json  # seeds added later

``--from-runs DIR`` trains nothing: it scores again the arms that ``--keep-runs`` folders hold (the same
flags as their training, which are checked against the rules the runs recorded), with each tournament's
result chosen by today's result rule (`tournament.selection`) replayed on it; the recorded result is
printed beside it where they differ. Arms of one seed may lie in different folders (a random-search arm
trained in a later sitting, say):

    OMP_NUM_THREADS=1 python benchmarks/tournament_value.py <the runs' flags> --from-runs runs_a --from-runs runs_b
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from market_envs.data import load
from tournament import TournamentConfig, run
from tournament.events import EventLog
from tournament.leaderboard import Leaderboard
from tournament.selection import Candidate, Selection, ensemble_record, select
from trader import rundir
from trader.backtesting.config import BacktestConfig
from trader.backtesting.engine import run_backtest
from trader.backtesting.runs import contents_trials, read_run, run_strategies
from podracer.presets import apply_preset, rules_at_capital
from trader.rundir import config_from_dict, config_to_dict
from trader.spec import market_spec
from trader.training import train

ARMS = ("single", "random", "best_pod", "result")
TRAINED = ("single", "random", "pbt")
"""What is trained per seed: the single run and the two tournaments (best_pod and result are both pbt's)."""


def rules_and_configs(args: argparse.Namespace) -> tuple[dict, dict]:
    """The preset's env rules at the benchmark's cost (or named cost model), and its algo configs."""
    rules, configs = apply_preset(
        args.preset,
        args.dataset,
        args.cost,
        tuple(sorted({*args.algos, args.single})),
        steps=args.pod_steps,
        num_envs=args.num_envs,
    )
    if args.costs:
        from market_envs.costs import cost_model
        from trader.rundir import config_to_dict

        named = cost_model(args.costs)
        rules = {**rules, **config_to_dict(named.apply(config_from_dict_env(rules)))}
    if args.capital is not None:
        rules = rules_at_capital(rules, args.capital)
    return rules, configs


def config_from_dict_env(values: dict):
    from market_envs.config import EnvConfig

    return config_from_dict(EnvConfig, values)


def train_arms(seed: int, args: argparse.Namespace, rules: dict, configs: dict, root: Path) -> dict[str, Path]:
    """Train ``args.arms`` for one seed into ``root`` (``random-S``, ``pbt-S``, ``single-S``): their folders."""
    seconds = 60.0 * args.minutes
    folders = {}
    for search in [arm for arm in ("random", "pbt") if arm in args.arms]:
        folder = root / f"{search}-{seed}"
        run(
            TournamentConfig(
                run_dir=str(folder),
                env=market_spec(args.dataset, rules),
                algos=tuple(args.algos),
                algo_configs=configs,
                population=args.population,
                pod_steps=args.pod_steps,
                eval_every=args.eval_every,
                num_envs=args.num_envs,
                pods=None,
                time_budget=seconds,
                workers=args.workers,
                seed=seed,
                backtest=False,
                search=search,
                top_fraction=args.top_fraction,
                mutation_scale=args.mutation_scale,
                fresh_probability=args.fresh_probability,
                ensemble_k=args.ensemble_k,
                ensemble_weighting=args.ensemble_weighting,
                compile=args.compile,
            )
        )
        folders[search] = folder
    if "single" in args.arms:
        folders["single"] = root / f"single-{seed}"
        train(
            args.single,
            args.dataset,
            configs[args.single],
            folders["single"],
            steps=10**12,
            seed=seed,
            num_envs=args.num_envs,
            env_config=rules,
            eval_every=args.eval_every or args.pod_steps,
            time_budget=seconds,
            compile=args.compile,
        )
    return folders


def arms_backtest_config(rules: dict) -> BacktestConfig:
    """The test period's backtest of every arm under the benchmark's env rules (a dict, as `rules_and_configs`)."""
    return BacktestConfig(
        initial_cash=rules.get("initial_cash", 1e6),
        buy_cost=rules["buy_cost"],
        sell_cost=rules["sell_cost"],
        costs=rules.get("costs") or {},
        policy_env=config_from_dict_env(rules),
        tear_sheet=False,
        record_positions="day",
    )


def one_seed(seed: int, args: argparse.Namespace, rules: dict, configs: dict, root: Path) -> dict:
    """Train every arm for one seed, backtest them on the test period together: the seed's row."""
    return score_arms(seed, train_arms(seed, args, rules, configs, root), args, rules)


def score_arms(
    seed: int, folders: dict[str, Path], args: argparse.Namespace, rules: dict, replayed: dict | None = None
) -> dict:
    """The seed's row: one backtest of the test period holding every arm of its trained ``folders``.

    ``replayed``: each tournament's result as today's rule chose it on replay (`replayed_results`), not the
    one its ``selection.json`` recorded (runs kept from before the rule changed); the row keeps both."""
    folders = dict(folders)
    single = folders.pop("single")
    policies, trials, results, recorded = {}, {}, {}, {}
    for arm, folder, pick in (
        ("single", single, "best"),
        ("random", folders["random"], None),
        ("best_pod", folders["pbt"], "best"),
        ("result", folders["pbt"], None),
    ):
        contents = read_run(folder)
        chosen = pick or (replayed[arm] if replayed else contents.result) or "best"
        if pick is None:
            results[arm], recorded[arm] = chosen, contents.result
        found = run_strategies(contents, args.device)
        if chosen not in found:  # no pod finished in the budget: the arm has no strategy
            results[arm] = "none (no pod finished)"
            continue
        policies[arm] = found[chosen]
        trials[arm] = contents_trials(contents)[chosen]
    result = run_backtest(
        args.dataset,
        policies,
        baselines=["equal_weight"],
        period="test",
        config=arms_backtest_config(rules),
        trials=trials,
        device=args.device,
    )
    row = {"seed": seed, "results": results}
    if replayed:
        row["recorded_results"] = recorded
    for search, folder in folders.items():  # one read of each tournament's log
        finished, seconds = pod_log(folder)
        row.setdefault("pods", {})[search] = finished
        row.setdefault("pod_seconds", {})[search] = seconds
    for arm in (*ARMS, "equal_weight"):
        if arm not in result.metrics.index:
            row[arm] = {"sharpe": math.nan, "max_drawdown": math.nan, "dsr": None, "trials": None}
            continue
        metrics = result.metrics.loc[arm]
        evidence = result.evidence.get(arm, {})
        row[arm] = {
            "sharpe": float(metrics["sharpe_ratio"]),
            "max_drawdown": float(metrics["max_drawdown"]),
            "dsr": evidence.get("dsr_null"),
            "trials": evidence.get("n_trials"),
        }
    print(json.dumps(row), flush=True)
    return row


def today_rule(folder: Path) -> tuple[Selection, str] | None:
    """Today's result rule replayed on a kept tournament (`tournament.selection.select`; nothing written), and
    the result the run recorded (``selection.json``, chosen by the rule of its day); None without a finished pod.
    The members must be the run's (ValueError otherwise): only the choice between the best pod and the ensemble
    is replayed, on the ensemble's validation pass as the run recorded it (`tournament.selection.ensemble_record`;
    already among the run's trials, so its DSR counts it)."""
    ranked = Leaderboard.load(folder / rundir.LEADERBOARD).ranked()
    if not ranked:
        return None
    config = TournamentConfig.from_dict(rundir.read_toml(folder / rundir.TOURNAMENT))
    recorded = rundir.read_json(folder / rundir.SELECTION, version=rundir.SELECTION_VERSION)

    def recorded_pass(members: list[Candidate], weights: list[float]) -> tuple[float, pd.Series | None]:
        found = ensemble_record(folder)
        if [m.pod_id for m in members] != recorded["members"] or found is None:
            raise ValueError(
                f"{folder}: its members {recorded['members']} are not today's rule's: a run of another rule"
            )
        return found

    rule, _ = select(folder, ranked, config.ensemble_k, config.ensemble_weighting, recorded_pass)
    if recorded["members"] != [m.pod_id for m in rule.members]:
        raise ValueError(f"{folder}: its members {recorded['members']} are not today's rule's: a run of another rule")
    return rule, recorded["result"]


def replayed_results(folders: dict[str, Path]) -> dict[str, str | None]:
    """Today's result ("best" or "ensemble"; None without a finished pod) of a seed's kept tournaments
    (`today_rule`), by arm: ``random`` and ``result`` (PBT's)."""
    replays = {arm: today_rule(folders[search]) for arm, search in (("random", "random"), ("result", "pbt"))}
    return {arm: None if replay is None else replay[0].result for arm, replay in replays.items()}


def kept_run(path: Path) -> tuple[str, int] | None:
    """(arm, seed) of a run folder ``--keep-runs`` wrote (``single-S``, ``random-S``, ``pbt-S``); None for anything else."""
    arm, _, seed = path.name.rpartition("-")
    return (arm, int(seed)) if arm in TRAINED and seed.isdigit() and path.is_dir() else None


def kept_runs(dirs: list[Path], arms: tuple[str, ...] = TRAINED) -> dict[int, dict[str, Path]]:
    """Seed -> {arm: folder}: the runs of ``arms`` that ``--keep-runs`` folders hold (``single-S``,
    ``random-S``, ``pbt-S``), found in any of ``dirs``, seeds sorted; a seed need not have every arm. Raises
    ValueError for a folder that is not one, a seed whose arm is in two of them, and where nothing is found."""
    found: dict[int, dict[str, Path]] = {}
    for folder in dirs:
        if not folder.is_dir():
            raise ValueError(f"{folder}: not a folder")
        for run_dir in sorted(folder.iterdir()):
            kept = kept_run(run_dir)
            if kept is None or kept[0] not in arms:
                continue
            arm, seed = kept
            held = found.setdefault(seed, {})
            if arm in held:
                raise ValueError(f"seed {seed}'s {arm} arm is in two folders: {held[arm]} and {run_dir}")
            held[arm] = run_dir
    if not found:
        names = [f"{arm}-S" for arm in arms]
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        raise ValueError(f"no {listed} folder in {', '.join(map(str, dirs))}")
    return dict(sorted(found.items()))


def kept_arms(dirs: list[Path]) -> dict[int, dict[str, Path]]:
    """Seed -> {"single", "random", "pbt": folder}: `kept_runs` where every seed has every arm (ValueError
    naming the seeds that lack one)."""
    found = kept_runs(dirs)
    partial = {seed: sorted(set(TRAINED) - set(arms)) for seed, arms in found.items() if set(arms) != set(TRAINED)}
    if partial:
        raise ValueError(
            "seeds without every arm (" + "; ".join(f"{s}: no {', '.join(a)}" for s, a in sorted(partial.items())) + ")"
        )
    return dict(sorted(found.items()))


def recorded_rules_differ(folders: dict[str, Path], rules: dict, dataset: str) -> str | None:
    """What in a kept arm's recorded data set or rules differs from the flags' (None when nothing does)."""
    for folder in folders.values():
        contents = read_run(folder)
        if contents.dataset != dataset:
            return f"{folder} was trained on {contents.dataset}, not --dataset {dataset}"
        differ = sorted(k for k, v in config_to_dict(contents.env_config).items() if rules.get(k) != v)
        if differ:
            return f"{folder} was trained under other rules than these flags give ({', '.join(differ)})"
    return None


def pod_log(folder: Path) -> tuple[int, dict[str, float | None]]:
    """From a tournament's log (`tournament.events`): how many pods it finished, and the seconds from
    its start to its first finished pod (a worker's first pod carries the process's start-up) and the
    median seconds of its finished pods (None where no pod finished)."""
    events = EventLog(folder / rundir.EVENTS).read()
    start = next(e["time"] for e in events if e["kind"] == "started")
    finished = [e for e in events if e["kind"] == "finished" and e["result"]["status"] == "finished"]
    if not finished:
        return 0, {"first": None, "median": None}
    return len(finished), {
        "first": min(e["time"] for e in finished) - start,
        "median": statistics.median(e["result"]["seconds"] for e in finished),
    }


def _pair(values: dict | None, show: Callable[[Any], str]) -> str:
    """The random search's and the PBT tournament's values, "n/a" for a row transcribed without them."""
    return "n/a" if values is None else f"{show(values['random'])}, {show(values['pbt'])}"


def _was(row: dict, arm: str) -> str:
    """A tournament arm's result, and the one its run recorded where the row replayed another (``--from-runs``)."""
    now, before = row["results"][arm], row.get("recorded_results", {}).get(arm)
    return now if before in (None, now) else f"{now} (recorded {before})"


def _first_pod(seconds: dict[str, float | None]) -> str:
    return "none" if seconds["first"] is None else f"{seconds['first']:.0f}"


def median_interval(values: list[float], seed: int = 0, reps: int = 10_000) -> tuple[float, float]:
    """A percentile bootstrap 95% interval of the median."""
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    medians = np.median(data[rng.integers(0, len(data), size=(reps, len(data)))], axis=1)
    return float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


def wilcoxon(a: list[float], b: list[float]) -> tuple[float, float]:
    """(one-sided p that a > b, two-sided p) of the paired Wilcoxon signed-rank test."""
    differences = np.asarray(a) - np.asarray(b)
    if not np.any(differences):
        return 1.0, 1.0
    return (float(scipy_stats.wilcoxon(a, b, alternative="greater").pvalue), float(scipy_stats.wilcoxon(a, b).pvalue))


def wilcoxon_words(a: list[float], b: list[float]) -> str:
    """How often a is above b, and `wilcoxon`'s one-sided p (a > b) and two-sided, in words ("n/a" where every
    pair is equal: there is nothing to rank)."""
    above = sum(x > y for x, y in zip(a, b, strict=True))
    if all(x == y for x, y in zip(a, b, strict=True)):
        return f"above on 0 of {len(a)}, n/a (all equal)"
    greater, two = wilcoxon(a, b)
    return f"above on {above} of {len(a)}, one-sided p = {greater:.3f}, two-sided {two:.3f}"


NOT_WORSE_MARGIN = 0.01
"""The margin of the "not worse" tests, fixed before the runs that use it (2026-11-28, fifteenth sitting): the
result is not worse than an arm when its test Sharpe is above the arm's less 1% of the arm's (|Sharpe| x 0.01),
paired over the seeds. Why 1%: a gap that size is far inside one test period's sampling error (its 95% interval
of the Sharpe ratio is several units wide at these Sharpe ratios) and no user would act on it; the markets'
Sharpe ratios differ (about 7 daily, 23 on the costly minute market), so the margin is relative."""


def not_worse(a: list[float], b: list[float], margin: float = NOT_WORSE_MARGIN) -> float:
    """One-sided p of the paired Wilcoxon signed-rank test of non-inferiority: H0, a is worse than b by at
    least `margin` x |b| (median of a - b + margin |b| <= 0); small p: a is not worse than b."""
    shifted = np.asarray(a) - np.asarray(b) + margin * np.abs(np.asarray(b))
    if not np.any(shifted):
        return 1.0
    return float(scipy_stats.wilcoxon(shifted, alternative="greater").pvalue)


def report(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [
        f"{args.dataset}, preset {args.preset}, cost {args.costs or args.cost}"
        f"{'' if args.capital is None else f', capital {args.capital:,.0f}'}, {args.minutes:g} min per arm per "
        f"seed, tournaments of {','.join(args.algos)} on {args.workers} workers, single {args.single}; "
        f"{len(rows)} seeds; load {os.getloadavg()[0]:.2f}",
        "",
        "| seed | "
        + " | ".join(f"{arm} Sharpe" for arm in ARMS)
        + " | result was | random's result | "
        + " | ".join(f"{arm} max DD" for arm in ARMS)
        + " | pods (random, pbt) | first pod s (random, pbt) |",
        "|---:|" + "---:|" * len(ARMS) + "---|---|" + "---:|" * len(ARMS) + "---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['seed']} | "
            + " | ".join(f"{row[a]['sharpe']:.2f}" for a in ARMS)
            + f" | {_was(row, 'result')} | {_was(row, 'random')} | "
            + " | ".join(f"{100 * row[a]['max_drawdown']:.1f}%" for a in ARMS)
            + f" | {_pair(row.get('pods'), str)} | {_pair(row.get('pod_seconds'), _first_pod)} |"
        )
    lines += [
        "",
        "| arm | median test Sharpe | 95% interval (median) | median DSR | median max drawdown |",
        "|---|---:|---|---:|---:|",
    ]
    for arm in (*ARMS, "equal_weight"):
        held = [row[arm] for row in rows if arm in row]  # rows transcribed from a table may lack equal weight
        if not held:
            continue
        sharpes = [arm_row["sharpe"] for arm_row in held]
        low, high = median_interval(sharpes)
        dsrs = [arm_row["dsr"] for arm_row in held if arm_row["dsr"] is not None]
        dsr = f"{statistics.median(dsrs):.2f} ({len(dsrs)} seeds)" if dsrs else "n/a"
        drawdown = statistics.median(arm_row["max_drawdown"] for arm_row in held)
        lines.append(
            f"| {arm} ({len(held)} seeds) | {statistics.median(sharpes):.2f} | [{low:.2f}, {high:.2f}] | {dsr} | "
            f"{100 * drawdown:.1f}% |"
        )
    result = [row["result"]["sharpe"] for row in rows]
    for other in ("single", "random"):
        theirs = [row[other]["sharpe"] for row in rows]
        greater, both = wilcoxon(result, theirs)
        lines.append(
            f"\nWilcoxon, result against {other}: one-sided p (result > {other}) = {greater:.3f}, "
            f"two-sided p = {both:.3f}; not worse by {100 * NOT_WORSE_MARGIN:g}% of {other}'s Sharpe: "
            f"one-sided p = {not_worse(result, theirs):.3f}"
        )
    ensembles = [row for row in rows if row["results"]["result"] == "ensemble"]
    calmer = sum(row["result"]["max_drawdown"] >= row["best_pod"]["max_drawdown"] for row in ensembles)
    lines.append(
        f"\nThe result was the ensemble on {len(ensembles)} of {len(rows)} seeds; its max drawdown was no "
        f"larger than the best pod's on {calmer} of them."
    )
    return "\n".join(lines)


def from_runs(args: argparse.Namespace, parser: argparse.ArgumentParser, seeds_held: set[int]) -> list[dict]:
    """The rows of the arms kept in ``--from-runs`` folders (`kept_arms`), today's result rule replayed."""
    try:
        kept = kept_arms([Path(folder) for folder in args.from_runs])
    except ValueError as err:
        parser.error(f"--from-runs: {err}")
    again = sorted(seeds_held & set(kept))
    if again:
        parser.error(f"seeds given twice (in --with-rows and --from-runs): {again}")
    rules, _ = rules_and_configs(args)
    replayed = {}
    for seed, folders in kept.items():  # every refusal before the first backtest
        differ = recorded_rules_differ(folders, rules, args.dataset)
        if differ:
            parser.error(f"--from-runs: {differ}")
        try:
            replayed[seed] = replayed_results(folders)
        except ValueError as err:
            parser.error(f"--from-runs: {err}")
    rows = []
    for seed, folders in kept.items():
        rows.append(score_arms(seed, folders, args, rules, replayed[seed]))
        if args.out:  # after each seed, as for trained ones
            Path(args.out).write_text(json.dumps(rows, indent=1))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="synthetic-edge-daily")
    parser.add_argument("--preset", default="market")
    parser.add_argument("--cost", type=float, default=0.0005, help="commission per side")
    parser.add_argument("--costs", default=None, help="a named cost model (market_envs.costs.COST_MODELS) instead")
    parser.add_argument(
        "--capital",
        type=float,
        default=None,
        help="starting cash, rewards kept in bp of it (podracer.presets.rules_at_capital); default: the preset's 1e6. "
        "The costly minute market of benchmarks/learning_costs.py is at 1e7",
    )
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--minutes", type=float, default=2.0, help="wall-clock of each arm, per seed")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--algos", type=lambda s: tuple(s.split(",")), default=("ppo", "sac", "td3"))
    parser.add_argument("--single", default="ppo", help="the algorithm of arm (a)")
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--pod-steps", type=int, default=50_000)
    parser.add_argument(
        "--eval-every",
        type=int,
        default=0,
        help="transitions between validations within a pod (TournamentConfig.eval_every; 0: once, at its end) and "
        "of the single run (0: every --pod-steps, the default)",
    )
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--top-fraction", type=float, default=TournamentConfig.top_fraction)
    parser.add_argument("--mutation-scale", type=float, default=TournamentConfig.mutation_scale)
    parser.add_argument("--fresh-probability", type=float, default=TournamentConfig.fresh_probability)
    parser.add_argument("--ensemble-k", type=int, default=3)
    parser.add_argument("--ensemble-weighting", default="equal", choices=("equal", "score"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="torch.compile every arm's env steps, networks and validation passes (RESULTS, 'Pods per "
        "hour, compiled': a pod then compiles again, so short pods lose)",
    )
    parser.add_argument(
        "--arms",
        type=lambda text: tuple(text.split(",")),
        default=TRAINED,
        help="which arms to train, of single,random,pbt (default: all, then the test backtest and the rows). "
        "Fewer only train into --keep-runs, to compare on validation from the kept runs "
        "(e.g. a PBT setting against the single runs of another folder: --single-from); the test period is not read",
    )
    parser.add_argument("--out", default=None, help="also write the per-seed rows as JSON here")
    parser.add_argument(
        "--with-rows",
        action="append",
        default=[],
        metavar="JSON",
        help="per-seed rows of an earlier run of the same settings (its --out), reported with this run's; "
        "each seed's arms were trained in one sitting, so the pairs stay fair across sittings",
    )
    parser.add_argument(
        "--keep-runs",
        default=None,
        metavar="DIR",
        help="write the arms' run folders (each tournament's log, leaderboard and pods; the single run) into "
        "this new folder and keep them, instead of a temporary one",
    )
    parser.add_argument(
        "--from-runs",
        action="append",
        default=[],
        metavar="DIR",
        help="train nothing: score the arms earlier --keep-runs folders hold (single-S, random-S and pbt-S of each "
        "seed, in any of the DIRs given; --seeds and --first-seed are not read), under the flags' rules, which must "
        "be those the runs recorded; each tournament's result is today's rule replayed on it (runs kept from before "
        "a rule changed), the recorded one beside it",
    )
    args = parser.parse_args()
    rows = [row for path in args.with_rows for row in json.loads(Path(path).read_text())]
    seeds = range(0) if args.from_runs else range(args.first_seed, args.first_seed + args.seeds)
    counts = Counter([row["seed"] for row in rows] + list(seeds))
    repeated = sorted(seed for seed, count in counts.items() if count > 1)
    if repeated:
        parser.error(f"seeds given twice (in --with-rows or this run's range): {repeated}")
    if args.eval_every < 0:
        parser.error(f"--eval-every must be >= 0, got {args.eval_every}")
    if args.capital is not None and not args.capital > 0:
        parser.error(f"--capital must be positive, got {args.capital}")
    if args.out and Path(args.out).exists():
        parser.error(f"--out {args.out} exists: give a new path (its rows go in with --with-rows)")
    unknown = sorted(set(args.arms) - set(TRAINED))
    if unknown or not args.arms:
        parser.error(f"--arms: unknown arm(s) {unknown or '(none)'}; choose from {','.join(TRAINED)}")
    only_some = set(args.arms) != set(TRAINED)
    if args.from_runs and (args.keep_runs or only_some):
        parser.error("--from-runs trains nothing: it takes neither --keep-runs nor --arms")
    if only_some and (not args.keep_runs or args.out or args.with_rows):
        parser.error("--arms with fewer than all arms trains into --keep-runs only (no --out, no --with-rows)")
    if args.keep_runs and Path(args.keep_runs).exists():
        parser.error(f"--keep-runs {args.keep_runs} exists: give a new folder (a run folder there would be resumed)")
    if args.from_runs:
        rows += from_runs(args, parser, {row["seed"] for row in rows})
    if args.seeds and not args.from_runs:
        load(args.dataset)  # build once, outside the timings
        rules, configs = rules_and_configs(args)
        trained = []
        with contextlib.ExitStack() as stack:
            if args.keep_runs:
                root = Path(args.keep_runs)
                root.mkdir(parents=True)
            else:
                root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tournament-value-")))
            for seed in seeds:
                if only_some:
                    folders = train_arms(seed, args, rules, configs, root)
                    print(f"seed {seed}: trained {', '.join(folders)} into {root}", flush=True)
                    continue
                trained.append(one_seed(seed, args, rules, configs, root))
                if args.out:  # after each seed: a stopped run keeps the seeds it finished
                    Path(args.out).write_text(json.dumps(trained, indent=1))
        rows += trained
    if only_some:
        print(f"kept for a comparison on validation: {args.keep_runs}")
        return
    rows.sort(key=lambda row: row["seed"])
    print()
    print(report(rows, args))
    sys.exit(0 if not any(math.isnan(row["result"]["sharpe"]) for row in rows) else 1)


if __name__ == "__main__":
    main()
