"""What the pod-group tests share: a small market panel and the check that two run directories hold
the same run (tests/test_group_training.py, tests/test_offpolicy_group.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch
from safetensors.torch import load_file

from market_fixtures import random_panel

TIMINGS = {"wall_time", "samples_per_s"}
"""A run's metrics columns that are the clock's, not the run's."""


def group_panel():
    """3 tickers, 90 one-minute bars: 60 to train, 15 to validate."""
    data = random_panel(n_tickers=3, n_bars=90, seed=1)
    stamps = data.timestamps
    return replace(data, meta={"train_end": stamps[60], "val_end": stamps[75]})


def assert_same_run(first: Path, second: Path) -> None:
    """Two run directories hold the same run: checkpoints bit for bit, records but for timings."""
    for name in ("best", "final"):
        a = load_file(first / "checkpoints" / f"{name}.safetensors")
        b = load_file(second / "checkpoints" / f"{name}.safetensors")
        assert a.keys() == b.keys()
        for key in a:
            if key != "rng":  # the agent's generator: a group draws from its row streams instead
                assert torch.equal(a[key], b[key]), (name, key)
    metrics = [pd.read_parquet(folder / "metrics.parquet").drop(columns=list(TIMINGS)) for folder in (first, second)]
    pd.testing.assert_frame_equal(*metrics)
    assert (first / "trials.parquet").exists() == (second / "trials.parquet").exists()
    if (first / "trials.parquet").exists():  # a market run's (a gymnasium run keeps none)
        trials = [pd.read_parquet(folder / "trials.parquet") for folder in (first, second)]
        pd.testing.assert_frame_equal(*trials)
