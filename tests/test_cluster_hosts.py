"""Hosts that are really separate: a TLS dask scheduler and workers, each in a network
namespace of its own on a private bridge (tests/netns_hosts.py), the tournament
joining from the root namespace.

The short version (default suite): pods run on both worker hosts, strangers are
refused. The slow version also takes a worker host down mid-pod (cable pulled, then
its processes killed), starts a third worker host mid-run, and lets a worker with
another authority's certificate try to join.

Traffic stays on the lab's 10.213.N.0/24 bridge (no namespace has a default route);
every wait is bounded; the lab is torn down even when a test fails.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from netns_hosts import HostLab, lab_available, leftovers, sweep_dead_labs, wait_until
from market_fixtures import write_tiny_recipe
from test_tournament_cluster import check_consistent, tiny_config
from tournament import cluster, run
from tournament.certs import make_certificates
from tournament.cluster import TlsFiles
from trader.addresses import split_address
from trader.errors import ConfigError, UserError

distributed = pytest.importorskip("distributed")
ROOT = Path(__file__).resolve().parents[1]
DASK = str(Path(sys.executable).with_name("dask"))
PORT = 8786
CLI = "import sys; from podracer.cli import main; sys.exit(main(sys.argv[1:]))"

pytestmark = pytest.mark.skipif(lab_available() is not None, reason=lab_available() or "")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(root folder, recipe, our certificates, another authority's)."""
    root = tmp_path_factory.mktemp("hosts")
    recipe = write_tiny_recipe(root)
    return root, recipe, make_certificates(root / "ours"), make_certificates(root / "theirs")


@pytest.fixture(autouse=True)
def _shared_data_dir(setup, monkeypatch):
    """The root namespace and every host share one data cache (one file system)."""
    monkeypatch.setenv("PODRACER_DATA_DIR", str(setup[0] / "data"))


def client_tls(files) -> TlsFiles:
    return TlsFiles(str(files["ca"]), str(files["client"]), str(files["client-key"]))


def process_env(data_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "PODRACER_DATA_DIR": str(data_dir),
        "DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": "8s",
    }


def start_scheduler(lab: HostLab, files, data_dir: Path) -> str:
    host = lab.hosts["sched"]
    lab.start(
        "sched",
        [
            DASK,
            "scheduler",
            "--protocol",
            "tls",
            "--host",
            host.address,
            "--port",
            str(PORT),
            "--no-dashboard",
            "--tls-ca-file",
            str(files["ca"]),
            "--tls-cert",
            str(files["scheduler"]),
            "--tls-key",
            str(files["scheduler-key"]),
        ],
        process_env(data_dir),
        "scheduler",
    )
    address = f"tls://{host.address}:{PORT}"
    sec = cluster.security(address, client_tls(files))

    def answers() -> bool:
        try:
            cluster.probe_scheduler(address, sec, timeout=2.0)
            return True
        except UserError:
            return False

    wait_until(answers, 60, step=0.5, what=f"the scheduler at {address}\n{lab.log('scheduler')}")
    return address


def start_worker(lab: HostLab, name: str, address: str, files, data_dir: Path, *extra: str) -> None:
    host = lab.hosts[name]
    lab.start(
        name,
        [
            DASK,
            "worker",
            address,
            "--host",
            host.address,
            "--nthreads",
            "1",
            "--no-nanny",
            "--no-dashboard",
            "--name",
            name,
            "--tls-ca-file",
            str(files["ca"]),
            "--tls-cert",
            str(files["worker"]),
            "--tls-key",
            str(files["worker-key"]),
            *extra,
        ],
        process_env(data_dir),
        name,
    )


def hosts_of(frame: pd.DataFrame) -> set[str]:
    return {split_address(w)[1] for w in frame["worker"] if w}


