"""The time budget as a pod's deadline: pods running at the budget stop, are validated
and ranked; a pod that would start past it trains nothing and is run again on resume."""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import pandas as pd
import pytest

from market_fixtures import write_tiny_recipe
from test_pod_idempotent import spec_for
from tournament.config import TournamentConfig
from tournament.orchestrator import TournamentState, record
from tournament.pod import PodResult, pod_dir, train_pod


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Path:
    return write_tiny_recipe(tmp_path_factory.mktemp("deadline"))


def test_a_pod_that_would_start_past_its_deadline_trains_nothing(recipe: Path, tmp_path: Path) -> None:
    spec = dataclasses.replace(spec_for(recipe), deadline=time.time() - 1.0)
    result = train_pod(spec, str(tmp_path))
    assert result.status == "cancelled" and result.steps == 0 and result.checkpoint is None
    assert not pod_dir(tmp_path, spec.pod_id).exists()
    assert not (tmp_path / "pods").exists() or not any((tmp_path / "pods").iterdir())  # no staged folder left


def test_a_pod_stops_at_its_deadline_and_is_validated(recipe: Path, tmp_path: Path) -> None:
    steps = 10**8  # far more than the seconds allow
    spec = dataclasses.replace(spec_for(recipe), steps=steps, deadline=time.time() + 3.0)
    result = train_pod(spec, str(tmp_path))
    assert result.status == "finished", result.error
    assert 0 < result.steps < steps
    assert result.score is not None and result.score_history and result.score_history[-1][0] == result.steps
    assert (tmp_path / result.checkpoint).with_suffix(".json").is_file()
    assert result.end <= spec.deadline + 60  # one iteration and one validation past it, not the steps


def test_a_pod_cancelled_at_its_start_stays_in_flight_for_a_resume(tmp_path: Path) -> None:
    config = TournamentConfig(run_dir=str(tmp_path), env="Pendulum-v1", time_budget=60, population=2)
    state = TournamentState(config)
    spec = spec_for(tmp_path, "p0000")
    state.submitted(spec)
    now = time.time()
    record(state, spec, PodResult("p0000", "cancelled", start=now, end=now))
    assert state.results == {} and state.cancelled == {"p0000"}
    frame = pd.read_parquet(tmp_path / "pods.parquet")
    assert frame["status"].tolist() == ["cancelled"] and math.isnan(frame["score"].iloc[0])
    replayed = TournamentState.replay(config)
    assert [s.pod_id for s in replayed.in_flight()] == ["p0000"] and replayed.cancelled == {"p0000"}
