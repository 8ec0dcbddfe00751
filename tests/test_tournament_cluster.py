"""The tournament on a real dask `LocalCluster` of 2 worker processes, tiny budgets.

A worker SIGKILLed mid-pod, the orchestrator SIGKILLed and resumed, a worker that
joins mid-run, and the same leaderboard twice from one worker and one seed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tournament import TournamentConfig, run
from test_rundir import assert_every_file_is_documented
from tournament.leaderboard import Leaderboard

from market_fixtures import write_tiny_recipe

distributed = pytest.importorskip("distributed")

TINY_ALGOS = {
    "ppo": {"num_steps": 32, "update_epochs": 2, "num_minibatches": 2, "hidden_sizes": [16]},
    "sac": {"hidden_sizes": [16], "learning_starts": 256, "iteration_steps": 256, "batch_size": 64},
    "td3": {"hidden_sizes": [16], "learning_starts": 256, "iteration_steps": 256, "batch_size": 64},
}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """(data dir, recipe path): one data cache for this module's workers and tests."""
    root = tmp_path_factory.mktemp("tournament")
    recipe = write_tiny_recipe(root, interval="5min")  # a fifth of the bars in every validation pass
    return root / "data", recipe


@pytest.fixture(autouse=True)
def _isolated_data_dir(shared, monkeypatch):
    """Overrides conftest's: the workers and the tests share one cache directory."""
    monkeypatch.setenv("PODRACER_DATA_DIR", str(shared[0]))


@pytest.fixture(scope="module")
def local_cluster(shared):
    os.environ["PODRACER_DATA_DIR"] = str(shared[0])  # the worker processes inherit it
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
    )
    client = distributed.Client(cluster)
    yield cluster, client
    client.close()
    cluster.close()


def tiny_config(run_dir: Path, recipe: Path, **changes) -> TournamentConfig:
    values = dict(
        run_dir=str(run_dir),
        env=str(recipe),
        pod_steps=512,
        num_envs=8,
        pods=6,
        population=3,
        algo_configs=TINY_ALGOS,
        backtest=False,
    )
    return TournamentConfig(**{**values, **changes})


def tournament_process(
    run_dir: Path, recipe: Path, tmp_path: Path, pods: int, backtest: bool = False, stdout: Any = subprocess.PIPE
) -> subprocess.Popen:
    """`trader tournament` of tiny PPO pods on one local worker, in a session of its own (the group a
    terminal's Ctrl-C reaches: the command and its workers); stderr piped, as text."""
    config_file = tmp_path / "tiny.toml"
    config_file.write_text(
        f"backtest = {str(backtest).lower()}\n[algo_configs.ppo]\nnum_steps = 32\nupdate_epochs = 2\n"
        "num_minibatches = 2\nhidden_sizes = [16]\n"
    )
    args = [
        *("tournament", str(run_dir), "--dataset", str(recipe), "--pods", str(pods), "--pod-steps", "1024"),
        *("--num-envs", "8", "--population", "3", "--workers", "1", "--algos", "ppo", "--config", str(config_file)),
    ]
    code = "import sys; from podracer.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        start_new_session=True,
        stdout=stdout,
        stderr=subprocess.PIPE if stdout is subprocess.PIPE else subprocess.DEVNULL,
        text=True,
    )


def wait_for(process: subprocess.Popen, ready: Any, seconds: float = 180) -> None:
    """Until ``ready()`` holds; the process must still run then."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None and not ready():
        time.sleep(0.05)
    assert process.poll() is None, "the tournament ended before the signal"


def events_of(run_dir: Path) -> list[dict]:
    """The complete lines of the run's log so far ([] before it exists)."""
    from trader import rundir

    return rundir.read_json_lines(run_dir / "events.jsonl")


def ended(run_dir: Path) -> int:
    return sum(e["kind"] in ("finished", "failed") for e in events_of(run_dir))


def interrupted(process: subprocess.Popen, sig: signal.Signals, group: bool) -> list[str]:
    """Send ``sig`` (to the process group: a terminal's Ctrl-C); the command's stderr lines, after it
    exited with 128 + the signal's number, without a traceback from any of its processes."""
    (os.killpg if group else os.kill)(process.pid, sig)
    _, err = process.communicate(timeout=180)
    assert process.returncode == 128 + sig, err[-3000:]
    assert "Traceback" not in err and "Error" not in err, err[-3000:]
    lines = err.strip().splitlines()
    assert sum("interrupted" in line for line in lines) == 1, err[-3000:]
    return lines


def test_sigint_during_the_pods_says_in_one_line_where_it_stopped_and_how_to_resume(shared, tmp_path: Path) -> None:
    run_dir = tmp_path / "t"
    process = tournament_process(run_dir, shared[1], tmp_path, pods=3)
    wait_for(process, lambda: ended(run_dir) >= 1)
    lines = interrupted(process, signal.SIGINT, group=True)
    assert lines[-1].startswith("interrupted (SIGINT) while training pods (")
    assert lines[-1].endswith(f"; resume with: trader tournament {run_dir} --resume")
    assert events_of(run_dir)[-1] | {"time": 0} == {"kind": "stopped", "reason": "interrupted", "time": 0}