async def _identity_over_tls(address: str, ca: Path, pair: tuple[Path, Path] | None = None):
    """Ask for the scheduler's identity over TLS that trusts the cluster's CA and
    presents ``pair`` (certificate, key), or no certificate at all."""
    from distributed.comm import connect

    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False
    if pair is not None:
        context.load_cert_chain(str(pair[0]), str(pair[1]))
    comm = await connect(address, timeout=5, ssl_context=context, require_encryption=True, extra_conn_args={})
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def assert_strangers_refused(address: str, ours, theirs, sched_host: str) -> None:
    """A client with another authority's certificate, one without a certificate, and
    plain tcp:// are all refused."""
    with pytest.raises(UserError, match=address):
        cluster.connect(scheduler=address, tls=client_tls(theirs), timeout=5.0)
    with pytest.raises((OSError, TimeoutError)):  # dask's own client will not even try without a certificate
        asyncio.run(asyncio.wait_for(_identity_over_tls(address, ours["ca"]), 10))
    with_cert = asyncio.run(
        asyncio.wait_for(_identity_over_tls(address, ours["ca"], (ours["client"], ours["client-key"])), 10)
    )
    assert with_cert["type"] == "Scheduler"  # the same request with the certificate is answered
    with pytest.raises(ConfigError, match="refusing plain tcp://"):
        cluster.connect(scheduler=f"tcp://{sched_host}:{PORT}")
    with pytest.warns(cluster.InsecureClusterWarning), pytest.raises(UserError):
        cluster.connect(scheduler=f"tcp://{sched_host}:{PORT}", insecure=True, timeout=3.0)


