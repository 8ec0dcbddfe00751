"""Pod groups (issue 77): P pods trained as one program (`trader.group_training.train_group`), on a
market and on a gymnasium env.

The contract: a pod trained in a group of P is bit for bit the pod trained alone in a group of
one with the same seed and config, whatever the other pods are (their seeds, their
hyperparameters); its run directory is an ordinary run directory that loads alone.
"""

from __future__ import annotations

import json
import math
import signal
import tomllib
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from group_fixtures import assert_same_run, group_panel
from podracer.cli import main
from trader.agents import make_agent
from trader.agents.checkpoint import load_agent, load_policy, read_metadata
from trader.agents.evaluator import GroupValidation
from trader.errors import ConfigError
from trader.group_training import train_group
from trader.stopping import Interrupted, StopRequest
from trader.training_envs import build_envs

TINY = {"num_steps": 8, "update_epochs": 2, "num_minibatches": 2, "hidden_sizes": [16, 16]}


@pytest.fixture(scope="module")
def panel():
    return group_panel()


def _group(panel, root: Path, seeds: list[int], configs: list[dict] | None = None, **options) -> list:
    configs = configs or [TINY] * len(seeds)
    dirs = [root / f"seed-{seed}" for seed in seeds]
    options = {"steps": 64, "num_envs": 2, "eval_every": 32, **options}
    return train_group("ppo", panel, configs, dirs, seeds=seeds, **options)


_same_run = assert_same_run


@pytest.mark.parametrize("pods", [4, 16])
def test_a_pod_of_a_group_is_bit_for_bit_that_pod_in_a_group_of_one(panel, tmp_path: Path, pods: int) -> None:
    alone = _group(panel, tmp_path / "alone", [7])
    others = [11 + 2 * k for k in range(pods - 1)]
    rates = [1e-3, 3e-3, 1e-4]
    configs = [TINY] + [{**TINY, "learning_rate": rates[k % 3], "clip_coef": 0.1 + 0.01 * k} for k in range(pods - 1)]
    group = _group(panel, tmp_path / "group", [7, *others], configs)
    _same_run(tmp_path / "alone" / "seed-7", tmp_path / "group" / "seed-7")
    assert group[0].best_score == alone[0].best_score
    assert len({result.best_score for result in group}) > 1  # the other pods are other pods


@pytest.mark.parametrize("pass_rows", [32_768, 10])
def test_per_stock_pods_group_bit_for_bit_too(panel, tmp_path: Path, monkeypatch, pass_rows: int) -> None:
    """Also where a CPU pass holds fewer network rows than a pod's minibatch (``pass_rows`` 10: each
    pod's minibatch in pieces, one pod a pass), as the demo's per-stock pods run."""
    monkeypatch.setattr("trader.agents.ppo_group.PASS_ROWS", pass_rows)
    per_stock = {**TINY, "network": "per_stock", "ent_coef": 0.01}
    _group(panel, tmp_path / "alone", [3], [per_stock])
    configs = [per_stock, {**per_stock, "learning_rate": 1e-3}, {**per_stock, "gae_lambda": 0.8}]
    _group(panel, tmp_path / "group", [3, 4, 5], configs)
    _same_run(tmp_path / "alone" / "seed-3", tmp_path / "group" / "seed-3")
    agent = load_agent(tmp_path / "group" / "seed-4" / "checkpoints" / "final")
    assert agent.config.network == "per_stock" and agent.actor.log_std.shape == (1,)


def test_a_changed_pod_leaves_the_other_pods_as_they_were(panel, tmp_path: Path) -> None:
    _group(panel, tmp_path / "plain", [1, 2, 3])
    changed = {**TINY, "learning_rate": 3e-2, "ent_coef": 0.01, "gamma": 0.5, "reward_scale": 4.0}
    _group(panel, tmp_path / "changed", [1, 2, 3], [TINY, changed, TINY])
    for seed in (1, 3):
        _same_run(tmp_path / "plain" / f"seed-{seed}", tmp_path / "changed" / f"seed-{seed}")
    plain = load_file(tmp_path / "plain" / "seed-2" / "checkpoints" / "final.safetensors")
    moved = load_file(tmp_path / "changed" / "seed-2" / "checkpoints" / "final.safetensors")
    assert not torch.equal(plain["net.actor.mean.0.weight"], moved["net.actor.mean.0.weight"])


