"""Pod groups in the tournament (issue 77): `train_pod_group`, the generator's packing, and a
tournament of ``group_size`` 4 on a `LocalCluster` of one worker, its worker SIGKILLed mid-group
and its orchestrator SIGKILLed and resumed.

A pod of a group gives, bit for bit, what it gives in any other group (`train_group`): its
checkpoints and trials are compared by checksum. Its config.toml (``[group]``: the group's size
and the pod's row), metrics.parquet and pod.json (wall-clock) say how and when it ran, and differ.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from test_rundir import assert_every_file_is_documented
from test_tournament_cluster import check_consistent, finished_events
from tournament import TournamentConfig, run
from tournament.generator import PodGenerator, groups, pod_group_key
from tournament.leaderboard import Leaderboard
from tournament.orchestrator import TournamentState
from tournament.pod import PodResult, PodSpec, committed_result, pod_dir, train_pod_group
from trader import rundir
from trader.agents import make_config
from trader.agents.checkpoint import load_agent
from trader.errors import ConfigError
from trader.spec import market_spec

distributed = pytest.importorskip("distributed")

DATASET = "synthetic-edge-daily"
TINY_PPO = {"num_steps": 32, "update_epochs": 2, "num_minibatches": 2, "hidden_sizes": [16]}
TINY_SAC = {"hidden_sizes": [16], "learning_starts": 256, "iteration_steps": 256, "batch_size": 64}
ALONE_SAC = {**TINY_SAC, "network": "per_stock"}
"""A SAC pod no group takes (the off-policy groups stack the flat MLP only)."""
SAME_BITS = ("checkpoints/best.safetensors", "checkpoints/final.safetensors", "trials.parquet", "dataset.json")
"""A pod's files that are the same bits in any group (the others record the group and the clock)."""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """One data cache for this module's tests and workers (synthetic-edge-daily built once)."""
    return tmp_path_factory.mktemp("groups-data")


@pytest.fixture(autouse=True)
def _isolated_data_dir(data_dir, monkeypatch):
    """Overrides conftest's: the workers and the tests share one cache directory."""
    monkeypatch.setenv("PODRACER_DATA_DIR", str(data_dir))


@pytest.fixture(scope="module")
def one_worker(data_dir):
    os.environ["PODRACER_DATA_DIR"] = str(data_dir)  # the worker process inherits it
    cluster = distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
    )
    client = distributed.Client(cluster)
    yield cluster, client
    client.close()
    cluster.close()


def ppo_spec(index: int, **changes) -> PodSpec:
    values = dict(
        pod_id=f"p{index:04d}",
        index=index,
        algo="ppo",
        algo_config={**TINY_PPO, "learning_rate": 1e-4 * (index + 1)},
        env=market_spec(DATASET),
        steps=1024,
        seed=100 + index,
        num_envs=4,
    )
    return PodSpec(**{**values, **changes})


