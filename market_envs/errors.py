"""Errors a user can act on, shared by every layer.

They live here, in the lowest layer, so that `market_envs` depends on nothing above
it; `trader.errors` re-exports them (the same classes) and adds the trader's own.
Every error the CLI turns into exit code 2 and a one-line message (no traceback)
derives from `UserError`. `market_envs.data.DataError` is one of them.

`writing` is the one place an `OSError` of a place that cannot be written (a full disk, a
read-only mount, a folder without write permission) becomes such a line: the run files'
writers (`trader.rundir`) and the data cache write through it.
"""

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager


class UserError(ValueError):
    """Bad input from the user: a config key, a file, a period, a checkpoint.

    The message names what is wrong and where (file, ticker, timestamp, key).
    """


class ConfigError(UserError):
    """A configuration value or combination that cannot work.

    :param key: the config field to blame, when the message starts with its name ("population
        must be >= 1"): the CLI names the flag that sets it instead ("--population must be >= 1";
        `podracer.cli.main`), the Python API keeps the field's name.
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class UnwritableError(UserError):
    """A file or folder that cannot be written (one of `DISK_ERRNOS`): the message names the
    path and the cause; what was written before is intact (the writers are atomic)."""


DISK_ERRNOS = frozenset(
    code
    for code in (errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG)
    if code is not None
)
"""The errors of a place that cannot be written: a full disk or quota, a read-only mount, a
folder without write permission, a file too big. The user's to fix, so one line naming the
path, never a traceback."""


@contextmanager
def writing(path: str | os.PathLike[str], hint: str = "") -> Iterator[None]:
    """Turn an `OSError` of `DISK_ERRNOS` raised inside into one `UnwritableError` naming
    ``path``, the cause and ``hint`` (what to do, when the caller knows); any other error
    passes unchanged, with its traceback."""
    try:
        yield
    except OSError as err:
        if err.errno not in DISK_ERRNOS:
            raise
        raise UnwritableError(f"cannot write {path}: {os.strerror(err.errno)}{hint}") from None
