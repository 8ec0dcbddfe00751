"""Shared test set-up: one torch thread, a quiet hypothesis profile, GPU skips, and how
`make test`'s workers (pytest-xdist, ``-n``) share the tests out."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# One thread per process: on 2 cores torch's default made small ops erratic.
torch.set_num_threads(1)

settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    """Skip tests marked `gpu` when no CUDA device is present."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (none present)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


SHARED_FIXTURE = re.compile(
    r"@pytest\.fixture\((?:(?!\bdef\b).)*?\bscope\s*=\s*[\"'](?:class|module|package|session)[\"']", re.DOTALL
)
"""A fixture declared wider than one test (a module's tournament, backtest or cluster)."""


@functools.cache
def builds_shared_fixtures(path: Path) -> bool:
    """Whether the test file at `path` declares a class-, module- or session-scoped fixture."""
    try:
        return SHARED_FIXTURE.search(path.read_text()) is not None
    except OSError:
        return False


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: without xdist there is nothing to share out
def pytest_xdist_make_scheduler(config, log):
    """With ``-n`` and ``--dist loadgroup`` (as `make test` runs): a test file that declares a
    fixture wider than one test goes whole to one worker, which builds the fixture once instead
    of once per worker; the other tests are handed out one at a time, as ``--dist load`` does.

    pytest-xdist's own way, an ``xdist_group`` mark that it adds to each test id, does nothing
    on pytest 9.2 (pytest-dev/pytest-xdist#1386: the id it rewrites is no longer the one it
    reads), so the controller decides here from the test ids and the files' text; a group that
    xdist does read (an older pytest) still wins."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    root = config.rootpath

    class WholeFilesOfSharedFixtures(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            if scope != nodeid:  # an xdist_group suffix
                return scope
            path = nodeid.split("::")[0]
            return path if builds_shared_fixtures(root / path) else nodeid

    return WholeFilesOfSharedFixtures(config, log)


@pytest.fixture(autouse=True)
def _isolated_data_dir(tmp_path_factory, monkeypatch):
    """Every test gets its own data/cache directory; nothing touches the user's cache."""
    monkeypatch.setenv("PODRACER_DATA_DIR", str(tmp_path_factory.mktemp("data-dir")))