def test_a_lab_whose_process_died_is_swept_and_a_live_one_kept(tmp_path: Path) -> None:
    """A test killed before its cleanup leaves its namespaces; the next lab removes them."""
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    dead = f"p{int(gone):06x}ee"
    subprocess.run(["ip", "netns", "add", f"{dead}-w1"], check=True, timeout=30)
    subprocess.run(
        ["ip", "link", "add", f"{dead}v0r", "type", "veth", "peer", "name", f"{dead}v0h"], check=True, timeout=30
    )
    try:
        with HostLab(tmp_path) as lab:
            lab.add_host("w1")
            assert leftovers(dead) == []  # swept when the lab opened
            assert sweep_dead_labs() == [] and len(leftovers(lab.tag)) >= 2  # a live lab is left alone
    finally:
        subprocess.run(["ip", "netns", "del", f"{dead}-w1"], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", f"{dead}v0r"], capture_output=True, timeout=30)
    assert leftovers(lab.tag) == []


@pytest.mark.slow
def test_a_tls_tournament_runs_pods_on_two_namespace_hosts_and_refuses_strangers(setup, tmp_path: Path) -> None:
    root, recipe, ours, theirs = setup
    data_dir = root / "data"
    with HostLab(tmp_path) as lab:
        tag = lab.tag
        for name in ("sched", "w1", "w2"):
            lab.add_host(name)
        address = start_scheduler(lab, ours, data_dir)
        for name in ("w1", "w2"):
            start_worker(lab, name, address, ours, data_dir)
        with distributed.Client(address, security=cluster.security(address, client_tls(ours)), timeout=10) as watch:
            watch.wait_for_workers(2, timeout=90)
        assert_strangers_refused(address, ours, theirs, lab.hosts["sched"].address)

        config = tmp_path / "tiny.toml"
        config.write_text(
            "backtest = false\n[algo_configs.ppo]\nnum_steps = 32\nupdate_epochs = 2\n"
            "num_minibatches = 2\nhidden_sizes = [16]\n"
        )
        run_dir = tmp_path / "run"
        args = [
            "tournament",
            str(run_dir),
            "--dataset",
            str(recipe),
            "--pods",
            "2",
            "--pod-steps",
            "512",
            "--num-envs",
            "8",
            "--population",
            "3",
            "--algos",
            "ppo",
            "--config",
            str(config),
            "--scheduler",
            address,
            "--tls-ca",
            str(ours["ca"]),
            "--tls-cert",
            str(ours["client"]),
            "--tls-key",
            str(ours["client-key"]),
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PODRACER_DATA_DIR": str(data_dir)}
        done = subprocess.run(
            [sys.executable, "-c", CLI, *args], capture_output=True, text=True, timeout=240, env=env, cwd=ROOT
        )
        assert done.returncode == 0, done.stderr[-3000:]
        frame = check_consistent(run_dir, 2)
        assert (frame["status"] == "finished").all()
        assert hosts_of(frame) == {lab.hosts["w1"].address, lab.hosts["w2"].address}
        assert all(w.startswith("tls://") for w in frame["worker"])
    assert leftovers(tag) == []


@pytest.mark.slow
def test_a_host_lost_mid_pod_costs_no_entry_and_a_host_that_joins_gets_pods(setup, tmp_path: Path) -> None:
    root, recipe, ours, theirs = setup
    data_dir = root / "data"
    with HostLab(tmp_path) as lab:
        tag = lab.tag
        for name in ("sched", "w1", "w2", "w3", "rogue"):
            lab.add_host(name)
        address = start_scheduler(lab, ours, data_dir)
        for name in ("w1", "w2"):
            start_worker(lab, name, address, ours, data_dir)
        start_worker(lab, "rogue", address, theirs, data_dir, "--death-timeout", "20")  # another authority's pair
        watch = distributed.Client(address, security=cluster.security(address, client_tls(ours)), timeout=10)
        try:
            watch.wait_for_workers(2, timeout=90)
            _the_rogue_never_joins(lab, watch)
            _lose_a_host_and_add_one(lab, watch, address, ours, data_dir, recipe, tmp_path / "run")
        finally:
            watch.close()
    assert leftovers(tag) == []


def _the_rogue_never_joins(lab: HostLab, watch) -> None:
    rogue = lab.hosts["rogue"].processes[0]
    wait_until(lambda: rogue.poll() is not None, 60, step=0.5, what="the rogue worker giving up")
    names = {info["name"] for info in watch.scheduler_info()["workers"].values()}
    assert names == {"w1", "w2"}, names
    rejected = [
        line
        for line in lab.log("scheduler").splitlines()
        if f"tls://{lab.hosts['rogue'].address}:" in line and "SSL" in line
    ]
    assert rejected, lab.log("scheduler")[-3000:]  # the scheduler refused its handshake


def _lose_a_host_and_add_one(
    lab: HostLab, watch, address: str, ours, data_dir: Path, recipe: Path, run_dir: Path
) -> None:
    pods = 8
    config = tiny_config(
        run_dir,
        recipe,
        pods=pods,
        pod_steps=2048,
        algos=("ppo",),
        scheduler=address,
        tls_ca=str(ours["ca"]),
        tls_cert=str(ours["client"]),
        tls_key=str(ours["client-key"]),
    )
    outcome: dict[str, object] = {}

    def tournament() -> None:
        try:
            outcome["result"] = run(config)
        except BaseException as err:  # noqa: BLE001 - reported by the assertion below
            outcome["error"] = err

    thread = threading.Thread(target=tournament, daemon=True)
    thread.start()
    w1 = lab.hosts["w1"].address
    victim: list[str] = []

    def w1_finished_one_and_is_busy() -> bool:
        frame = _pods_or_none(run_dir)
        busy = [keys for worker, keys in watch.processing().items() if split_address(worker)[1] == w1 and keys]
        if frame is None or not busy or "error" in outcome:
            return "error" in outcome
        finished_on_w1 = frame[(frame["status"] == "finished") & frame["worker"].str.contains(f"//{w1}:", regex=False)]
        if len(finished_on_w1):
            victim.append(busy[0][0].split("-")[1])
            return True
        return False

    wait_until(w1_finished_one_and_is_busy, 150, step=0.1, what="a pod finished on w1 and another running there")
    assert "error" not in outcome, outcome
    lab.link_down("w1")  # the cable first: nothing more leaves w1
    lab.kill_host("w1")  # then the power
    start_worker(lab, "w3", address, ours, data_dir)
    thread.join(timeout=400)
    assert not thread.is_alive(), "the tournament did not end within 400 s"
    assert "error" not in outcome, outcome
    frame = check_consistent(run_dir, pods)
    assert (frame["status"] == "finished").all()  # nothing lost with w1
    assert hosts_of(frame) == {w1, lab.hosts["w2"].address, lab.hosts["w3"].address}
    lost = frame.set_index("pod_id").loc[victim[0]]
    assert split_address(lost["worker"])[1] != w1  # run again on another host
    assert set(os.listdir(run_dir / "pods")) == set(frame["pod_id"])  # one folder per pod, no staged leftover


def _pods_or_none(run_dir: Path) -> pd.DataFrame | None:
    try:
        return pd.read_parquet(run_dir / "pods.parquet")
    except (FileNotFoundError, OSError, ValueError):
        return None
