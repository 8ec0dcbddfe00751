"""The run files' and the data cache's writers: files get the mode of an ordinary ``open()``
under the umask, and a place that cannot be written (a full disk, a read-only mount) is one
line naming the path, what was written before left whole."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from market_envs.data.cache import DataCache
from trader import rundir
from trader.errors import UnwritableError

from market_fixtures import random_panel

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640)])
def test_run_files_get_the_mode_of_an_ordinary_open(tmp_path: Path, umask: int, mode: int) -> None:
    from trader.agents import make_agent
    from trader.agents.checkpoint import save_checkpoint

    previous = os.umask(umask)
    try:
        paths = [
            rundir.write_text(tmp_path / "a.txt", "x"),
            rundir.write_json(tmp_path / "a.json", {"a": 1}),
            rundir.write_parquet(tmp_path / "a.parquet", pd.DataFrame({"a": [1.0]})),
            *save_checkpoint(make_agent("ppo", 3, 1, {"hidden_sizes": [4]}), tmp_path / "ck" / "best"),
        ]
        open(tmp_path / "plain.txt", "w").close()
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode) == mode
    for path in paths:
        assert stat.S_IMODE(path.stat().st_mode) == mode, path


def test_a_full_disk_leaves_the_old_file_whole(tmp_path: Path) -> None:
    path = rundir.write_text(tmp_path / "f.txt", "old")

    def fill(tmp: Path) -> None:
        tmp.write_text("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(UnwritableError, match=rf"^cannot write {path}: No space left on device$"):
        rundir.write_atomic(path, fill)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.txt"]
    with pytest.raises(OSError, match="boom"):  # a fault that is not the place's keeps its traceback
        rundir.write_atomic(path, lambda tmp: (_ for _ in ()).throw(OSError(errno.EIO, "boom")))


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "-rm", "true"], check=False, capture_output=True)
    return done.returncode == 0


READ_ONLY = """
import sys
from trader import rundir
from trader.errors import UserError
from market_envs.data.cache import DataCache
try:
    {call}
except UserError as err:
    print(err)
    sys.exit(2)
"""


@pytest.mark.slow
@pytest.mark.skipif(not _unshare_works(), reason="needs unshare -rm (a user namespace) to mount a folder read-only")
@pytest.mark.parametrize(
    ("call", "named"),
    [
        ("rundir.write_json(sys.argv[1] + '/run/config.json', {})", "run/config.json"),
        (
            "import pandas as pd; DataCache(sys.argv[1] + '/cache').save_frame('yahoo', 'k', pd.DataFrame({'a': [1]}))",
            "cache/downloads/yahoo/k.parquet",
        ),
    ],
)
def test_a_read_only_mount_is_one_line(tmp_path: Path, call: str, named: str) -> None:
    """A real read-only bind mount (chmod does not stop root): the run folder and the data cache."""
    (tmp_path / "run").mkdir()
    (tmp_path / "cache").mkdir()
    script = READ_ONLY.format(call=call)
    mount = f'mount --bind -o ro {tmp_path} {tmp_path} && exec {sys.executable} -c "$0" {tmp_path}'
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", mount, script],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    line = done.stdout.strip()
    assert line.startswith(f"cannot write {tmp_path / named}: Read-only file system"), line
    assert not any((tmp_path / "run").iterdir())


def test_a_data_cache_that_cannot_be_written_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EROFS (a read-only cache) and ENOSPC (a full one) while an entry is written: one line
    naming the entry and what to do; the entry already there is left whole."""
    cache = DataCache(tmp_path)
    panel = random_panel(n_tickers=2, n_bars=30, seed=0)
    cache.save_panel("k", panel)
    cache.save_frame("yahoo", "k", pd.DataFrame({"a": [1.0]}))

    def fail(code: int):
        def write(*args, **kwargs):
            raise OSError(code, os.strerror(code))

        return write

    monkeypatch.setattr(pd.DataFrame, "to_parquet", fail(errno.ENOSPC))
    with pytest.raises(
        UnwritableError,
        match=r"cannot write .*downloads/yahoo/k.parquet: No space left on device \(the data cache: set \$PODRACER_DATA_DIR",
    ):
        cache.save_frame("yahoo", "k", pd.DataFrame({"a": [2.0]}))
    assert cache.load_frame("yahoo", "k")["a"].tolist() == [1.0]
    monkeypatch.setattr("market_envs.data.cache._write_panel", fail(errno.EROFS))
    with pytest.raises(UnwritableError, match=r"cannot write .*panels/k: Read-only file system"):
        cache.save_panel("k", panel)
    assert cache.load_panel("k").num_bars == panel.num_bars
    assert [p.name for p in (tmp_path / "panels").iterdir()] == ["k"]  # no temporary left


@pytest.mark.slow
@pytest.mark.skipif(not _unshare_works(), reason="needs unshare -rm (a user namespace) to mount a small tmpfs")
def test_a_really_full_disk_is_one_line_and_keeps_the_old_file(tmp_path: Path) -> None:
    """A 64 KiB tmpfs, filled by a Parquet file: one line naming it; the file written before is whole."""
    script = READ_ONLY.format(
        call="import numpy as np, pandas as pd; rundir.write_text(sys.argv[1] + '/old.txt', 'old'); "
        "rundir.write_parquet(sys.argv[1] + '/m.parquet', pd.DataFrame({'a': np.random.rand(100_000)}))"
    )
    check = f"{sys.executable} -c \"import sys; sys.exit(open('{tmp_path}/old.txt').read() != 'old')\""
    mount = (
        f'mount -t tmpfs -o size=64k tmpfs {tmp_path} && {sys.executable} -c "$0" {tmp_path}; '
        f"code=$?; {check} && exit $code"
    )
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", mount, script],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout.strip() == f"cannot write {tmp_path / 'm.parquet'}: No space left on device"


def test_safetensors_own_error_of_a_full_disk_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """safetensors reports a full disk as its own error ('... (os error 28)'): still one line."""
    import torch
    from safetensors import SafetensorError

    import trader.agents.checkpoint as checkpoint

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(checkpoint, "save_file", full)
    path = tmp_path / "runner.safetensors"
    with pytest.raises(UnwritableError, match=rf"^cannot write {path}: No space left on device$"):
        checkpoint.write_tensors(path, {"a": torch.zeros(3)})
    assert not list(tmp_path.iterdir())
