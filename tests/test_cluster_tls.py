"""Mutual TLS on loopback: `trader cluster certs`, a TLS `LocalCluster`, and clients
with the right certificate, another authority's, or none.

The same over separate network namespaces is in tests/test_cluster_hosts.py.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tournament import cluster
from tournament.certs import certificate_files, make_certificates
from tournament.cluster import TlsFiles
from podracer.cli import main
from trader.errors import UserError

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> tuple[dict[str, Path], dict[str, Path]]:
    """(this cluster's certificates, another authority's)."""
    root = tmp_path_factory.mktemp("pki")
    return make_certificates(root / "ours", hosts=["127.0.0.1", "localhost"]), make_certificates(root / "theirs")


@pytest.fixture(scope="module")
def tls_cluster(pki):
    """A LocalCluster of one in-process worker, listening on tls://127.0.0.1 only."""
    ours = pki[0]
    sec = distributed.security.Security(
        tls_ca_file=str(ours["ca"]),
        tls_scheduler_cert=str(ours["scheduler"]),
        tls_scheduler_key=str(ours["scheduler-key"]),
        tls_worker_cert=str(ours["worker"]),
        tls_worker_key=str(ours["worker-key"]),
        tls_client_cert=str(ours["client"]),
        tls_client_key=str(ours["client-key"]),
        require_encryption=True,
    )
    with distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tls://",
        host="127.0.0.1",
        security=sec,
        dashboard_address=None,
        silence_logs=40,
    ) as local:
        yield local


def client_files(files: dict[str, Path]) -> TlsFiles:
    return TlsFiles(str(files["ca"]), str(files["client"]), str(files["client-key"]))


def test_certs_command_writes_a_ca_and_a_pair_per_role_keys_private(tmp_path: Path, capsys) -> None:
    from cryptography import x509

    folder = tmp_path / "certs"
    assert main(["cluster", "certs", str(folder), "--hosts", "10.213.0.2,sched.local", "--days", "30"]) == 0
    files = certificate_files(folder)
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in files.values())
    out = capsys.readouterr().out
    assert "dask scheduler --protocol tls" in out and "--tls-ca " in out and "dask worker tls://" in out
    ca = x509.load_pem_x509_certificate(files["ca"].read_bytes())
    for role in ("scheduler", "worker", "client"):
        cert = x509.load_pem_x509_certificate(files[role].read_bytes())
        cert.verify_directly_issued_by(ca)  # raises unless the CA signed it
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert [str(n.value) for n in names] == ["10.213.0.2", "sched.local"]
        assert stat.S_IMODE(os.stat(files[f"{role}-key"]).st_mode) == 0o600
        assert 29 <= (cert.not_valid_after_utc - cert.not_valid_before_utc).days <= 30
    assert main(["cluster", "certs", str(folder)]) == 2  # never overwrites
    assert "exists already" in capsys.readouterr().err


def test_a_client_with_the_cluster_certificate_runs_tasks_encrypted(tls_cluster, pki) -> None:
    address = tls_cluster.scheduler_address
    assert address.startswith("tls://127.0.0.1:")
    client = cluster.connect(scheduler=address, tls=client_files(pki[0]), timeout=5.0)
    try:
        assert client.security.require_encryption
        assert client.submit(sum, [1, 2, 3]).result(timeout=30) == 6
    finally:
        client.close()


@pytest.mark.parametrize("who", ["another authority's certificate", "a plain tcp:// client"])
def test_a_client_without_the_cluster_certificate_is_refused_in_one_line(tls_cluster, pki, who: str) -> None:
    port = tls_cluster.scheduler_address.rsplit(":", 1)[1]
    if who == "a plain tcp:// client":
        address, tls = f"tcp://127.0.0.1:{port}", TlsFiles()
    else:
        address, tls = tls_cluster.scheduler_address, client_files(pki[1])
    with pytest.raises(UserError) as caught:
        cluster.connect(scheduler=address, tls=tls, timeout=3.0)
    assert "\n" not in str(caught.value) and address in str(caught.value)
    if who == "another authority's certificate":
        assert "the TLS handshake failed" in str(caught.value) and "cluster's own CA" in str(caught.value)
    assert len(tls_cluster.scheduler.clients) == 1  # the cluster's own client only: nobody else got in


def test_dask_config_supplies_the_files_when_no_flags_are_given(tls_cluster, pki) -> None:
    import dask

    ours = pki[0]
    settings = {
        "distributed.comm.tls.ca-file": str(ours["ca"]),
        "distributed.comm.tls.client.cert": str(ours["client"]),
        "distributed.comm.tls.client.key": str(ours["client-key"]),
    }
    with dask.config.set(settings):
        client = cluster.connect(scheduler=tls_cluster.scheduler_address, timeout=5.0)
    try:
        assert client.submit(max, [4, 9]).result(timeout=30) == 9
    finally:
        client.close()
    with pytest.raises(UserError, match="needs --tls-ca, --tls-cert, --tls-key"):
        cluster.connect(scheduler=tls_cluster.scheduler_address, timeout=5.0)
