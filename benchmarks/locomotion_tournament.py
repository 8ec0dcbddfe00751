"""The tournament on locomotion (Ant-v5, Humanoid-v5) against one SAC run and random search (issue 79).

The market suite's reading (benchmarks/tournament_suite.py) on gymnasium's MuJoCo envs. Per env and
seed, three **arms**, each given the same compute (``--minutes`` of wall-clock on one process:
device-seconds = 60 x minutes, one CPU core here):

- **one**: one ``trader.train`` run of our locomotion SAC (`benchmarks.locomotion.SAC_CONFIGS`
  ``[CHOSEN_SAC]`` with ``SAC_COMMON``, 8 sub-environments) for the whole budget, seed = the seed,
  validated every ``--pod-steps`` transitions (as often as a pod is), its result its ``best``
  checkpoint;
- **random**: random search, a tournament with ``search="random"`` (every pod fresh, its bounded
  hyperparameters drawn from their ranges) from the same SAC config, on one worker;
- **tournament**: the tournament (``search="pbt"``), the same config, space and worker.

The tournaments' settings are `TournamentConfig`'s defaults unless a flag sets them; ``--algos``
widens the pool beyond SAC (the other algorithms start from their library defaults). A tournament's
result is the one its report names (``contents.result``, read as tournament_suite reads it; on a
gymnasium env no ensemble is formed, so it is the leaderboard's best pod).

**The score.** Every arm's result policy plays the same ``--eval-episodes`` episodes, seeded from
`SCORE_SEED` (episodes no validation of any arm ever played: a lone run validates on seed
``seed + 10_000`` and a pod on its own 32-bit seed + 10,000), deterministic actions, with the
evaluator of benchmarks/locomotion.py; the score is the mean return. The untrained SAC policy of the
same seed plays them too: a **failure** is an arm that ends below it (an Ant that stands still scores
about 980; locomotion.md saw SAC runs fall below it before they learn).

**The reading**, per env across seeds (`trader.aggregate`): per arm the IQM with its
stratified-bootstrap 95% interval, the CVaR of the lowest 10%, the failure rate and the probability
of improvement over "one"; the IQM difference tournament - one with its 95% interval; and the
tournament against random search by non-inferiority at a margin of `MARGIN_SHARE` of the "one" arm's
IQM, a rule fixed in this file before any run.

    OMP_NUM_THREADS=1 python benchmarks/locomotion_tournament.py --env Ant-v5 --seeds 0 1 2 3 4 \\
        --minutes 3 --out ant_tournament.json
    OMP_NUM_THREADS=1 python benchmarks/locomotion_tournament.py --quick    # 1 seed, 20 s an arm

``--out FILE`` is written after every env-seed (atomically) and read back on the next start: a
stopped run resumes at the first env-seed it lacks, with the same flags (checked). The JSON:
``{"settings", "rows": [{"env", "seed", "untrained", "one": R, "random": R, "tournament": R}],
"envs": {ENV: {"arms": {ARM: {"iqm", "iqm_interval", "cvar10", "failure_rate",
"probability_of_improvement"}}, "comparisons": ...}}, "cost": ...}``, each ``R`` with ``score``,
``seconds``, ``result`` and, for the tournaments, ``pods``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the checkout's root, for benchmarks.
from benchmarks.locomotion import CHOSEN_SAC, SAC_COMMON, SAC_CONFIGS, evaluator
from benchmarks.sac_time_to_score import machine
from benchmarks.tournament_suite import tournament_overrides, write_atomically
from benchmarks.tournament_value import pod_log
from tournament import TournamentConfig, run
from trader import aggregate
from trader.agents import make_agent, make_config
from trader.agents.checkpoint import load_policy
from trader.backtesting.runs import read_run
from trader.environments import resolve_env
from trader.training import train

ARMS = ("one", "random", "tournament")
ALGO = "sac"
NUM_ENVS = 8
"""Sub-environments of every arm's training env: locomotion.py's SAC runs on 8."""
SCORE_SEED = 20_000
"""The scoring episodes' seed (episode i is seeded ``SCORE_SEED + i``): none of the validations'."""
MARGIN_SHARE = 0.05
"""The non-inferiority margin, fixed on 2026-12-02 before any run: the tournament is not worse than
random search when the lower end of the one-sided 95% interval of IQM(tournament) - IQM(random) lies
above -0.05 x |IQM(one)| (5% of what one SAC run reaches; on Ant at a few minutes an arm, about 50
of a return near 1,000, well inside the spread of one run's seeds)."""
POD_STEPS = 20_000
"""A pod's transitions: on Ant-v5 on this CPU (measured 2026-12-02, one core shared with another
job) SAC collects about 2,900 steps/s before learning starts (10,000 random steps) and 330/s after,
so a fresh pod takes about 35 s and a child (no random steps) about 60 s: several pods per arm at
3 minutes, each still a few minutes at most on Humanoid."""


def sac_config() -> dict[str, Any]:
    """Our locomotion SAC (`benchmarks.locomotion`): every arm's config and every pod's start."""
    return {**SAC_CONFIGS[CHOSEN_SAC], **SAC_COMMON}


def tournament_config(env_id: str, search: str, seed: int, folder: Path, args: argparse.Namespace) -> TournamentConfig:
    """The random search's or the tournament's config: one worker for ``--minutes``, no pod cap."""
    return TournamentConfig(
        run_dir=str(folder),
        env=env_id,
        algos=tuple(args.algos),
        algo_configs={ALGO: sac_config()},
        pod_steps=args.pod_steps,
        num_envs=NUM_ENVS,
        pods=None,
        time_budget=60.0 * args.minutes,
        workers=1,
        seed=seed,
        backtest=False,
        search=search,
        **tournament_overrides(args),
    )


def train_arm(arm: str, env_id: str, seed: int, folder: Path, args: argparse.Namespace) -> None:
    """Train one arm of one env-seed into `folder`."""
    if arm == "one":
        train(
            ALGO,
            env_id,
            sac_config(),
            folder,
            steps=10**12,
            seed=seed,
            num_envs=NUM_ENVS,
            eval_every=args.pod_steps,
            time_budget=60.0 * args.minutes,
        )
        return
    run(tournament_config(env_id, "random" if arm == "random" else "pbt", seed, folder, args))


def result_checkpoint(folder: Path) -> tuple[str, Path]:
    """The arm's result policy: a lone run's ``best``, a tournament's ``contents.result`` (its best pod
    where it names none, as on a gymnasium env). ValueError when the arm has none."""
    contents = read_run(folder)
    chosen = "best" if contents.kind == "train" else (contents.result or "best")
    if chosen not in contents.checkpoints:
        raise ValueError(f"{folder}: no {chosen!r} checkpoint (did no pod finish?)")
    return chosen, contents.checkpoints[chosen]


def score(env_id: str, policy: Any, episodes: int) -> float:
    """The mean return of `policy` over the fixed scoring episodes (deterministic actions)."""
    return float(evaluator(env_id, episodes, seed=SCORE_SEED).evaluate(policy)["score"])


def untrained_score(env_id: str, seed: int, episodes: int) -> float:
    """The untrained SAC policy of `seed` on the scoring episodes: the failure line."""
    probe = evaluator(env_id, 1, seed=SCORE_SEED).env
    agent = make_agent(ALGO, probe.obs_dim, probe.act_dim, make_config(ALGO, sac_config()), seed=seed)
    agent.train_mode(False)
    return score(env_id, agent, episodes)


def run_env_seed(env_id: str, seed: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Train the three arms of one env-seed under `root`, then score each: its row."""
    row: dict[str, Any] = {"env": env_id, "seed": seed, "untrained": untrained_score(env_id, seed, args.eval_episodes)}
    for arm in ARMS:
        folder = root / f"{env_id}-{arm}-{seed}"
        start = time.perf_counter()
        train_arm(arm, env_id, seed, folder, args)
        seconds = time.perf_counter() - start
        chosen, path = result_checkpoint(folder)
        row[arm] = {"score": score(env_id, load_policy(path), args.eval_episodes), "seconds": seconds, "result": chosen}
        if arm != "one":
            row[arm]["pods"], row[arm]["pod_seconds"] = pod_log(folder)
        print(f"  {env_id} seed {seed}: {arm} trained in {seconds:.0f} s, score {row[arm]['score']:.1f}", flush=True)
    return row


def read_out(rows: list[dict[str, Any]], resamples: int = 2000) -> dict[str, Any]:
    """One env's reading of its `rows` (one per seed): per arm the aggregates, and the comparisons."""
    matrices = {arm: np.array([[row[arm]["score"]] for row in rows]) for arm in ARMS}
    floor = np.array([[row["untrained"]] for row in rows])
    arms = {}
    for arm, matrix in matrices.items():
        interval = aggregate.stratified_interval(aggregate.iqm, matrix, resamples=resamples)
        arms[arm] = {
            "iqm": interval.value,
            "iqm_interval": [interval.low, interval.high],
            "cvar10": aggregate.cvar(matrix, 0.1),
            "failure_rate": float((matrix < floor).mean()),
            "probability_of_improvement": aggregate.probability_of_improvement(matrix, matrices["one"]),
        }
    difference = aggregate.difference_interval(
        aggregate.iqm, matrices["tournament"], matrices["one"], resamples=resamples
    )
    margin = MARGIN_SHARE * abs(arms["one"]["iqm"])
    not_worse, against_random = aggregate.non_inferior(
        matrices["tournament"], matrices["random"], margin, resamples=resamples
    )
    return {
        "arms": arms,
        "comparisons": {
            "tournament_minus_one_iqm": difference.as_dict(),
            "tournament_not_worse_than_random": {
                "margin_share": MARGIN_SHARE,
                "margin": margin,
                "verdict": bool(not_worse),
                "difference_iqm_90": against_random.as_dict(),
            },
        },
    }


def summarise(rows: list[dict[str, Any]], chosen: dict[str, Any], wall: float) -> dict[str, Any]:
    """The JSON: the settings, the rows, each env's reading, the cost."""
    train_seconds = sum(row[arm]["seconds"] for row in rows for arm in ARMS)
    envs = list(dict.fromkeys(row["env"] for row in rows))
    return {
        "settings": chosen,
        "rows": rows,
        "envs": {env: read_out([row for row in rows if row["env"] == env]) for env in envs},
        "cost": {
            "train_seconds": train_seconds,
            "device_seconds": train_seconds,  # every arm trains on one process, one core
            "wall_seconds": wall,
            "machine": f"{machine()}, no GPU",
        },
    }


def report(out: dict[str, Any]) -> str:
    """Per seed the three scores (and the untrained policy's), then each env's reading, in Markdown."""
    lines = ["| env | seed | untrained | " + " | ".join(ARMS) + " | pods (random, tournament) |"]
    lines.append("|---|---:|---:|" + "---:|" * len(ARMS) + "---|")
    for row in out["rows"]:
        cells = [f"{row[arm]['score']:,.1f}" for arm in ARMS]
        pods = f"{row['random']['pods']}, {row['tournament']['pods']}"
        lines.append(
            f"| {row['env']} | {row['seed']} | {row['untrained']:,.1f} | " + " | ".join(cells) + f" | {pods} |"
        )
    for env, reading in out["envs"].items():
        lines += ["", f"{env}, {sum(r['env'] == env for r in out['rows'])} seeds:", ""]
        lines += [
            "| arm | IQM | 95% interval | CVaR 10% | failure rate | P(improves on one) |",
            "|---|---:|---|---:|---:|---:|",
        ]
        for arm, a in reading["arms"].items():
            low, high = a["iqm_interval"]
            lines.append(
                f"| {arm} | {a['iqm']:,.1f} | [{low:,.1f}, {high:,.1f}] | {a['cvar10']:,.1f} | "
                f"{a['failure_rate']:.0%} | {a['probability_of_improvement']:.2f} |"
            )
        d = reading["comparisons"]["tournament_minus_one_iqm"]
        r = reading["comparisons"]["tournament_not_worse_than_random"]
        lines.append(
            f"\nIQM(tournament) - IQM(one) = {d['value']:,.1f} [{d['low']:,.1f}, {d['high']:,.1f}]; "
            f"tournament not worse than random search by {r['margin']:,.1f} ({r['margin_share']:.0%} of |IQM(one)|): "
            f"{'yes' if r['verdict'] else 'no'} (90% interval of the difference "
            f"[{r['difference_iqm_90']['low']:,.1f}, {r['difference_iqm_90']['high']:,.1f}])"
        )
    cost = out["cost"]
    lines.append(
        f"\nCost: {cost['device_seconds']:.0f} device-seconds of training, {cost['wall_seconds']:.0f} s in all "
        f"on {cost['machine']}."
    )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", nargs="+", default=["Ant-v5"], help="gymnasium ids (Ant-v5, Humanoid-v5)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--minutes", type=float, default=3.0, help="wall-clock of each arm, per env and seed")
    p.add_argument("--eval-episodes", type=int, default=10, help="scoring episodes, the same for every arm")
    p.add_argument("--out", type=Path, default=None, help="the JSON, written after every env-seed; resumed")
    p.add_argument("--algos", type=lambda s: tuple(s.split(",")), default=(ALGO,), help="the tournaments' pool")
    p.add_argument("--pod-steps", type=int, default=POD_STEPS)
    p.add_argument("--group-size", type=int, default=None, help="default: TournamentConfig's")
    p.add_argument("--population", type=int, default=None, help="leaderboard size; default: TournamentConfig's")
    p.add_argument("--top-fraction", type=float, default=None)
    p.add_argument("--mutation-scale", type=float, default=None)
    p.add_argument("--fresh-probability", type=float, default=None)
    p.add_argument("--quick", action="store_true", help="1 seed, 20 s an arm, 3 scoring episodes")
    return p


def refusal(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags, in one line; None when nothing is."""
    unknown = [env for env in args.env if not resolve_env(env).is_gym]
    if unknown:
        return f"--env: not a gymnasium id: {', '.join(unknown)}"
    if ALGO not in args.algos:
        return f"--algos must hold {ALGO} (the pods start from the lone run's config); got {','.join(args.algos)}"
    if not args.minutes > 0 or args.eval_episodes < 1 or args.pod_steps < 1:
        return (
            f"--minutes must be > 0, --eval-episodes and --pod-steps >= 1; "
            f"got {args.minutes}, {args.eval_episodes}, {args.pod_steps}"
        )
    if len(set(args.seeds)) != len(args.seeds):
        return f"--seeds repeat a seed: {args.seeds}"
    return None


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """What a resumed run must share with the rows it finds (every flag but the seeds, out and quick)."""
    chosen = {k: v for k, v in vars(args).items() if k not in ("seeds", "out", "quick")}
    return json.loads(json.dumps({**chosen, "algos": list(args.algos), "score_seed": SCORE_SEED}))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.quick:
        args.seeds, args.minutes, args.eval_episodes = [0], 1 / 3, 3
    wrong = refusal(args)
    if wrong is None and args.out and args.out.exists():
        found = json.loads(args.out.read_text())
        if found.get("settings") != settings(args):
            wrong = f"--out {args.out} holds a run of other settings: give a new path, or the same flags"
    if wrong:
        print(f"locomotion_tournament.py: error: {wrong}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    chosen = settings(args)
    rows, before = [], 0.0
    if args.out and args.out.exists():
        found = json.loads(args.out.read_text())
        rows, before = found["rows"], found["cost"]["wall_seconds"]
    done = {(row["env"], row["seed"]) for row in rows}
    todo = [(env, seed) for env in args.env for seed in args.seeds if (env, seed) not in done]
    print(f"{len(todo)} env-seeds to do, {args.minutes:g} min an arm; {machine()}", flush=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="locomotion-tournament-") as root:
        for env_id, seed in todo:
            rows.append(run_env_seed(env_id, seed, args, Path(root)))
            print(json.dumps(rows[-1]), flush=True)
            if args.out:
                write_atomically(args.out, summarise(rows, chosen, before + time.perf_counter() - start))
    out = summarise(rows, chosen, before + time.perf_counter() - start)
    if args.out:
        write_atomically(args.out, out)
    print()
    print(report(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
