"""Shared test set-up: one torch thread, a quiet hypothesis profile, GPU skips."""

from __future__ import annotations

import os

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


@pytest.fixture(autouse=True)
def _isolated_data_dir(tmp_path_factory, monkeypatch):
    """Every test gets its own data/cache directory; nothing touches the user's cache."""
    monkeypatch.setenv("PODRACER_DATA_DIR", str(tmp_path_factory.mktemp("data-dir")))


@pytest.fixture
def native_kernel():
    """The test runs the C kernel: skipped where MARKET_ENVS_NATIVE=0 turns it off, failed where it
    is on and cannot be built (a machine without a compiler must say so, not pass in silence)."""
    from market_envs import native_fill

    if not native_fill.native_enabled():
        pytest.skip("MARKET_ENVS_NATIVE=0: the native kernel is turned off")
    if not native_fill.native_available():
        pytest.fail(
            "the native kernel could not be built: install a C compiler ($CC, default cc), or set "
            "MARKET_ENVS_NATIVE=0 to run on the torch kernels and skip the tests of the C kernel"
        )
