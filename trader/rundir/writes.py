"""Writes, whole or not at all: files and folders written under a temporary name, flushed, then
renamed into place (`write_atomic`, `write_json`, `stage_folder`, `commit_folder_once`, ...), and
the synced lines of ``events.jsonl`` (`append_json_line`)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trader.errors import writing
from trader.rundir.codec import json_ready, toml_ready


def make_folder(path: str | os.PathLike[str]) -> Path:
    """``mkdir -p path``; a place that cannot be written is an `UnwritableError` naming it."""
    path = Path(path)
    with writing(path):
        path.mkdir(parents=True, exist_ok=True)
    return path


def file_mode() -> int:
    """The mode an ordinary ``open(path, "w")`` gives a new file now: 0o666 less the
    process's umask (0o644 under umask 022). Read from /proc where Linux has it, which
    leaves the umask untouched; elsewhere set and restored at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: str | os.PathLike[str], write: Callable[[Path], object], mode: int | None = None) -> Path:
    """Have ``write(tmp)`` write the whole file at ``tmp``, then move it to ``path``.

    ``tmp`` is a fresh name in the same folder (so the rename is atomic), given the mode
    an ordinary ``open()`` would give the file under the current umask (`file_mode`, not
    mkstemp's 0600: a shared run folder stays readable by a dashboard of another account),
    or ``mode`` when given (a private key's 0600), flushed to disk before the rename; on any error it is removed and ``path`` is
    untouched. Parent folders are created. A place that cannot be written (a full disk, a
    read-only folder: `trader.errors.writing`) is one `UnwritableError` naming ``path``."""
    path = Path(path)
    make_folder(path.parent)
    with writing(path):
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        try:
            write(tmp)
            os.chmod(tmp, file_mode() if mode is None else mode)
            with open(tmp, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return path


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """A text file (UTF-8), whole or not at all."""
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json(path: str | os.PathLike[str], values: Any, *, indent: int = 2, sort_keys: bool = False) -> Path:
    """Strict JSON (non-finite floats become null), whole or not at all."""
    text = json.dumps(json_ready(values), indent=indent, sort_keys=sort_keys, allow_nan=False, default=str)
    return write_text(path, text + "\n")


def write_toml(path: str | os.PathLike[str], values: Mapping[str, Any]) -> Path:
    """A TOML file of `values` (through `toml_ready`), whole or not at all."""
    import tomli_w

    return write_text(path, tomli_w.dumps(toml_ready(dict(values))))


def write_parquet(path: str | os.PathLike[str], table: Any) -> Path:
    """A pandas DataFrame (without its index) or a pyarrow Table as Parquet, whole or not at all."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(table, pa.Table):
        return write_atomic(path, lambda tmp: pq.write_table(table, tmp))
    return write_atomic(path, lambda tmp: table.to_parquet(tmp, index=False))


def stage_folder(final: str | os.PathLike[str], *, unique: bool = False) -> Path:
    """A fresh, empty temporary folder beside ``final`` (``.tmp-<name>``) to fill
    before `commit_folder` moves it into place. A leftover of a killed writer is removed.

    ``unique``: a name of its own (``.tmp-<name>-<random>``) for each of several writers
    that may fill a folder for ``final`` at once (`commit_folder_once`); nothing is
    removed (`remove_staged` clears leftovers once no writer can be running)."""
    final = Path(final)
    if unique:
        final.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    staged = final.parent / f".tmp-{final.name}"
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    return staged


def commit_folder_once(staged: Path, final: str | os.PathLike[str]) -> bool:
    """Move a complete staged folder to ``final`` unless ``final`` already holds a
    folder with files; True when this one was moved. The loser's staged folder is removed.

    One ``rename``: POSIX renames a folder onto an absent or empty one and refuses a
    non-empty one, atomically, so of writers racing for ``final`` exactly one wins, and
    a writer killed mid-commit leaves either its whole folder at ``final`` or none."""
    try:
        os.rename(staged, final)
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        shutil.rmtree(staged, ignore_errors=True)
        return False
    return True


def remove_staged(parent: str | os.PathLike[str]) -> list[Path]:
    """Remove the staged folders (``.tmp-*``) that killed writers left in ``parent``;
    return them. Call it only when no writer can still be filling one."""
    gone = [path for path in Path(parent).glob(".tmp-*") if path.is_dir()]
    for path in gone:
        shutil.rmtree(path, ignore_errors=True)
    return gone


def commit_folder(staged: Path, final: str | os.PathLike[str]) -> Path:
    """Move a complete staged folder to ``final``, replacing an older one of that name.

    The old folder is first renamed aside, so ``final`` is at every moment either the
    old complete folder, absent, or the new complete one."""
    final = Path(final)
    old = final.parent / f".old-{final.name}"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(staged, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def append_json_line(path: str | os.PathLike[str], values: Mapping[str, Any]) -> dict[str, Any]:
    """Append one strict-JSON line to a log (``events.jsonl``) and sync it to disk;
    return the values as written. A crash can tear only this last line, which
    `read_json_lines` skips."""
    path = Path(path)
    values = json_ready(dict(values))
    line = json.dumps(values, sort_keys=True, allow_nan=False) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())
    return values


def repair_json_lines(path: str | os.PathLike[str]) -> int:
    """Cut a JSON-lines log back to its last complete line (a crash mid-append leaves a
    torn tail that the next append would otherwise join); return the bytes removed."""
    path = Path(path)
    if not path.is_file():
        return 0
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1
    if keep == len(data):
        return 0
    with path.open("r+b") as handle:
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
    return len(data) - keep
