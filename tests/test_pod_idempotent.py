"""At-least-once made safe: a pod that runs twice enters the leaderboard once and
never overwrites a finished copy's files.

Dask may run a task twice (a lost worker, a reconnect, work stealing). Here the double
run is forced: `train_pod` for one spec in two threads at once, both results fed to
the orchestrator's state, then a third run after the pod is committed, and a run
killed mid-training.
"""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tournament.orchestrator import TournamentState
from tournament.pod import PodSpec, committed_result, pod_dir, train_pod
from trader import rundir
from test_rundir import assert_every_file_is_documented
from market_fixtures import write_tiny_recipe
from test_tournament_cluster import TINY_ALGOS, tiny_config
from trader.spec import market_spec


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Path:
    return write_tiny_recipe(tmp_path_factory.mktemp("idempotent"))


def spec_for(recipe: Path, pod_id: str = "p0000") -> PodSpec:
    return PodSpec(
        pod_id=pod_id,
        index=0,
        algo="ppo",
        algo_config=TINY_ALGOS["ppo"],
        env=market_spec(str(recipe)),
        steps=512,
        seed=3,
        num_envs=8,
    )


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under ``folder``: (inode, mtime in ns, bytes)."""
    return {
        str(p.relative_to(folder)): (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# --------------------------------------------------------------------------- the commit rule


def test_of_writers_racing_for_one_folder_exactly_one_wins_whole(tmp_path: Path) -> None:
    final = tmp_path / "pods" / "p0001"
    staged = []
    for writer in range(8):
        folder = rundir.stage_folder(final, unique=True)
        for name in ("a.txt", "b.txt"):
            (folder / name).write_text(f"writer {writer}")
        staged.append(folder)
    assert len(set(staged)) == 8  # a staged folder of its own each
    barrier = threading.Barrier(8)

    def commit(folder: Path) -> bool:
        barrier.wait(timeout=10)
        return rundir.commit_folder_once(folder, final)

    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(commit, staged))
    assert won.count(True) == 1
    winner = won.index(True)
    assert {p.name: p.read_text() for p in final.iterdir()} == {
        "a.txt": f"writer {winner}",
        "b.txt": f"writer {winner}",
    }
    assert sorted(p.name for p in final.parent.iterdir()) == ["p0001"]  # the losers' folders are gone


def test_an_empty_final_folder_is_no_finished_copy(tmp_path: Path) -> None:
    final = tmp_path / "p0002"
    final.mkdir()
    staged = rundir.stage_folder(final, unique=True)
    (staged / "x").write_text("whole")
    assert rundir.commit_folder_once(staged, final) and (final / "x").read_text() == "whole"


def test_staged_leftovers_are_removed_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / ".tmp-p0003-abc").mkdir()
    (tmp_path / ".tmp-p0003-abc" / "metrics.parquet").write_text("half")
    (tmp_path / "p0004").mkdir()
    assert [p.name for p in rundir.remove_staged(tmp_path)] == [".tmp-p0003-abc"]
    assert [p.name for p in tmp_path.iterdir()] == ["p0004"]


# --------------------------------------------------------------------------- a pod run twice


def test_a_pod_run_twice_at_once_is_committed_once_and_enters_the_board_once(recipe: Path, tmp_path: Path) -> None:
    from market_envs.data import load

    load(str(recipe))  # the data set, built once before the two runs (as the orchestrator does)
    run_dir = tmp_path / "run"
    spec = spec_for(recipe)
    barrier = threading.Barrier(2)

    def attempt(_: int):
        barrier.wait(timeout=30)
        return train_pod(spec, str(run_dir))

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(attempt, range(2))
    assert first.status == second.status == "finished"
    assert first == second  # the loser returns the winner's result, so result and files agree
    folder = pod_dir(run_dir, spec.pod_id)
    assert committed_result(folder) == first
    assert sorted(p.name for p in folder.parent.iterdir()) == [spec.pod_id]  # no staged copy left behind
    stored = json.loads((folder / rundir.POD_RESULT).read_text())
    assert stored["worker"] == first.worker and stored["start"] == first.start

    state = TournamentState(tiny_config(run_dir, recipe, pods=1, population=3))
    state.submitted(spec)
    assert state.ended(first) is True and state.ended(second) is False
    assert [e.pod_id for e in state.board.ranked()] == [spec.pod_id]
    kinds = [e["kind"] for e in rundir.read_json_lines(run_dir / rundir.EVENTS) if e.get("pod_id") == spec.pod_id]
    assert kinds == ["submitted", "finished", "entered"]
    frame = rundir.read_parquet(run_dir / rundir.PODS)
    assert frame["pod_id"].tolist() == [spec.pod_id] and frame["status"].tolist() == ["finished"]
    replayed = TournamentState.replay(state.config)
    assert [e.pod_id for e in replayed.board.ranked()] == [spec.pod_id]
    assert_every_file_is_documented(run_dir)

    before = snapshot(folder)
    third = train_pod(spec, str(run_dir))  # a run after the commit: returns the pod, writes nothing
    assert third == first and snapshot(folder) == before


def test_a_run_that_dies_mid_training_never_touches_the_finished_copy(
    recipe: Path, tmp_path: Path, monkeypatch
) -> None:
    import trader.training

    run_dir = tmp_path / "run"
    spec = spec_for(recipe, "p0005")
    finished = train_pod(spec, str(run_dir))
    folder = pod_dir(run_dir, spec.pod_id)
    before = snapshot(folder)
    os.rename(folder, tmp_path / "aside")  # as if the finished copy's commit had not happened yet
    real_train = trader.training.train

    def dies_half_way(*args, **kwargs):
        out = Path(args[3])
        rundir.write_text(out / rundir.CONFIG, "half = true\n")
        os.rename(tmp_path / "aside", folder)  # the other copy commits while this one trains
        raise KeyboardInterrupt  # a worker killed mid-pod: no result, no cleanup by the pod itself

    monkeypatch.setattr(trader.training, "train", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        train_pod(spec, str(run_dir))
    monkeypatch.setattr(trader.training, "train", real_train)
    assert snapshot(folder) == before and committed_result(folder) == finished
    assert sorted(p.name for p in folder.parent.iterdir()) == [spec.pod_id]