def test_a_pod_is_an_ordinary_run_directory(panel, tmp_path: Path) -> None:
    results = _group(panel, tmp_path, [4, 5])
    for row, (seed, result) in enumerate(zip([4, 5], results, strict=True)):
        root = tmp_path / f"seed-{seed}"
        config = tomllib.loads((root / "config.toml").read_text())
        assert config["seed"] == seed and config["num_envs"] == 2 and config["group"] == {"size": 2, "row": row}
        assert (root / "dataset.json").is_file() and not (root / "resume").exists()
        metrics = pd.read_parquet(root / "metrics.parquet")
        assert metrics["step"].tolist() == [16.0, 32.0, 48.0, 64.0]
        assert metrics["val_return"].notna().sum() == 2  # validated at steps 32 and 64
        agent = load_agent(root / "checkpoints" / "final")
        obs = torch.randn(3, agent.obs_dim)
        assert torch.equal(load_policy(root / "checkpoints" / "final").act(obs, True), result.agent.act(obs, True))
        assert (
            agent.optimizer.state_dict()["state"][0]["step"] == metrics["epochs_run"].sum() * 2
        )  # its Adam, its steps


def test_the_group_pass_scores_each_pod_as_its_own_pass_does(panel) -> None:
    envs = build_envs(panel, 2, torch.device("cpu"), 0)
    agents = [make_agent("ppo", envs.train.obs_dim, envs.train.act_dim, TINY, seed=seed) for seed in range(3)]
    for seed, agent in enumerate(agents):  # pods that learned apart: other normalisers, other weights
        agent.normalizer.update(torch.randn(50, agent.obs_dim) * (1 + seed))
        with torch.no_grad():  # an untrained actor's outputs are near 0: no trades
            agent.actor.mean[-1].weight.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(seed))
    records = GroupValidation(envs.evaluator, 3).records(agents)
    for agent, record in zip(agents, records, strict=True):
        own, grouped = envs.evaluator.evaluate(agent), envs.evaluator.score(record)
        assert own.keys() == grouped.keys()
        for key, value in own.items():
            assert grouped[key] == pytest.approx(value, rel=1e-5, abs=1e-9, nan_ok=True), key
        assert own["return"] != 0 and own["bar_sharpe"] == own["bar_sharpe"]  # a pass that traded, a defined score


def test_a_child_in_a_group_continues_from_its_parent(panel, tmp_path: Path) -> None:
    _group(panel, tmp_path / "parents", [1])
    parent = tmp_path / "parents" / "seed-1" / "checkpoints" / "best"
    fresh = _group(panel, tmp_path / "fresh", [8, 9], steps=16, eval_every=0)
    child = _group(panel, tmp_path / "child", [8, 9], init_from=[parent, None], steps=16, eval_every=0)
    _same_run(tmp_path / "fresh" / "seed-9", tmp_path / "child" / "seed-9")
    inherited = load_file(parent.with_suffix(".safetensors"))["normalizer.count"]
    grown = load_file(tmp_path / "child" / "seed-8" / "checkpoints" / "final.safetensors")["normalizer.count"]
    assert float(grown) == float(inherited) + 16  # the parent's statistics, then its own rollout's
    assert fresh[0].best_score != child[0].best_score


@pytest.mark.parametrize(
    ("algo", "configs", "message"),
    [
        ("a2c", [{}, {}], "a2c pods do not train in groups yet"),
        ("ppo", [TINY, {**TINY, "num_minibatches": 4}], "differ in num_minibatches"),
        ("ppo", [TINY, {**TINY, "network": "per_stock"}], "differ in network"),
    ],
)
def test_pods_that_cannot_be_one_program_are_refused(panel, tmp_path: Path, algo, configs, message) -> None:
    with pytest.raises(ConfigError, match=message):
        train_group(algo, panel, configs, [tmp_path / "a", tmp_path / "b"], seeds=[0, 1], steps=16, num_envs=2)
    with pytest.raises(ConfigError, match="one entry per pod"):
        train_group("ppo", panel, [TINY], [tmp_path / "a", tmp_path / "b"], seeds=[0], steps=16)
    with pytest.raises(ConfigError, match="not on a StockTradingVecEnv"):
        env = build_envs(panel, 2, torch.device("cpu"), 0).train
        train_group("ppo", env, [TINY], [tmp_path / "p"], seeds=[0], steps=16)
    with pytest.raises(ConfigError, match="not on 'warp:Ant-v5'"):  # refused before any env is built
        train_group("sac", "warp:Ant-v5", [{}], [tmp_path / "w"], seeds=[0], steps=16)