@pytest.mark.slow
def test_a_tournament_stopped_by_sigterm_resumes_on_its_saved_worker_count(shared, tmp_path: Path) -> None:
    """SIGTERM (a service manager's stop: the command alone) is one line too; the resume runs on the
    run's one worker, and its rate counts this session's pods over this session's clock."""
    from tournament.orchestrator import resume_config

    run_dir = tmp_path / "t"
    process = tournament_process(run_dir, shared[1], tmp_path, pods=3)
    wait_for(process, lambda: ended(run_dir) >= 1)
    lines = interrupted(process, signal.SIGTERM, group=False)
    assert lines[-1].startswith("interrupted (SIGTERM) while training pods (")
    before = len(finished_events(run_dir))
    seen = []
    run(resume_config(run_dir), resume=True, on_progress=seen.append)
    check_consistent(run_dir, 3)
    last = seen[-1]
    assert (last.workers, last.resumed, last.done, last.done_here) == (1, True, 3, 3 - before)
    assert last.pods_per_hour == pytest.approx(3600 * last.done_here / last.elapsed)


@pytest.mark.slow
def test_sigint_during_the_final_backtest_is_one_line_and_a_resume_writes_the_report(shared, tmp_path: Path) -> None:
    from podracer.cli import main

    run_dir = tmp_path / "t"
    process = tournament_process(run_dir, shared[1], tmp_path, pods=1, backtest=True)
    wait_for(process, lambda: any(e["kind"] == "selected" for e in events_of(run_dir)))
    lines = interrupted(process, signal.SIGINT, group=True)
    assert lines[-1].startswith("interrupted (SIGINT) during the final backtest (1 pod finished, 0 failed")
    assert not (run_dir / "report.json").exists()
    assert main(["tournament", str(run_dir), "--resume"]) == 0
    assert (run_dir / "report.json").is_file() and len(finished_events(run_dir)) == 1  # no pod trained again


def finished_events(run_dir: Path) -> Counter:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    return Counter(e["pod_id"] for e in events if e["kind"] in ("finished", "failed"))


def check_consistent(run_dir: Path, pods: int) -> pd.DataFrame:
    """Every pod of the budget ended once; the board holds each pod once, all finished."""
    ended = finished_events(run_dir)
    assert len(ended) == pods and set(ended.values()) == {1}, ended
    frame = pd.read_parquet(run_dir / "pods.parquet")
    assert frame["pod_id"].is_unique and len(frame) == pods
    assert set(frame["status"]) <= {"finished", "failed"}
    board = Leaderboard.load(run_dir / "leaderboard.json")
    ids = [e.pod_id for e in board.ranked()]
    assert len(ids) == len(set(ids)) == min(pods, board.capacity)
    finished = set(frame.loc[frame["status"] == "finished", "pod_id"])
    assert set(ids) <= finished
    assert_every_file_is_documented(run_dir)
    return frame


@pytest.mark.slow
def test_a_worker_killed_mid_pod_costs_no_pod(local_cluster, shared, tmp_path: Path) -> None:
    cluster, client = local_cluster
    run_dir = tmp_path / "killed"
    config = tiny_config(run_dir, shared[1], pod_steps=2048, pods=4, algos=("ppo",))
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("result", run(config, client=client)))
    thread.start()
    victim = None
    deadline = time.monotonic() + 60
    while victim is None and time.monotonic() < deadline:
        busy = [w for w, keys in client.processing().items() if keys]
        frame = _pods_or_none(run_dir)
        if busy and frame is not None and (frame["status"] == "finished").sum() >= 1:
            victim = busy[0]
        time.sleep(0.1)
    assert victim is not None, "no pod ever ran"
    pid = client.run(os.getpid, workers=[victim])[victim]
    os.kill(pid, signal.SIGKILL)
    thread.join(timeout=120)
    assert not thread.is_alive()
    frame = check_consistent(run_dir, 4)
    assert (frame["status"] == "finished").all()  # the lost pod ran again and finished
    client.wait_for_workers(2, timeout=30)


def _pods_or_none(run_dir: Path) -> pd.DataFrame | None:
    try:
        return pd.read_parquet(run_dir / "pods.parquet")
    except (FileNotFoundError, OSError, ValueError):
        return None


