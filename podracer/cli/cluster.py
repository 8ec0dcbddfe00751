"""`trader cluster certs DIR`: a certificate authority and TLS certificates for a dask
cluster (`tournament.certs`), and the commands that use them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trader.names import name_list
from podracer.cli.root import app

cluster_app = typer.Typer(help="Set up a dask cluster for `trader tournament --scheduler`.", no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")


@cluster_app.command("certs")
def certs(
    folder: Annotated[Path, typer.Argument(help="Folder for the PEM files (created; must not hold them already).")],
    hosts: Annotated[
        str,
        typer.Option(
            "--hosts",
            help="Comma-separated host names or IP addresses to name in the certificates (dask itself checks only the CA).",
        ),
    ] = "",
    days: Annotated[int, typer.Option("--days", help="Validity of the certificates, in days.")] = 365,
) -> None:
    """Make a CA and a certificate and key for the scheduler, the workers and the client."""
    from tournament.certs import make_certificates

    files = make_certificates(folder, list(name_list(hosts, "--hosts")), days)
    print(f"wrote {', '.join(path.name for path in files.values())} into {folder}")
    print("keep ca-key.pem off the cluster; copy ca.pem and a role's pair to each machine:")
    for line in tls_commands(folder):
        print(f"  {line}")


def tls_commands(folder: Path) -> list[str]:
    """The scheduler, worker and tournament command lines with the certificates in ``folder``."""
    f = folder
    return [
        f"dask scheduler --protocol tls --tls-ca-file {f}/ca.pem --tls-cert {f}/scheduler.pem --tls-key {f}/scheduler-key.pem",
        f"dask worker tls://SCHEDULER:8786 --nthreads 1 --no-nanny --tls-ca-file {f}/ca.pem --tls-cert {f}/worker.pem --tls-key {f}/worker-key.pem",
        f"trader tournament RUN_DIR --scheduler tls://SCHEDULER:8786 --tls-ca {f}/ca.pem --tls-cert {f}/client.pem --tls-key {f}/client-key.pem",
    ]