def test_trader_train_population_trains_the_seeds_as_a_group(tmp_path: Path, capsys) -> None:
    config = tmp_path / "ppo.toml"
    config.write_text("num_steps = 8\nupdate_epochs = 1\nnum_minibatches = 2\nhidden_sizes = [8]\n")
    arguments = ["train", str(tmp_path / "pop"), "--algo", "ppo", "--dataset", "synthetic-edge-daily"]
    arguments += ["--steps", "32", "--num-envs", "2", "--eval-every", "16", "--config", str(config)]
    assert main([*arguments, "--population", "3", "--seed", "5"]) == 0
    err = capsys.readouterr().err
    summary = json.loads((tmp_path / "pop" / "population.json").read_text())
    defined = sum(pod["best_score"] is not None and math.isfinite(pod["best_score"]) for pod in summary["pods"])
    assert "3 seeds (5 to 7) as one pod group" in err and f"IQM of {defined} seeds" in err
    assert [pod["seed"] for pod in summary["pods"]] == [5, 6, 7] and summary["group_size"] == 3
    assert summary["iqm"]["low"] <= summary["iqm"]["value"] <= summary["iqm"]["high"]
    for seed in (5, 6, 7):
        assert (tmp_path / "pop" / f"seed-{seed}" / "checkpoints" / "best.safetensors").is_file()
    assert main([*arguments[:2], "--algo", "ppo", "--dataset", "synthetic-edge-daily", "--population", "0"]) == 2
    assert "--population must be >= 1, got 0" in capsys.readouterr().err
    per_stock = tmp_path / "sac.toml"
    per_stock.write_text('network = "per_stock"\n')
    sac = ["train", str(tmp_path / "sac"), "--algo", "sac", "--dataset", "synthetic-edge-daily", "--population", "2"]
    assert main([*sac, "--config", str(per_stock)]) == 2
    assert "a SAC group trains network='mlp' pods" in capsys.readouterr().err
    warp = ["train", str(tmp_path / "warp"), "--algo", "sac", "--env", "warp:Ant-v5", "--population", "2"]
    assert main(warp) == 2
    assert (
        "--population: pod groups train on a market or a gymnasium id, not on 'warp:Ant-v5'" in capsys.readouterr().err
    )
    assert not (tmp_path / "warp").exists()


GYM_SAC = {"learning_starts": 64, "batch_size": 32, "hidden_sizes": [16, 16], "iteration_steps": 32}


@pytest.mark.parametrize(("algo", "config"), [("sac", GYM_SAC), ("ppo", {**TINY, "num_steps": 16})])
def test_on_a_gymnasium_env_a_pod_of_a_group_is_that_pod_in_a_group_of_one(tmp_path: Path, algo, config) -> None:
    options = {"steps": 192, "num_envs": 2, "eval_every": 96, "eval_episodes": 2}
    alone = train_group(algo, "Pendulum-v1", [config], [tmp_path / "alone"], seeds=[4], **options)
    other = {**config, "gamma": 0.9}
    dirs = [tmp_path / f"g{k}" for k in range(3)]
    group = train_group(algo, "Pendulum-v1", [other, config, config], dirs, seeds=[3, 4, 5], **options)
    _same_run(tmp_path / "alone", tmp_path / "g1")
    assert group[1].best_score == alone[0].best_score
    assert len({result.best_score for result in group}) == 3  # other seeds' episodes, other pods
    written = tomllib.loads((tmp_path / "g1" / "config.toml").read_text())
    assert written["env"] == {"kind": "gymnasium", "id": "Pendulum-v1", "eval_episodes": 2}
    assert written["num_envs"] == 2 and written["group"] == {"size": 3, "row": 1}
    policy = load_policy(tmp_path / "g1" / "checkpoints" / "best")
    assert policy.act(torch.zeros(1, 3)).shape == (1, 1)  # the pod loads alone