def test_a_killed_orchestrator_resumes_without_rerunning_finished_pods(local_cluster, shared, tmp_path: Path) -> None:
    _, client = local_cluster
    run_dir = tmp_path / "resumed"
    process = tournament_process(run_dir, shared[1], tmp_path, pods=5, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and process.poll() is None:
        if (run_dir / "events.jsonl").is_file() and len(finished_events(run_dir)) >= 2:
            break
        time.sleep(0.1)
    assert process.poll() is None, "the tournament ended before it could be killed"
    os.killpg(process.pid, signal.SIGKILL)  # the orchestrator, its scheduler and its workers
    process.wait()
    before = finished_events(run_dir)
    assert 2 <= len(before) < 5
    run(TournamentConfig(run_dir=str(run_dir), pods=5, backtest=False), resume=True, client=client)
    check_consistent(run_dir, 5)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    submitted = Counter(e["pod_id"] for e in events if e["kind"] == "submitted")
    assert all(submitted[pod] == 1 for pod in before)  # finished before the kill: never resubmitted


def test_the_time_budget_stops_the_pods_in_flight_and_ranks_them(local_cluster, shared, tmp_path: Path) -> None:
    """Pods far longer than the budget: each pod running at the budget stops there, is
    validated and enters the leaderboard; none is cancelled and its work lost."""
    _, client = local_cluster
    run_dir = tmp_path / "budget"
    pod_steps = 10**8
    config = tiny_config(run_dir, shared[1], pods=None, time_budget=4.0, pod_steps=pod_steps, algos=("ppo",))
    result = run(config, client=client)
    assert result.stop_reason == "time_budget" and result.seconds < 120
    frame = result.pods
    assert len(frame) == 2 and (frame["status"] == "finished").all(), frame[["pod_id", "status", "error"]]
    assert ((frame["steps"] > 0) & (frame["steps"] < pod_steps)).all()
    assert {e.pod_id for e in result.leaderboard.ranked()} == set(frame["pod_id"])
    assert_every_file_is_documented(run_dir)


@pytest.mark.slow
def test_a_worker_that_joins_mid_run_receives_pods(local_cluster, shared, tmp_path: Path) -> None:
    cluster, client = local_cluster
    run_dir = tmp_path / "elastic"
    config = tiny_config(run_dir, shared[1], pods=14, algos=("ppo",))
    before = set(client.scheduler_info()["workers"])
    scaled = threading.Event()

    def on_progress(progress) -> None:
        if progress.done >= 1 and not scaled.is_set():
            scaled.set()
            cluster.scale(3)

    try:
        run(config, client=client, on_progress=on_progress)
    finally:
        cluster.scale(2)
    frame = check_consistent(run_dir, 14)
    newcomers = set(frame["worker"]) - before
    assert newcomers, f"no pod ran on the worker that joined; workers used: {sorted(set(frame['worker']))}"
    client.wait_for_workers(2, timeout=30)


@pytest.mark.slow
def test_one_worker_and_one_seed_give_the_same_leaderboard_twice(shared, tmp_path: Path) -> None:
    os.environ["PODRACER_DATA_DIR"] = str(shared[0])
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        boards = []
        for name in ("first", "second"):
            config = tiny_config(
                tmp_path / name, shared[1], seed=11, pods=5, fresh_probability=0.0, algos=("ppo", "td3")
            )
            result = run(config, client=client)
            boards.append(
                [
                    (e.pod_id, e.algo, e.score, e.generation, e.parent_id, e.hyperparameters)
                    for e in result.leaderboard.ranked()
                ]
            )
    assert boards[0] == boards[1]
    assert len(boards[0]) == 3
    frame = pd.read_parquet(tmp_path / "first" / "pods.parquet")
    assert (frame["generation"] > 0).any()  # children were bred, and bred the same way twice


def test_local_workers_start_without_the_nannys_malloc_trim_threshold(monkeypatch) -> None:
    """dask's nanny sets MALLOC_TRIM_THRESHOLD_ in each worker by default; with it glibc maps and
    unmaps every large tensor afresh and PPO pods trained 1.5 to 2.3 times slower
    (`tournament.cluster.WORKER_ENV_UNSET`). The local cluster's workers start without it, while the
    variables the nanny should still set (one BLAS thread) are set."""
    from tournament import cluster

    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)  # a user's shell that did not set it
    client = cluster.connect(workers=1)
    try:
        trim = list(client.run(os.environ.get, "MALLOC_TRIM_THRESHOLD_").values())
        threads = list(client.run(os.environ.get, "OMP_NUM_THREADS").values())
    finally:
        cluster.close(client)
    assert trim == [None]
    assert threads == ["1"]


def test_a_signal_whose_interrupt_python_swallowed_still_stops_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A SIGINT whose handler runs inside a gc callback or a ``__del__`` raises a KeyboardInterrupt
    that Python prints as "Exception ignored" and drops (seen under load: distributed's gc
    callback); the command still stops with the signal's line and exit code."""
    import podracer.cli.tournament as cli
    from podracer.cli import main

    def swallowing(settings: Any, resume: bool, caught: list[int]) -> Any:
        class Dies:
            def __del__(self) -> None:
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(10_000):  # the handler runs here, inside __del__: its exception is ignored
                    pass

        Dies()
        assert caught == [signal.SIGINT]  # caught, and swallowed: the run went on
        return object()

    monkeypatch.setattr(cli, "_run_on_cluster", swallowing)
    code = main(["tournament", str(tmp_path / "t"), "--dataset", "synthetic-edge-daily", "--pods", "1"])
    assert code == 128 + signal.SIGINT
    assert "interrupted (SIGINT)" in capsys.readouterr().err
