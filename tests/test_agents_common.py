"""The shared agent layer: normaliser, flat state, registry (the config codec: test_rundir.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from trader.agents import ALGOS, get_spec, make_agent
from trader.agents.base import Agent, load_optimizer_tensors, optimizer_tensors, seeded
from trader.agents.normalizer import ObsNormalizer
from trader.errors import CheckpointError, ConfigError, UserError


# --------------------------------------------------------------------------- normaliser


def test_normalizer_matches_numpy_over_batches() -> None:
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 4)) for n in (1, 7, 50, 3)]
    norm = ObsNormalizer(4)
    for batch in batches:
        norm.update(torch.as_tensor(batch, dtype=torch.float32))
    everything = np.concatenate(batches).astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(norm.mean.numpy(), everything.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(norm.var.numpy(), everything.var(axis=0), rtol=1e-9)
    assert float(norm.count) == len(everything)


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
)
def test_normalizer_property_any_batching(sizes: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    data = rng.normal(rng.uniform(-5, 5), rng.uniform(0.1, 4), size=(sum(sizes), 3))
    norm = ObsNormalizer(3)
    start = 0
    for size in sizes:
        norm.update(torch.as_tensor(data[start : start + size], dtype=torch.float64))
        start += size
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(axis=0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(norm.var.numpy(), data.var(axis=0), rtol=1e-8, atol=1e-12)


def test_normalizer_normalizes_and_clips() -> None:
    norm = ObsNormalizer(2, clip=3.0)
    norm.update(torch.tensor([[0.0, 10.0], [2.0, 10.0]]))
    out = norm.normalize(torch.tensor([[1.0, 10.0], [100.0, 10.0]]))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out[0], torch.tensor([0.0, 0.0]))
    assert float(out[1, 0]) == 3.0  # clipped


def test_normalizer_disabled_is_identity_and_state_round_trip() -> None:
    off = ObsNormalizer(2, enabled=False)
    off.update(torch.ones(5, 2) * 7)
    x = torch.randn(3, 2)
    assert torch.equal(off.normalize(x), x)
    on = ObsNormalizer(2)
    on.update(torch.randn(10, 2))
    other = ObsNormalizer(2)
    other.load_state_dict(on.state_dict())
    assert torch.equal(other.normalize(x), on.normalize(x))
    with pytest.raises(ConfigError, match="last dimension"):
        on.update(torch.randn(4, 3))
    with pytest.raises(ConfigError, match="shape"):
        ObsNormalizer(3).load_state_dict(on.state_dict())


# --------------------------------------------------------------------------- flat state


@dataclass(frozen=True)
class _ToyConfig:
    hidden: tuple[int, ...] = (8, 8)
    """Hidden sizes."""
    lr: float = 1e-3
    """Learning rate."""


class _ToyAgent(Agent):
    algo = "toy"
    config_cls = _ToyConfig

    def __init__(self, obs_dim: int, act_dim: int, config: Any, device: Any = "cpu", seed: int = 0):
        super().__init__(obs_dim, act_dim, config, device, seed)
        with seeded(seed):
            self.net = nn.Linear(obs_dim, act_dim)
        self.optim = torch.optim.Adam(self.net.parameters(), lr=config.lr)

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        return torch.tanh(self.net(self.normalizer.normalize(obs)))

    def update(self, batch: Any) -> dict[str, float]:
        loss = self.act(batch).pow(2).mean()
        self.optim.zero_grad()
        loss.backward()
        self.optim.step()
        return {"loss": float(loss.detach())}

    def modules(self) -> dict[str, nn.Module]:
        return {"policy": self.net}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"policy": self.optim}


def test_seeded_init_is_reproducible_and_leaves_global_rng() -> None:
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b = _ToyAgent(3, 2, _ToyConfig(), seed=5), _ToyAgent(3, 2, _ToyConfig(), seed=5)
    assert torch.equal(a.net.weight, b.net.weight)
    assert not torch.equal(a.net.weight, _ToyAgent(3, 2, _ToyConfig(), seed=6).net.weight)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_flat_state_round_trip_includes_adam_moments() -> None:
    agent = _ToyAgent(3, 2, _ToyConfig())
    obs = torch.randn(16, 3)
    agent.normalizer.update(obs)
    for _ in range(3):
        agent.update(obs)
    state = agent.state_dict()
    assert {"net.policy.weight", "normalizer.mean", "optim.policy.group0.lr"} <= set(state)
    assert "optim.policy.0.exp_avg_sq" in state
    fresh = _ToyAgent(3, 2, _ToyConfig(), seed=99)
    fresh.load_state_dict(state)
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, state[key]), key
    # the restored optimiser continues exactly like the original
    agent.update(obs)
    fresh.update(obs)
    assert torch.equal(agent.net.weight, fresh.net.weight)


def test_load_state_rejects_wrong_shapes_and_unknown_keys() -> None:
    agent = _ToyAgent(3, 2, _ToyConfig())
    with pytest.raises(CheckpointError, match="network 'policy'"):
        agent.load_state_dict(_ToyAgent(4, 2, _ToyConfig()).state_dict())
    state = agent.state_dict()
    state["bogus.key"] = torch.zeros(1)
    with pytest.raises(CheckpointError, match="unexpected keys"):
        agent.load_state_dict(state)


def test_optimizer_tensors_fresh_optimizer_round_trip() -> None:
    param = nn.Parameter(torch.ones(2))
    opt = torch.optim.Adam([param], lr=0.5)
    param.sum().backward()
    opt.step()
    flat = optimizer_tensors("x", opt)
    other_param = nn.Parameter(torch.ones(2))
    other = torch.optim.Adam([other_param], lr=0.1)
    load_optimizer_tensors("x", other, flat)
    assert other.param_groups[0]["lr"] == 0.5
    assert torch.equal(other.state[other_param]["exp_avg"], opt.state[param]["exp_avg"])


def test_agent_rejects_wrong_config_type() -> None:
    with pytest.raises(ConfigError, match="needs a _ToyConfig"):
        _ToyAgent(3, 2, object())


# --------------------------------------------------------------------------- registry


def test_registry_names_and_errors() -> None:
    assert ALGOS == ("ppo", "sac", "td3")
    with pytest.raises(UserError, match="unknown algo 'a2c'"):
        get_spec("a2c")


# --------------------------------------------------------------------------- checkpoints


def _trained_ppo() -> Any:
    from trader.agents.ppo import PPOAgent, PPOConfig
    from trader.agents.rollout import RolloutBatch

    agent = PPOAgent(3, 2, PPOConfig(hidden_sizes=(8,), num_minibatches=2, update_epochs=1))
    obs = torch.randn(16, 3) * 3 + 1
    agent.normalizer.update(obs)
    actions, logprob, values = agent.explore(obs)
    agent.update(RolloutBatch(obs, actions, logprob, values, torch.randn(16), values + 1))
    return agent


def test_checkpoint_round_trip_reproduces_actions_exactly(tmp_path: Any) -> None:
    import json

    import trader
    from trader.agents.checkpoint import load_agent, load_policy, save_checkpoint

    agent = _trained_ppo()
    window = {"env": "Pendulum-v1"}
    tensor_path, json_path = save_checkpoint(agent, tmp_path / "ckpt" / "best", data_window=window, info={"step": 16})
    assert tensor_path.name == "best.safetensors" and json_path.name == "best.json"
    assert sorted(p.name for p in tensor_path.parent.iterdir()) == ["best.json", "best.safetensors"]
    meta = json.loads(json_path.read_text())
    assert meta["algo"] == "ppo" and meta["library_version"] == trader.__version__
    assert meta["obs_dim"] == 3 and meta["act_dim"] == 2 and meta["data_window"] == window
    assert meta["config"]["hidden_sizes"] == [8] and meta["info"] == {"step": 16}
    assert meta["normalization"]["count"] == 16.0
    policy = load_policy(tmp_path / "ckpt" / "best.safetensors")
    obs = torch.randn(50, 3) * 5
    assert torch.equal(policy.act(obs, deterministic=True), agent.act(obs, deterministic=True))
    restored = load_agent(tmp_path / "ckpt" / "best")
    for key, value in agent.state_dict().items():
        assert torch.equal(restored.state_dict()[key], value), key


def test_checkpoint_errors_never_unpickle(tmp_path: Any) -> None:
    import pickle

    from trader.agents.checkpoint import load_policy, save_checkpoint

    with pytest.raises(CheckpointError, match="sidecar not found"):
        load_policy(tmp_path / "missing")
    agent = _trained_ppo()
    tensor_path, json_path = save_checkpoint(agent, tmp_path / "a")
    tensor_path.write_bytes(pickle.dumps({"w": torch.zeros(2)}))
    with pytest.raises(CheckpointError, match="cannot read checkpoint weights"):
        load_policy(tmp_path / "a")
    json_path.write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_policy(tmp_path / "a")


# --------------------------------------------------------------------------- evaluator


def test_evaluator_scores_first_episodes_and_keeps_the_best(tmp_path: Any) -> None:
    from market_envs.gym_vec import GymVecEnv
    from trader.agents.checkpoint import load_policy
    from trader.agents.evaluator import Evaluator

    env = GymVecEnv("Pendulum-v1", num_envs=3, max_episode_steps=20)
    evaluator = Evaluator(env, check_every=7)
    agent = _pendulum_agent()
    record = evaluator.run_episodes(agent)
    assert record.rewards.shape[1] == 3 and record.lengths.tolist() == [20, 20, 20]
    assert record.mask.sum() == 60
    torch.testing.assert_close(record.returns, record.rewards.sum(0))
    metrics, improved = evaluator.consider(agent, step=10)
    assert improved and evaluator.best_step == 10
    assert metrics["score"] == pytest.approx(float(record.returns.double().mean()))
    again = evaluator.evaluate(agent)  # same seed, same deterministic policy: same score
    assert again["score"] == metrics["score"]
    worse = _pendulum_agent(seed=1)
    with torch.no_grad():
        worse.actor.mean[-1].bias.fill_(1.0)  # full torque one way: a bad policy
    _, improved = evaluator.consider(worse, step=20)
    assert not improved and evaluator.best_step == 10
    evaluator.save_best(tmp_path / "best")
    best = load_policy(tmp_path / "best")
    obs = torch.randn(4, 3)
    assert torch.equal(best.act(obs, deterministic=True), agent.act(obs, deterministic=True))


SCORES = [math.nan, -1.0, 0.5, 0.5, math.nan, 2.0, -math.inf]
"""Validation scores offered in order: a NaN first, a tie, a NaN after a number."""


def test_the_best_snapshot_rule_nan_lowest_first_kept_ties_to_the_earlier() -> None:
    from trader.agents.evaluator import BestSnapshot, rank_score

    best, kept = BestSnapshot(), []
    assert best.step is None and best.score == -math.inf
    for step, score in enumerate(SCORES):
        kept.append(best.offer(step, {"score": score, "other": step}))
    assert kept == [True, True, True, False, False, True, False]
    assert (best.step, best.score, best.metrics) == (5, 2.0, {"score": 2.0, "other": 5})
    assert [rank_score(s) for s in (None, math.nan, 1.5)] == [-math.inf, -math.inf, 1.5]


def test_ours_and_the_baselines_keep_the_same_snapshot() -> None:
    """`Evaluator.consider` (our agents) and the baselines' `Selection` keep the same
    step for the same scores, through the one rule."""
    from trader.agents.evaluator import Evaluator
    from trader.libraries.budget import Budget
    from trader.libraries.selection import Selection

    scores = iter(SCORES * 2)

    class Scripted(Evaluator):
        def evaluate(self, agent: Any) -> dict[str, float]:
            return {"score": next(scores)}

    ours = Scripted(env=None)
    agent = _pendulum_agent()
    theirs = Selection(Scripted(env=None), Budget(steps=100), eval_every=1)
    saved = []
    for step in range(len(SCORES)):
        ours.consider(agent, step)
    for step in range(len(SCORES)):
        theirs.validate(agent, step + 1, save=lambda step=step: saved.append(step))
    assert ours.best_step == 5 and theirs.best_step == 6 and saved == [0, 1, 2, 5]
    assert ours.best_score == theirs.best_score == 2.0


def test_return_and_sharpe_score_uses_portfolio_values() -> None:
    from trader import metrics
    from trader.agents.evaluator import EpisodeRecord, return_and_sharpe_score

    values = torch.tensor([[100.0, 100.0], [110.0, 99.0], [99.0, 98.0], [108.9, 1.0]])
    mask = torch.tensor([[True, True], [True, True], [True, True], [True, False]])
    record = EpisodeRecord(
        returns=torch.zeros(2),
        lengths=mask.sum(0),
        rewards=torch.zeros(4, 2),
        mask=mask,
        infos={"portfolio_value": values},
    )
    out = return_and_sharpe_score()(record)
    first = np.array([0.1, -0.1, 0.1])
    second = np.array([-0.01, 98.0 / 99.0 - 1.0])
    expected_return = (metrics.cum_returns_final(first) + metrics.cum_returns_final(second)) / 2
    expected_sharpe = (metrics.sharpe_ratio(first) + metrics.sharpe_ratio(second)) / 2
    assert out["return"] == pytest.approx(expected_return)
    assert out["score"] == out["sharpe"] == pytest.approx(expected_sharpe)
    with_start = return_and_sharpe_score(initial_value=50.0)(record)  # the first step's return counts too
    first, second = np.array([1.0, 0.1, -0.1, 0.1]), np.array([1.0, -0.01, 98.0 / 99.0 - 1.0])
    assert with_start["return"] == pytest.approx(
        (metrics.cum_returns_final(first) + metrics.cum_returns_final(second)) / 2
    )
    with pytest.raises(ConfigError, match="score_by"):
        return_and_sharpe_score(score_by="sortino")
    assert "bar_sharpe" not in out  # no timestamps: no days to count
    with pytest.raises(ConfigError, match="timestamps"):
        return_and_sharpe_score(score_by="bar_sharpe")
    stamps = pd.DatetimeIndex(["2024-03-04 10:00", "2024-03-04 11:00", "2024-03-05 10:00", "2024-03-05 11:00"])
    by_bars = return_and_sharpe_score(score_by="bar_sharpe", timestamps=stamps)(record)
    first, second = np.array([0.1, -0.1, 0.1]), np.array([-0.01, 98.0 / 99.0 - 1.0])  # the bars after the first
    expected = (metrics.bar_sharpe_ratio(first, stamps[1:]) + metrics.bar_sharpe_ratio(second, stamps[1:3])) / 2
    assert by_bars["score"] == by_bars["bar_sharpe"] == pytest.approx(expected, rel=1e-6)  # float32 values


def _pendulum_agent(seed: int = 0) -> Any:
    from trader.agents.ppo import PPOAgent, PPOConfig

    return PPOAgent(3, 1, PPOConfig(hidden_sizes=(8,)), seed=seed)