def test_trader_train_population_on_a_gymnasium_env(tmp_path: Path, capsys) -> None:
    config = tmp_path / "sac.toml"
    config.write_text("learning_starts = 32\nbatch_size = 16\nhidden_sizes = [8]\niteration_steps = 32\n")
    arguments = ["train", str(tmp_path / "pop"), "--algo", "sac", "--env", "Pendulum-v1", "--steps", "64"]
    arguments += ["--num-envs", "2", "--eval-every", "32", "--eval-episodes", "2", "--config", str(config)]
    assert main([*arguments, "--population", "2"]) == 0
    assert "2 seeds (0 to 1) as one pod group" in capsys.readouterr().err
    summary = json.loads((tmp_path / "pop" / "population.json").read_text())
    assert [pod["seed"] for pod in summary["pods"]] == [0, 1]
    assert all(math.isfinite(pod["best_score"]) for pod in summary["pods"])


def test_a_stopped_group_keeps_every_pods_records_and_best_snapshot(panel, tmp_path: Path) -> None:
    stop = StopRequest()

    def hook(row: dict[str, float]) -> None:
        if row["step"] == 48:
            stop.request(signal.SIGTERM)

    with pytest.raises(Interrupted) as caught:
        _group(panel, tmp_path, [1, 2], stop=stop, on_iteration=hook)
    assert caught.value.step == 48
    for seed in (1, 2):
        root = tmp_path / f"seed-{seed}"
        assert pd.read_parquet(root / "metrics.parquet")["step"].tolist() == [16.0, 32.0, 48.0]
        assert read_metadata(root / "checkpoints" / "best")["info"]["step"] == 32
        assert not (root / "resume").exists()  # a group does not resume yet


@pytest.mark.slow
def test_a_compiled_validation_pass_scores_a_group_as_the_eager_one(panel, tmp_path: Path) -> None:
    eager = _group(panel, tmp_path / "eager", [1, 2])
    compiled = _group(panel, tmp_path / "compiled", [1, 2], compile="validation")
    for a, b in zip(eager, compiled, strict=True):
        columns = [c for c in a.metrics.columns if c.startswith("val_")]
        pd.testing.assert_frame_equal(a.metrics[columns], b.metrics[columns], rtol=1e-5)
    with pytest.raises(ConfigError, match='compile="all"'):
        _group(panel, tmp_path / "all", [1], compile="all")


def test_rows_with_their_own_epochs_early_stop_and_schedule_are_each_their_group_of_one(panel, tmp_path) -> None:
    """The per-row update rules: a row stops its epochs at its own ``update_epochs`` or at its own
    ``target_kl`` (its Adam then leaves it as it is), and anneals its own learning rate."""
    configs = [
        {**TINY, "update_epochs": 4},
        {**TINY, "update_epochs": 4, "target_kl": 1e-6},  # stops early
        {**TINY, "anneal_lr": True, "total_steps": 64, "learning_rate": 1e-3},
    ]
    _group(panel, tmp_path / "group", [1, 2, 3], configs)
    for seed, config in zip([1, 2, 3], configs, strict=True):
        _group(panel, tmp_path / f"alone{seed}", [seed], [config])
        _same_run(tmp_path / f"alone{seed}" / f"seed-{seed}", tmp_path / "group" / f"seed-{seed}")
    epochs = [pd.read_parquet(tmp_path / "group" / f"seed-{s}" / "metrics.parquet")["epochs_run"] for s in (1, 2)]
    assert epochs[0].tolist() == [4.0] * 4 and epochs[1].iloc[0] == 1.0 and (epochs[1] < 4).all()
    rates = pd.read_parquet(tmp_path / "group" / "seed-3" / "metrics.parquet")["learning_rate"].tolist()
    assert rates == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4])
