"""Locomotion through the same paths as the market: Ant-v5 with PPO, SAC and TD3, Humanoid-v5.

`trader.train` and `trader train --env Ant-v5` (Humanoid-v5, and a group of seeds:
``--population``) run a few updates of each algorithm
(the weights move, the run directory is complete, the validation score is a mean
episode return), and a tiny tournament on Ant-v5 completes on 2 local dask workers.
benchmarks/locomotion.py measures learning; these only prove the plumbing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from trader.agents import make_agent
from trader.agents.checkpoint import load_policy
from podracer.cli import main
from trader.training import train

TINY = {
    "ppo": {"num_steps": 32, "update_epochs": 2, "num_minibatches": 2, "hidden_sizes": [32]},
    "sac": {"hidden_sizes": [32], "learning_starts": 64, "iteration_steps": 64, "batch_size": 32},
    "td3": {"hidden_sizes": [32], "learning_starts": 64, "iteration_steps": 64, "batch_size": 32},
}
"""Small networks and batches: a few updates in a second or two."""


@pytest.mark.parametrize("algo", ["ppo", "sac", "td3"])
def test_each_algorithm_trains_on_ant(algo: str, tmp_path: Path) -> None:
    result = train(algo, "Ant-v5", TINY[algo], tmp_path, steps=256, num_envs=4, eval_every=0, eval_episodes=2)
    metrics = pd.read_parquet(tmp_path / "metrics.parquet")
    assert metrics["step"].iloc[-1] == 256
    assert math.isfinite(metrics["val_score"].iloc[-1])  # mean return of 2 episodes
    obs = torch.randn(5, 105)
    policy = load_policy(tmp_path / "checkpoints" / "final")
    assert policy.act(obs, True).shape == (5, 8)
    untrained = make_agent(algo, 105, 8, TINY[algo], seed=0).state_dict()  # train's seed: 0
    trained = result.agent.state_dict()
    weights = [key for key in untrained if key.startswith("net.") and untrained[key].is_floating_point()]
    assert weights
    moved = [key for key in weights if not torch.equal(trained[key], untrained[key])]
    assert moved, "no weight changed: no update ran"


@pytest.mark.parametrize(("env", "population"), [("Ant-v5", None), ("Humanoid-v5", None), ("Ant-v5", 2)])
def test_cli_trains_on_ant_and_humanoid(env: str, population: int | None, tmp_path: Path, capsys) -> None:
    config = tmp_path / "sac.toml"
    config.write_text("hidden_sizes = [32]\nlearning_starts = 64\niteration_steps = 64\nbatch_size = 32\n")
    arguments = ["train", "--algo", "sac", "--env", env, "--steps", "128", "--num-envs", "2", "--eval-episodes", "1"]
    arguments += ["--config", str(config), str(tmp_path / "run")]
    code = main(arguments + ([] if population is None else ["--population", str(population)]))
    assert code == 0, capsys.readouterr().err
    runs = [tmp_path / "run"] if population is None else [tmp_path / "run" / f"seed-{k}" for k in range(population)]
    for run in runs:  # a seed of a group is a run directory of its own
        assert (run / "checkpoints" / "best.safetensors").is_file()


@pytest.mark.slow
def test_a_tiny_tournament_on_ant_completes(tmp_path: Path) -> None:
    """Three pods (one per algorithm) on 2 worker processes, scored by mean return (slow:
    about 20 s, most of it the cluster's start and each pod's five 1,000-step episodes)."""
    config = tmp_path / "tournament.toml"
    lines = [
        f"[algo_configs.{algo}]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in keys.items())
        for algo, keys in TINY.items()
    ]
    config.write_text("\n".join(lines))
    run_dir = tmp_path / "run"
    code = main(
        [
            "tournament",
            str(run_dir),
            "--env",
            "Ant-v5",
            "--algos",
            "ppo,sac,td3",
            "--pods",
            "3",
            "--pod-steps",
            "256",
            "--num-envs",
            "4",
            "--workers",
            "2",
            "--config",
            str(config),
        ]
    )
    assert code == 0
    pods = pd.read_parquet(run_dir / "pods.parquet")
    assert len(pods) == 3 and set(pods["status"]) == {"finished"}
    assert pods["score"].map(math.isfinite).all()
    board = json.loads((run_dir / "leaderboard.json").read_text())
    assert board
