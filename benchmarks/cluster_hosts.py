"""What TLS and separate hosts cost: pods per hour on two namespace hosts over TLS
against the same two workers on loopback over plain TCP (issue 33).

Both arrangements run the same `dask scheduler` and two `dask worker` processes
(``--nthreads 1 --no-nanny``), the tournament in this process:

- ``loopback``: scheduler and workers in the root namespace on 127.0.0.1, tcp://;
- ``hosts``: the scheduler and each worker in a network namespace of its own on a
  private bridge (tests/netns_hosts.py), mutual TLS with `trader cluster certs`'
  certificates, the tournament joining from the root namespace.

Each arrangement runs ``--pods`` fresh PPO pods (``fresh_probability=1``: every pod
does the same work) after its workers have imported torch and loaded the data set,
so the figure is the steady state, not the start-up. Pods per hour count from the
first submission to the last result. ``busy`` is the share of the two workers' time
spent inside pods (the pods' own clocks summed over 2 x the wall-clock): what the
scheduler, TLS and the network cost shows there, apart from how fast a pod trains
on a machine that others load. The arrangements alternate (``--rounds`` times
loopback then hosts); the ratios hosts / loopback are of the medians.
Needs root and iproute2.

    OMP_NUM_THREADS=1 python benchmarks/cluster_hosts.py                  # ~8 min on 2 cores
    python benchmarks/cluster_hosts.py --pods 4 --pod-steps 4096 --rounds 1   # quick
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the namespace lab lives beside the test that uses it

from netns_hosts import HostLab, lab_available, wait_until  # noqa: E402
from tournament import TournamentConfig, cluster, run  # noqa: E402
from tournament.certs import make_certificates  # noqa: E402
from tournament.cluster import TlsFiles  # noqa: E402

DASK = str(Path(sys.executable).with_name("dask"))


def process_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def scheduler_argv(host: str, port: int, certs: dict[str, Path] | None) -> list[str]:
    argv = [DASK, "scheduler", "--host", host, "--port", str(port), "--no-dashboard"]
    if certs:
        argv += [
            "--protocol",
            "tls",
            "--tls-ca-file",
            str(certs["ca"]),
            "--tls-cert",
            str(certs["scheduler"]),
            "--tls-key",
            str(certs["scheduler-key"]),
        ]
    return argv


def worker_argv(address: str, host: str, name: str, certs: dict[str, Path] | None) -> list[str]:
    argv = [DASK, "worker", address, "--host", host, "--nthreads", "1", "--no-nanny", "--no-dashboard", "--name", name]
    if certs:
        argv += [
            "--tls-ca-file",
            str(certs["ca"]),
            "--tls-cert",
            str(certs["worker"]),
            "--tls-key",
            str(certs["worker-key"]),
        ]
    return argv


def warm_up(address: str, tls: TlsFiles, dataset: str) -> None:
    """Wait for both workers; have each import the pod code and load the data set."""
    client = cluster.connect(scheduler=address, tls=tls, timeout=30.0)
    try:
        client.wait_for_workers(2, timeout=120)

        def load() -> str:
            from tournament.pod import load_market

            load_market(dataset)
            return "ok"

        assert set(client.run(load).values()) == {"ok"}
    finally:
        client.close()


def tournament(address: str, tls: TlsFiles, args: argparse.Namespace, run_dir: Path) -> dict:
    config = TournamentConfig(
        run_dir=str(run_dir),
        env=args.dataset,
        algos=("ppo",),
        pod_steps=args.pod_steps,
        num_envs=args.num_envs,
        pods=args.pods,
        population=args.pods,
        fresh_probability=1.0,
        seed=args.seed,
        backtest=False,
        scheduler=address,
        tls_ca=tls.ca,
        tls_cert=tls.cert,
        tls_key=tls.key,
    )
    load = os.getloadavg()[0]
    result = run(config)
    pods = result.pods
    return {
        "pods": int((pods["status"] == "finished").sum()),
        "wall_s": result.seconds,
        "pods_per_hour": 3600.0 * len(pods) / result.seconds,
        "median_pod_s": float(pods["seconds"].median()),
        "busy": float(pods["seconds"].sum()) / (2 * result.seconds),
        "workers": sorted(set(pods["worker"])),
        "load_before": load,
    }


def loopback_round(args: argparse.Namespace, run_dir: Path, logs: Path) -> dict:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    processes = []
    try:
        with open(logs / "loopback.log", "ab") as out:
            processes.append(
                subprocess.Popen(
                    scheduler_argv("127.0.0.1", port, None),
                    env=process_env(),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            time.sleep(2.0)
            for name in ("w1", "w2"):
                processes.append(
                    subprocess.Popen(
                        worker_argv(address, "127.0.0.1", name, None),
                        env=process_env(),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        warm_up(address, TlsFiles(), args.dataset)
        return {"arrangement": "loopback", **tournament(address, TlsFiles(), args, run_dir)}
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=30)


def hosts_round(args: argparse.Namespace, run_dir: Path, logs: Path, certs: dict[str, Path]) -> dict:
    tls = TlsFiles(str(certs["ca"]), str(certs["client"]), str(certs["client-key"]))
    with HostLab(logs) as lab:
        for name in ("sched", "w1", "w2"):
            lab.add_host(name)
        host = lab.hosts["sched"].address
        address = f"tls://{host}:8786"
        lab.start("sched", scheduler_argv(host, 8786, certs), process_env(), "scheduler")
        sec = cluster.security(address, tls)

        def answers() -> bool:
            try:
                cluster.probe_scheduler(address, sec, timeout=2.0)
                return True
            except Exception:  # noqa: BLE001 - not up yet
                return False

        wait_until(answers, 60, step=0.5, what="the TLS scheduler")
        for name in ("w1", "w2"):
            lab.start(name, worker_argv(address, lab.hosts[name].address, name, certs), process_env(), name)
        warm_up(address, tls, args.dataset)
        return {"arrangement": "hosts", **tournament(address, tls, args, run_dir)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="synthetic-edge-minute")
    parser.add_argument("--pods", type=int, default=6)
    parser.add_argument("--pod-steps", type=int, default=8192)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2, help="Times each arrangement runs, alternating.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="Write the rows as JSON here.")
    args = parser.parse_args()
    missing = lab_available()
    if missing:
        sys.exit(f"cluster_hosts: {missing}")
    from market_envs.data import load

    load(args.dataset)  # build the cache once, outside the timings
    rows = []
    with tempfile.TemporaryDirectory(prefix="cluster-hosts-") as tmp:
        root = Path(tmp)
        certs = make_certificates(root / "certs")
        for round_ in range(args.rounds):
            for arrangement in ("loopback", "hosts"):
                run_dir = root / f"{arrangement}{round_}"
                logs = root / f"logs-{arrangement}{round_}"
                logs.mkdir()
                if arrangement == "loopback":
                    row = loopback_round(args, run_dir, logs)
                else:
                    row = hosts_round(args, run_dir, logs, certs)
                rows.append({"round": round_, **row})
                print(json.dumps(rows[-1]), flush=True)
    arrangements = ("loopback", "hosts")
    median = {a: statistics.median(r["pods_per_hour"] for r in rows if r["arrangement"] == a) for a in arrangements}
    busy = {a: statistics.median(r["busy"] for r in rows if r["arrangement"] == a) for a in arrangements}
    print(
        f"\n{args.pods} fresh PPO pods of {args.pod_steps:,} steps ({args.num_envs} envs) on {args.dataset}, "
        f"2 workers; {platform.machine()}, {os.cpu_count()} cores\n"
    )
    print("| round | arrangement | pods/h | wall s | median pod s | busy | load before |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['round']} | {row['arrangement']} | {row['pods_per_hour']:.1f} | {row['wall_s']:.0f} | "
            f"{row['median_pod_s']:.1f} | {row['busy']:.1%} | {row['load_before']:.2f} |"
        )
    print(
        f"\nhosts / loopback (medians): pods/h {median['hosts'] / median['loopback']:.1%}, "
        f"busy {busy['hosts'] / busy['loopback']:.1%}"
    )
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "median": median, "busy": busy}, indent=1))


if __name__ == "__main__":
    main()
