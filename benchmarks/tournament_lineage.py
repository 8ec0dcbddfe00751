"""Why one arm of `benchmarks/tournament_value.py` beat another: the validation record of the runs it kept.

Reads the run folders that ``tournament_value.py --keep-runs DIR`` wrote (``single-S``, ``pbt-S``,
``random-S`` per seed S) and prints, per seed, a Markdown table:

- the single run's best validation score and the transitions it had then, and its last;
- the PBT tournament's best pod: its validation score, its generation and its lineage's transitions
  (its own and its ancestors', whose weights it continued);
- PBT's best fresh pod (generation 0) and random search's best pod;
- PBT's pods finished and cancelled at the time budget (runs from before pods got the budget as a
  deadline: a pod running at the budget was cancelled and its work lost; now it stops and is ranked);
- PBT's pods that qualified for its ensemble (``selection.json``: PSR(0) >= 0.95 on validation), its
  members (the best qualified, at most ``ensemble_k``), and how many lineages each come from (a lineage:
  a fresh pod and every pod that continued its weights). Exploit breeds from the top pods, so the
  members may be one family: near-copies of one validated pod (random search's pods are each a lineage
  of their own).

Every score is the one the run recorded (``metrics.parquet``'s ``val_score``, ``pods.parquet``'s ``score``):
nothing is recomputed.

    python benchmarks/tournament_lineage.py runs/tv-minute            # one --keep-runs folder
    python benchmarks/tournament_lineage.py runs/a runs/b             # several, seeds in order
    python benchmarks/tournament_lineage.py runs/pbt-only --single-from runs/tv-minute   # tournament_value.py --arms pbt
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tournament.leaderboard import lineage
from trader import rundir

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks beside it
from tournament_value import kept_run


def single_record(folder: Path) -> tuple[float, int, float, int]:
    """(best validation score, its transitions, last validation score, its transitions) of a single run."""
    metrics = pd.read_parquet(folder / rundir.METRICS, columns=["step", "val_score"]).dropna()
    best = metrics.loc[metrics["val_score"].idxmax()]
    last = metrics.iloc[-1]
    return float(best["val_score"]), int(best["step"]), float(last["val_score"]), int(last["step"])


def pod_parents(pods: pd.DataFrame) -> dict[str, str | None]:
    """pod -> the pod whose weights it continued (None for a fresh pod), from a run's ``pods.parquet``."""
    return {pod: parent if isinstance(parent, str) else None for pod, parent in zip(pods["pod_id"], pods["parent_id"])}


def lineage_steps(pods: pd.DataFrame, pod_id: str) -> int:
    """Transitions of `pod_id` and of every ancestor whose weights it continued."""
    steps = dict(zip(pods["pod_id"], pods["steps"]))
    return sum(int(steps[pod]) for pod in lineage(pod_id, pod_parents(pods)))


def lineage_root(parents: dict[str, str | None], pod_id: str) -> str:
    """The fresh pod (generation 0) at the start of `pod_id`'s lineage (`pod_parents`): itself when fresh."""
    return lineage(pod_id, parents)[-1]


def qualified_lineages(folder: Path) -> tuple[int, int, int, int]:
    """(pods that qualified for the ensemble, their lineages, the ensemble's members, their lineages) of a
    tournament; zeros when it wrote no ``selection.json`` (no pod finished)."""
    if not (folder / rundir.SELECTION).is_file():
        return 0, 0, 0, 0
    selection = rundir.read_json(folder / rundir.SELECTION, version=rundir.SELECTION_VERSION)
    qualified = [c["pod_id"] for c in selection["candidates"] if c["qualified"]]
    parents = pod_parents(pd.read_parquet(folder / rundir.PODS))

    def lineages(pod_ids: list[str]) -> int:
        return len({lineage_root(parents, pod_id) for pod_id in pod_ids})

    members = list(selection["members"])
    return len(qualified), lineages(qualified), len(members), lineages(members)


def tournament_record(folder: Path) -> dict:
    """A tournament's best pod (score, generation, lineage transitions), best fresh pod, pods finished and cancelled."""
    pods = pd.read_parquet(folder / rundir.PODS)
    finished = pods[pods["status"] == "finished"]
    record = {
        "best": float("nan"),  # no pod finished in the budget (tournament_value.py's "none" arm)
        "generation": None,
        "lineage": 0,
        "best_fresh": float(finished.loc[finished["generation"] == 0, "score"].max()),
        "finished": len(finished),
        "cancelled": int((pods["status"] == "cancelled").sum()),
    }
    if len(finished):
        best = finished.loc[finished["score"].idxmax()]
        record.update(
            best=float(best["score"]), generation=int(best["generation"]), lineage=lineage_steps(pods, best["pod_id"])
        )
    return record


def seeds_in(root: Path) -> list[int]:
    """The seeds of a --keep-runs folder: those with a run folder of any arm."""
    return sorted({kept[1] for kept in map(kept_run, root.iterdir()) if kept})


def _tournament_cells(folder: Path) -> tuple[str, str, str, str]:
    """(best pod with generation and lineage, best fresh pod, finished / cancelled, qualified pods and the
    ensemble's members with their lineages); n/a without the folder."""
    if not folder.is_dir():
        return "n/a", "n/a", "n/a", "n/a"
    record = tournament_record(folder)
    qualified, their_lineages, members, members_lineages = qualified_lineages(folder)
    return (
        f"{record['best']:.2f} ({record['generation']}, {record['lineage']:,})",
        f"{record['best_fresh']:.2f}",
        f"{record['finished']} / {record['cancelled']}",
        f"{qualified} ({their_lineages}); {members} ({members_lineages})",
    )


def _single_cells(folder: Path) -> tuple[str, str]:
    if not folder.is_dir():
        return "n/a", "n/a"
    best, at, last, last_at = single_record(folder)
    return f"{best:.2f} ({at:,})", f"{last:.2f} ({last_at:,})"


def table(roots: list[Path], single_from: Path | None = None) -> str:
    """One row per seed of each root; the single run's cells from ``single_from`` when given."""
    header = (
        "| seed | single: best validation (transitions) | single: last validation (transitions) "
        "| PBT's best pod: validation (generation, lineage transitions) | PBT's best fresh pod "
        "| random search's best | PBT pods finished / cancelled | PBT pods qualified (lineages); members (lineages) |"
    )
    lines = [header, "|---:|---:|---:|---:|---:|---:|---|---|"]
    for root in roots:
        for seed in seeds_in(root):
            best, last = _single_cells((single_from or root) / f"single-{seed}")
            pbt, pbt_fresh, pbt_counts, pbt_lineages = _tournament_cells(root / f"pbt-{seed}")
            random_folder = root / f"random-{seed}"
            random = f"{tournament_record(random_folder)['best']:.2f}" if random_folder.is_dir() else "n/a"
            lines.append(
                f"| {seed} | {best} | {last} | {pbt} | {pbt_fresh} | {random} | {pbt_counts} | {pbt_lineages} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", type=Path, help="folders written by tournament_value.py --keep-runs")
    parser.add_argument(
        "--single-from",
        type=Path,
        default=None,
        metavar="DIR",
        help="read each seed's single run from this --keep-runs folder (a tournament setting trained with "
        "tournament_value.py --arms pbt, against the single runs of the same seeds)",
    )
    args = parser.parse_args(argv)
    for root in [*args.roots, *([args.single_from] if args.single_from else [])]:
        if not root.is_dir() or not seeds_in(root):
            parser.error(f"{root}: no run folder of tournament_value.py --keep-runs (single-S, pbt-S, random-S) in it")
    print(table(args.roots, args.single_from))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