def checksums(run_dir: Path, pod_ids, names=SAME_BITS) -> dict[str, str]:
    """sha256 of each pod's files ``names`` (all its files when ``names`` is None)."""
    out = {}
    for pod_id in pod_ids:
        folder = pod_dir(run_dir, pod_id)
        paths = sorted(p for p in folder.rglob("*") if p.is_file()) if names is None else [folder / n for n in names]
        for path in paths:
            out[str(path.relative_to(run_dir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def scores(results: list[PodResult]) -> list[tuple[str, str, float | None, int]]:
    return [(r.pod_id, r.status, r.score, r.steps) for r in results]


def counting_train_group(monkeypatch) -> list[int]:
    """`train_group` wrapped to record the size of each group it trains."""
    import trader.group_training

    calls: list[int] = []
    real = trader.group_training.train_group

    def counted(algo, env, configs, *args, **kwargs):
        calls.append(len(configs))
        return real(algo, env, configs, *args, **kwargs)

    monkeypatch.setattr(trader.group_training, "train_group", counted)
    return calls


# --------------------------------------------------------------------------- train_pod_group


@pytest.fixture(scope="module")
def full_group(tmp_path_factory, data_dir) -> tuple[Path, list[PodResult]]:
    """A group of 4 PPO pods trained once: (run directory, results)."""
    os.environ["PODRACER_DATA_DIR"] = str(data_dir)
    root = tmp_path_factory.mktemp("full-group")
    return root, train_pod_group([ppo_spec(i) for i in range(4)], str(root))


def test_a_group_trains_each_pod_into_its_own_run_directory(full_group) -> None:
    root, results = full_group
    assert [r.status for r in results] == ["finished"] * 4, [r.error for r in results]
    assert len({r.score for r in results}) == 4  # four pods, four learning rates: four scores
    assert len({(r.start, r.end) for r in results}) == 1  # one program
    for result in results:
        folder = pod_dir(root, result.pod_id)
        assert committed_result(folder) == result
        assert result.checkpoint == f"pods/{result.pod_id}/checkpoints/best" and result.steps == 1024
        agent = load_agent(root / result.checkpoint)  # a pod of a group loads alone
        assert agent.config.learning_rate == pytest.approx(1e-4 * (int(result.pod_id[1:]) + 1))
        assert rundir.read_toml(folder / rundir.CONFIG)["group"] == {"size": 4, "row": int(result.pod_id[1:])}
    assert not list((root / "pods").glob(".tmp-*"))  # staged folders gone


def test_a_group_run_twice_returns_its_results_and_trains_nothing(full_group, monkeypatch) -> None:
    root, results = full_group
    before = checksums(root, [r.pod_id for r in results], names=None)
    calls = counting_train_group(monkeypatch)
    again = train_pod_group([ppo_spec(i) for i in range(4)], str(root))
    assert again == results and calls == []
    assert checksums(root, [r.pod_id for r in results], names=None) == before


def test_a_group_with_a_pod_committed_trains_the_others_as_the_whole_group_did(
    full_group, tmp_path: Path, monkeypatch
) -> None:
    root, results = full_group
    (tmp_path / "pods").mkdir()
    shutil.copytree(pod_dir(root, "p0002"), pod_dir(tmp_path, "p0002"))  # committed before, by another run
    calls = counting_train_group(monkeypatch)
    rerun = train_pod_group([ppo_spec(i) for i in range(4)], str(tmp_path))
    assert calls == [3]  # the three others, as one group
    assert rerun[2] == results[2]  # returned from its pod.json
    assert scores(rerun) == scores(results)
    ids = [r.pod_id for r in results]
    assert checksums(tmp_path, ids) == checksums(root, ids)
    assert checksums(tmp_path, ["p0002"], names=None) == checksums(root, ["p0002"], names=None)


def test_a_failed_group_is_a_failed_result_per_pod_and_a_past_deadline_cancels(tmp_path: Path) -> None:
    bad = [ppo_spec(i, algo_config={**TINY_PPO, "hidden_sizes": [16, 0]}) for i in range(2)]  # refused at build
    failed = train_pod_group(bad, str(tmp_path))
    assert [r.status for r in failed] == ["failed", "failed"]
    assert all(r.error and "\n" not in r.error and "hidden_sizes" in r.error for r in failed), failed
    assert all((pod_dir(tmp_path, r.pod_id) / rundir.ERROR).is_file() for r in failed)
    mixed = [ppo_spec(4, steps=512), ppo_spec(5, steps=1024)]  # refused by the group task itself
    failed = train_pod_group(mixed, str(tmp_path))
    assert [r.status for r in failed] == ["failed", "failed"]
    assert all("the pods of a group task need one algorithm" in r.error for r in failed), failed
    late = [ppo_spec(i, pod_id=f"q{i}", deadline=time.time() - 1) for i in range(2)]
    cancelled = train_pod_group(late, str(tmp_path))
    assert [r.status for r in cancelled] == ["cancelled", "cancelled"]
    assert not pod_dir(tmp_path, "q0").exists() and not list((tmp_path / "pods").glob(".tmp-*"))


def test_a_lone_spec_is_a_group_of_one_and_pods_that_do_not_group_train_alone(tmp_path: Path, monkeypatch) -> None:
    calls = counting_train_group(monkeypatch)
    sac = PodSpec("s0000", 0, "sac", ALONE_SAC, market_spec(DATASET), steps=512, seed=1, num_envs=4)
    results = train_pod_group([ppo_spec(0)], str(tmp_path)) + train_pod_group([sac], str(tmp_path))
    assert [r.status for r in results] == ["finished", "finished"], [r.error for r in results]
    assert calls == [1]
    assert rundir.read_toml(pod_dir(tmp_path, "p0000") / rundir.CONFIG)["group"] == {"size": 1, "row": 0}
    assert "group" not in rundir.read_toml(pod_dir(tmp_path, "s0000") / rundir.CONFIG)  # `trader.train`'s pod


# --------------------------------------------------------------------------- packing and the generator


def test_groups_pack_pods_that_share_a_key_and_leave_the_others_alone() -> None:
    sac = PodSpec("p0001", 1, "sac", ALONE_SAC, market_spec(DATASET), steps=1024, seed=1, num_envs=4)
    other = ppo_spec(5, algo_config={**TINY_PPO, "num_minibatches": 4})  # another program
    specs = [ppo_spec(0), sac, ppo_spec(2), ppo_spec(3), other, ppo_spec(6), ppo_spec(7)]
    ids = [[s.pod_id for s in task] for task in groups(specs, 3)]
    assert ids == [["p0000", "p0002", "p0003"], ["p0001"], ["p0005"], ["p0006", "p0007"]]
    assert [[s.pod_id for s in task] for task in groups(specs, 1)] == [[s.pod_id] for s in specs]
    assert pod_group_key(sac) is None and pod_group_key(ppo_spec(0, compile=True)) is None
    flat_sac = PodSpec("p0009", 9, "sac", TINY_SAC, market_spec(DATASET), steps=1024, seed=9, num_envs=4)
    assert pod_group_key(flat_sac) not in (None, pod_group_key(ppo_spec(0)))  # SAC pods group among themselves
    assert pod_group_key(ppo_spec(0)) == pod_group_key(ppo_spec(1)) != pod_group_key(other)
    assert pod_group_key(ppo_spec(0, compile="validation")) not in (None, pod_group_key(ppo_spec(0)))
    per_stock = ppo_spec(0, algo_config={**TINY_PPO, "network": "per_stock"})
    assert pod_group_key(per_stock) not in (None, pod_group_key(ppo_spec(0)))  # the demo's pods group too
    ant = [PodSpec(f"a{k}", k, "sac", TINY_SAC, "Ant-v5", steps=1024, seed=k, num_envs=4) for k in range(2)]
    assert pod_group_key(ant[0]) == pod_group_key(ant[1]) not in (None, pod_group_key(flat_sac))  # gymnasium pods too
    assert pod_group_key(PodSpec("w", 0, "sac", TINY_SAC, "warp:Ant-v5", steps=1024, seed=0, num_envs=4)) is None


@pytest.mark.parametrize("search", ["pbt", "random"])
def test_with_groups_the_generator_never_moves_what_defines_a_group(search: str) -> None:
    from tournament.leaderboard import Entry

    def minibatches(group_size: int) -> set[int]:
        config = TournamentConfig(
            env=DATASET, algos=("ppo",), search=search, group_size=group_size, fresh_probability=0.0
        )
        board = Leaderboard(4)
        board.consider(
            Entry("p0000", 0, "ppo", 1.0, 0, None, {"num_minibatches": 8}, "pods/p0000/checkpoints/best", [])
        )
        generator = PodGenerator(config)
        return {generator.next_spec(i, board).algo_config["num_minibatches"] for i in range(1, 40)}

    assert len(minibatches(1)) > 1  # lone pods: mutated (pbt) or drawn (random)
    assert minibatches(4) == ({8} if search == "pbt" else {make_config("ppo").num_minibatches})


def test_group_size_is_checked_and_kept_by_tournament_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^group_size must be >= 1, got 0$"):
        TournamentConfig(env=DATASET, group_size=0)
    config = TournamentConfig(run_dir=str(tmp_path), env=DATASET, group_size=4)
    assert TournamentConfig.from_dict(config.to_dict()).group_size == 4
    assert TournamentConfig.from_dict({k: v for k, v in config.to_dict().items() if k != "group_size"}).group_size == 1


def test_the_tournament_says_once_what_groups_keep_and_refuses_a_group_size_of_0(tmp_path: Path, capsys) -> None:
    from podracer.cli import main
    from podracer.cli.tournament import groups_line

    assert groups_line(TournamentConfig(env=DATASET)) == ""
    assert groups_line(TournamentConfig(env=DATASET, group_size=8)) == (
        "pod groups of up to 8 ppo/sac/td3 pods; not mutated, as they define a group: batch_size, num_minibatches"
    )
    assert main(["tournament", str(tmp_path / "t"), "--dataset", DATASET, "--group-size", "0"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "error: --group-size must be >= 1, got 0"


# --------------------------------------------------------------------------- tournaments of groups


def group_config(run_dir: Path, **changes) -> TournamentConfig:
    values = dict(
        run_dir=str(run_dir),
        env=DATASET,
        algos=("ppo",),
        algo_configs={"ppo": TINY_PPO, "sac": TINY_SAC},
        pod_steps=1024,
        num_envs=4,
        pods=8,
        population=4,
        group_size=4,
        fresh_probability=0.0,
        keep_checkpoints=True,
        backtest=False,
    )
    return TournamentConfig(**{**values, **changes})


def check_events(run_dir: Path, pods: int) -> list[dict]:
    """One "submitted" and one ended line per pod."""
    events = rundir.read_json_lines(run_dir / "events.jsonl")
    submitted = Counter(e["pod_id"] for e in events if e["kind"] == "submitted")
    assert len(submitted) == pods and set(submitted.values()) == {1}, submitted
    return events


def test_a_tournament_of_groups_of_4_keeps_a_row_and_a_checkpoint_per_pod(one_worker, tmp_path: Path) -> None:
    _, client = one_worker
    run_dir = tmp_path / "groups"
    result = run(group_config(run_dir, algos=("ppo", "sac"), pods=10), client=client)
    frame = check_consistent(run_dir, 10)
    check_events(run_dir, 10)
    assert (frame["status"] == "finished").all(), frame[["pod_id", "status", "error"]]
    ppo, sac = frame[frame["algo"] == "ppo"], frame[frame["algo"] == "sac"]
    assert ppo.groupby("start").size().max() >= 2 and sac.groupby("start").size().max() >= 2  # both grouped
    for pod_id in frame["pod_id"]:
        load_agent(run_dir / "pods" / pod_id / "checkpoints" / "best")  # each pod's checkpoint, alone
    children = frame[frame["generation"] > 0]
    assert not children.empty, "no child pod was bred"
    for child in children.itertuples():
        spec = json.loads(child.spec)
        written = rundir.read_toml(run_dir / "pods" / child.pod_id / rundir.CONFIG)
        assert Path(written["init_from"]) == run_dir.resolve() / spec["parent_checkpoint"]
        assert spec["parent_checkpoint"] == f"pods/{child.parent_id}/checkpoints/best"
    assert {e.pod_id for e in result.leaderboard.ranked()} <= set(frame["pod_id"])
    assert_every_file_is_documented(run_dir)


@pytest.mark.slow
def test_a_worker_killed_mid_group_loses_no_finished_pod(one_worker, tmp_path: Path) -> None:
    cluster, client = one_worker
    run_dir = tmp_path / "killed"
    config = group_config(run_dir, pod_steps=4096)
    thread = threading.Thread(target=lambda: run(config, client=client))
    thread.start()
    before: dict[str, str] = {}
    deadline = time.monotonic() + 120
    while not before and time.monotonic() < deadline:
        frame = _pods_or_none(run_dir)
        busy = [w for w, keys in client.processing().items() if any(str(k).startswith("group-") for k in keys)]
        finished = [] if frame is None else list(frame.loc[frame["status"] == "finished", "pod_id"])
        if busy and len(finished) == 4:  # the first group committed, the second training
            before = checksums(run_dir, finished, names=None)
            pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    assert before, "no second group ever ran"
    thread.join(timeout=240)
    assert not thread.is_alive()
    frame = check_consistent(run_dir, 8)
    assert (frame["status"] == "finished").all()  # the lost group ran again and finished
    check_events(run_dir, 8)
    assert checksums(run_dir, {Path(k).parts[1] for k in before}, names=None) == before
    client.wait_for_workers(1, timeout=60)


def _pods_or_none(run_dir: Path) -> pd.DataFrame | None:
    try:
        return pd.read_parquet(run_dir / "pods.parquet")
    except (FileNotFoundError, OSError, ValueError):
        return None


@pytest.mark.slow
def test_a_killed_orchestrator_of_groups_resumes_without_rerunning_finished_pods(one_worker, tmp_path: Path) -> None:
    _, client = one_worker
    run_dir = tmp_path / "resumed"
    config_file = tmp_path / "tiny.toml"
    config_file.write_text(
        "backtest = false\nkeep_checkpoints = true\n[algo_configs.ppo]\n"
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in TINY_PPO.items())
    )
    args = [
        *("tournament", str(run_dir), "--dataset", DATASET, "--pods", "8", "--pod-steps", "2048"),
        *("--num-envs", "4", "--population", "4", "--workers", "1", "--algos", "ppo", "--group-size", "2"),
        *("--config", str(config_file)),
    ]
    code = "import sys; from podracer.cli import main; sys.exit(main(sys.argv[1:]))"
    process = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None:
        if (run_dir / "events.jsonl").is_file() and len(finished_events(run_dir)) >= 2:
            break
        time.sleep(0.05)
    assert process.poll() is None, "the tournament ended before it could be killed"
    os.killpg(process.pid, signal.SIGKILL)  # the orchestrator, its scheduler and its worker
    process.wait()
    done = sorted(TournamentState.replay(group_config(run_dir)).results)
    assert 2 <= len(done) < 8
    before = checksums(run_dir, done, names=None)
    run(TournamentConfig(run_dir=str(run_dir), pods=8, backtest=False), resume=True, client=client)
    frame = check_consistent(run_dir, 8)
    resumed = frame[~frame["pod_id"].isin(done)]
    assert len(resumed) < 2 or resumed.groupby("start").size().max() == 2  # in flight: resubmitted as groups
    events = rundir.read_json_lines(run_dir / "events.jsonl")
    submitted = Counter(e["pod_id"] for e in events if e["kind"] == "submitted")
    assert all(submitted[pod] == 1 for pod in done)  # finished before the kill: never resubmitted
    assert checksums(run_dir, done, names=None) == before
    assert rundir.read_toml(run_dir / rundir.TOURNAMENT)["group_size"] == 2  # the resume kept its groups


def test_the_groups_line_names_the_pods_whose_network_trains_alone() -> None:
    from podracer.cli.tournament import groups_line

    per_stock = {"network": "per_stock"}
    config = TournamentConfig(env=DATASET, group_size=4, algo_configs={"sac": per_stock, "td3": per_stock})
    assert groups_line(config) == (
        "pod groups of up to 4 ppo pods; not mutated, as they define a group: num_minibatches; sac, td3 pods "
        "train alone"
    )
