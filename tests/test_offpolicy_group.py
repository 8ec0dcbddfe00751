"""SAC and TD3 pod groups (issue 77): P off-policy pods trained as one program
(`trader.agents.offpolicy_group`, through `trader.group_training.train_group`).

The contract of tests/test_group_training.py for PPO: a pod trained in a group of P is bit for bit
the pod trained in a group of one with the same seed and config, whatever the other pods are; its
run directory loads alone.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from torch import Tensor

from group_fixtures import assert_same_run, group_panel
from trader.agents import make_agent
from trader.agents.checkpoint import load_agent, load_policy
from trader.agents.offpolicy_group import GROUP_RUNNERS
from trader.agents.population import aligned_bmm
from trader.errors import ConfigError
from trader.group_training import train_group
from trader.training_envs import build_envs

TINY = {"hidden_sizes": [16, 16], "batch_size": 8, "learning_starts": 32, "updates_per_step": 0.5}
TINY |= {"iteration_steps": 16, "buffer_size": 256}
CHANGED = {
    "sac": {"actor_lr": 3e-3, "critic_lr": 1e-3, "gamma": 0.5, "tau": 0.05, "reward_scale": 4.0, "alpha_lr": 1e-2}
    | {"init_alpha": 0.3, "max_grad_norm": 0.5},
    "td3": {"actor_lr": 3e-3, "critic_lr": 1e-3, "gamma": 0.5, "tau": 0.05, "reward_scale": 4.0, "policy_delay": 3}
    | {"policy_noise": 0.4, "noise_clip": 0.2, "exploration_noise": 0.3, "max_grad_norm": 0.5},
}
"""A pod's config perturbed in every per-row field the tournament's generator moves, and more."""
OTHERS = {
    "sac": [{"autotune_alpha": False}, {"target_entropy": -1.0, "log_std_min": -3.0}, {"actor_lr": 1e-3}],
    "td3": [{"policy_delay": 1}, {"preactivation_penalty": 0.1}, {"exploration_noise": 0.0}],
}
"""Other pods beside pod 0: rows whose temperature is fixed, whose actor updates every step, ..."""
ALGOS = ("sac", "td3")


@pytest.fixture(scope="module")
def panel():
    return group_panel()


def _group(algo, panel, root: Path, seeds: list[int], configs: list[dict] | None = None, **options) -> list:
    configs = configs or [TINY] * len(seeds)
    dirs = [root / f"seed-{seed}" for seed in seeds]
    options = {"steps": 128, "num_envs": 2, "eval_every": 64, **options}
    return train_group(algo, panel, configs, dirs, seeds=seeds, **options)


_same_run = assert_same_run


@pytest.mark.parametrize("pods", [4, 16])
@pytest.mark.parametrize("algo", ALGOS)
def test_a_pod_of_a_group_is_bit_for_bit_that_pod_in_a_group_of_one(panel, tmp_path: Path, algo, pods) -> None:
    alone = _group(algo, panel, tmp_path / "alone", [7])
    configs = [TINY] + [{**TINY, **OTHERS[algo][k % 3]} for k in range(pods - 1)]
    group = _group(algo, panel, tmp_path / "group", [7, *range(11, 10 + pods)], configs)
    _same_run(tmp_path / "alone" / "seed-7", tmp_path / "group" / "seed-7")
    assert group[0].best_score == alone[0].best_score
    assert len({result.best_score for result in group}) > 1  # the other pods are other pods
    final = load_file(tmp_path / "group" / "seed-7" / "checkpoints" / "final.safetensors")
    assert int(final["extra.num_updates"]) == (128 - 32) // 2 + 1  # 1 update a step of 2 envs from 32 on


@pytest.mark.parametrize("algo", ALGOS)
def test_every_pod_of_a_group_of_unaligned_rows_is_its_group_of_one(panel, tmp_path: Path, algo) -> None:
    """Every row, not only row 0, where a row's products are not a multiple of 64 bytes: a minibatch of
    7 through 10 units (280 bytes), 7 x 46 inputs, 7 x 3 actions (`population.aligned_bmm`)."""
    odd = {**TINY, "batch_size": 7, "hidden_sizes": [10, 10]}
    configs = [odd] + [{**odd, **other} for other in OTHERS[algo]]
    seeds = [7, 11, 13, 15]
    _group(algo, panel, tmp_path / "group", seeds, configs, steps=96)
    for seed, config in zip(seeds, configs, strict=True):
        _group(algo, panel, tmp_path / f"alone{seed}", [seed], [config], steps=96)
        _same_run(tmp_path / f"alone{seed}" / f"seed-{seed}", tmp_path / "group" / f"seed-{seed}")


def test_a_row_of_an_aligned_batched_product_is_that_row_alone() -> None:
    """Forward and both gradients: `torch.bmm`'s row 1 of [2, 7, 10] x [2, 10, 10] rounded otherwise
    than the same row alone on this CPU (its result starts 280 bytes in); `aligned_bmm`'s does not."""
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 7, 10, generator=generator), torch.randn(2, 10, 10, generator=generator)
    weights = torch.randn(2, 7, 10, generator=generator)

    def product(rows: slice) -> tuple[Tensor, ...]:
        x, y = a[rows].clone().requires_grad_(), b[rows].clone().requires_grad_()
        out = aligned_bmm(x, y)
        (out * weights[rows]).sum().backward()
        return out.detach()[-1], x.grad[-1], y.grad[-1]

    assert all(torch.equal(p, q) for p, q in zip(product(slice(0, 2)), product(slice(1, 2)), strict=True))


