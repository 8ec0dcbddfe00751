"""Certificates for a dask cluster's mutual TLS, for a team without its own PKI.

`make_certificates(folder)` writes a private certificate authority and one
certificate and key per role, all PEM:

    ca.pem                              the authority (give it to every machine)
    ca-key.pem                          its key (keep it off the cluster; it signs new certificates)
    scheduler.pem, scheduler-key.pem    for `dask scheduler --tls-cert/--tls-key`
    worker.pem, worker-key.pem          for `dask worker --tls-cert/--tls-key`
    client.pem, client-key.pem          for `trader tournament --tls-cert/--tls-key`

Dask checks that the peer's certificate is signed by the authority and does not check
host names (`distributed.security.Security` turns ``check_hostname`` off: clusters
are reached by IP address), so one worker certificate serves every worker machine.
Every certificate may serve and connect (dask's roles do both: the scheduler connects
to workers, workers serve each other). ``hosts`` adds names and IP addresses to the
certificates' subject alternative names for tools that do check them.

Keys are ECDSA P-256, written readable by their owner only; certificates are valid for
``days`` days. Nothing is overwritten: an existing file is an error.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

from trader import rundir
from trader.errors import UserError

ROLES = ("scheduler", "worker", "client")
CA_NAME = "podracer-trader cluster CA"


def certificate_files(folder: str | os.PathLike[str]) -> dict[str, Path]:
    """The files `make_certificates` writes, by name ("ca", "ca-key", "<role>", "<role>-key")."""
    folder = Path(folder)
    names = ["ca", "ca-key"] + [f"{role}{tail}" for role in ROLES for tail in ("", "-key")]
    return {name: folder / f"{name}.pem" for name in names}


def make_certificates(folder: str | os.PathLike[str], hosts: Sequence[str] = (), days: int = 365) -> dict[str, Path]:
    """Write a CA and a certificate and key per role into ``folder`` (created); return
    `certificate_files`. See the module docstring."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    if days < 1:
        raise UserError(f"--days must be >= 1, got {days}")
    files = certificate_files(folder)
    present = [str(path) for path in files.values() if path.exists()]
    if present:
        raise UserError(f"{present[0]} exists already: make certificates into an empty folder")
    names = _alternative_names(hosts)
    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, CA_NAME)])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key(), now, days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_pem(files["ca"], ca, private=False)
    _write_pem(files["ca-key"], ca_key, private=True)
    for role in ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, f"podracer-trader {role}")])
        builder = (
            _builder(subject, ca_name, key.public_key(), now, days)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.SERVER_AUTH, x509.ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        _write_pem(files[role], builder.sign(ca_key, hashes.SHA256()), private=False)
        _write_pem(files[f"{role}-key"], key, private=True)
    return files


def _builder(subject, issuer, public_key, now: dt.datetime, days: int):
    from cryptography import x509

    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))  # tolerate small clock differences between machines
        .not_valid_after(now + dt.timedelta(days=days))
    )


def _alternative_names(hosts: Sequence[str]) -> list:
    """Each host as an IP address entry when it parses as one, else as a DNS name."""
    from cryptography import x509

    names = []
    for host in (h.strip() for h in hosts):
        if not host:
            continue
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _write_pem(path: Path, item, private: bool) -> None:
    """A certificate (mode 0644) or an unencrypted private key (mode 0600), whole or not at all."""
    from cryptography.hazmat.primitives import serialization

    if private:
        data = item.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    else:
        data = item.public_bytes(serialization.Encoding.PEM)

    rundir.write_atomic(path, lambda tmp: tmp.write_bytes(data), mode=0o600 if private else 0o644)