@pytest.mark.parametrize("algo", ALGOS)
def test_a_changed_pod_leaves_the_other_pods_as_they_were(panel, tmp_path: Path, algo) -> None:
    _group(algo, panel, tmp_path / "plain", [1, 2, 3])
    _group(algo, panel, tmp_path / "changed", [1, 2, 3], [TINY, {**TINY, **CHANGED[algo]}, TINY])
    for seed in (1, 3):
        _same_run(tmp_path / "plain" / f"seed-{seed}", tmp_path / "changed" / f"seed-{seed}")
    plain = load_file(tmp_path / "plain" / "seed-2" / "checkpoints" / "final.safetensors")
    moved = load_file(tmp_path / "changed" / "seed-2" / "checkpoints" / "final.safetensors")
    assert not torch.equal(plain["net.actor.net.0.weight"], moved["net.actor.net.0.weight"])
    assert not torch.equal(plain["net.target_critic.weights.0"], moved["net.target_critic.weights.0"])


@pytest.mark.parametrize("algo", ALGOS)
def test_a_pod_loads_alone_and_waited_for_learning_starts(panel, tmp_path: Path, algo) -> None:
    config = {**TINY, "learning_starts": 64, "normalize_obs": True}
    results = _group(algo, panel, tmp_path, [4, 5], [config, {**config, "actor_lr": 1e-3}])
    for seed, result in zip([4, 5], results, strict=True):
        root = tmp_path / f"seed-{seed}"
        metrics = pd.read_parquet(root / "metrics.parquet")
        assert metrics["step"].tolist() == [16.0 * k for k in range(1, 9)]
        assert metrics["updates"].tolist() == [0.0] * 3 + [1.0] + [8.0] * 4  # the first once 64 are in
        assert metrics["val_return"].notna().sum() == 2
        agent = load_agent(root / "checkpoints" / "final")
        assert agent.num_updates == 33 and float(agent.normalizer.count) == 2 + 128  # reset, then every step
        obs = torch.randn(3, agent.obs_dim)
        assert torch.equal(load_policy(root / "checkpoints" / "final").act(obs, True), result.agent.act(obs, True))
        steps = {int(state["step"]) for state in agent.optimizer.state_dict()["state"].values()}
        assert steps == ({33} if algo == "sac" else {33, 16})  # TD3's actor: every policy_delay = 2 updates
        assert agent.act(obs).shape == (3, agent.act_dim)


@pytest.mark.parametrize("algo", ALGOS)
def test_a_child_in_a_group_continues_from_its_parent(panel, tmp_path: Path, algo) -> None:
    _group(algo, panel, tmp_path / "parents", [1], steps=64, eval_every=0)
    parent = tmp_path / "parents" / "seed-1" / "checkpoints" / "final"
    fresh = _group(algo, panel, tmp_path / "fresh", [8, 9], steps=64, eval_every=0)
    child = _group(algo, panel, tmp_path / "child", [8, 9], init_from=[parent, None], steps=64, eval_every=0)
    _same_run(tmp_path / "fresh" / "seed-9", tmp_path / "child" / "seed-9")
    inherited = load_file(parent.with_suffix(".safetensors"))
    grown = load_file(tmp_path / "child" / "seed-8" / "checkpoints" / "final.safetensors")
    assert int(grown["extra.num_updates"]) == int(inherited["extra.num_updates"]) + 17  # its own 17 since
    assert fresh[0].best_score != child[0].best_score


def _runner(algo: str, panel, seeds: list[int], config: dict):
    envs = build_envs(panel, 2 * len(seeds), torch.device("cpu"), seeds[0])
    agents = [make_agent(algo, envs.train.obs_dim, envs.train.act_dim, config, seed=seed) for seed in seeds]
    return GROUP_RUNNERS[algo](agents, envs.train)


@pytest.mark.parametrize("algo", ALGOS)
def test_the_random_actions_before_learning_starts_are_each_pods_own(panel, algo) -> None:
    """Before ``learning_starts`` a pod's actions are uniform draws of its own stream: the same in a
    group of one and of two, others for another seed, in [-1, 1); nothing learns."""
    config = {**TINY, "learning_starts": 48}
    alone, pair = _runner(algo, panel, [3], config), _runner(algo, panel, [3, 4], config)
    before = [p.detach().clone() for p in pair.actor.parameters()]
    for runner in (alone, pair):
        for _ in range(23):  # 46 transitions a pod
            runner._collect_step()
            assert runner._learn_step() == 0
    own = alone.buffer.transitions().actions
    both = pair.buffer.transitions().actions.reshape(23, 2, 2, -1)  # [step, pod, env, action]
    assert torch.equal(own.reshape(23, 2, -1), both[:, 0])
    assert not torch.equal(both[:, 0], both[:, 1])
    assert bool((own >= -1).all()) and bool((own < 1).all()) and float(own.std()) > 0.5  # uniform's 0.58
    assert all(torch.equal(a, b) for a, b in zip(before, pair.actor.parameters(), strict=True))
    pair._collect_step()
    assert pair._learn_step() == 1  # 48 transitions: learning starts


@pytest.mark.parametrize(
    ("algo", "configs", "message"),
    [
        ("sac", [TINY, {**TINY, "batch_size": 16}], "differ in batch_size"),
        ("td3", [TINY, {**TINY, "learning_starts": 0}], "differ in learning_starts"),
        ("sac", [{**TINY, "network": "per_stock"}] * 2, "network='per_stock' is not stacked yet"),
        ("td3", [{**TINY, "num_learners": 2}] * 2, "num_learners=1"),
    ],
)
def test_pods_that_cannot_be_one_program_are_refused(panel, tmp_path: Path, algo, configs, message) -> None:
    with pytest.raises(ConfigError, match=message):
        train_group(algo, panel, configs, [tmp_path / "a", tmp_path / "b"], seeds=[0, 1], steps=16, num_envs=2)
