"""The per-stock network (issue 11): layout, a reference loop, equivariance, size, agents."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

from market_envs.config import EnvConfig
from market_envs.env import StockTradingVecEnv
from tests.market_fixtures import random_panel
from trader.agents import ALGOS, make_agent, make_config
from trader.agents.networks import PerStockNet, split_stocks, stock_groups, stock_layout, tanh
from trader.agents.normalizer import ObsNormalizer
from trader.errors import ConfigError

N, F = 5, 3
OBS_DIM = 1 + N + N * F


def permute_obs(obs: torch.Tensor, perm: torch.Tensor, num_stocks: int, num_features: int) -> torch.Tensor:
    """The observation of the same book with the stocks reordered by ``perm``."""
    cash, x = split_stocks(obs, num_stocks, num_features)
    x = x[:, perm]
    return torch.cat([cash, x[..., 0], x[..., 1:].reshape(obs.shape[0], -1)], dim=1)


def per_stock_config(algo: str) -> Any:
    return make_config(algo, {"network": "per_stock", "hidden_sizes": (8, 8)})


# --------------------------------------------------------------------------- layout


def test_stock_layout_matches_the_market_env() -> None:
    panel = random_panel(n_tickers=4, n_bars=60)
    env = StockTradingVecEnv(panel, num_envs=2, config=EnvConfig(return_windows=(5,)))
    stocks, features = stock_layout(env.obs_dim, env.act_dim)
    assert (stocks, features) == (4, len(env.feature_names))
    obs, _ = env.reset(seed=0)
    cash, x = split_stocks(obs, stocks, features)
    assert torch.equal(cash[:, 0], obs[:, 0])
    assert torch.equal(x[:, 2, 0], obs[:, 1 + 2])  # stock 2's position share
    assert torch.equal(x[:, 2, 1:], obs[:, 1 + stocks + 2 * features : 1 + stocks + 3 * features])


def test_stock_layout_rejects_other_envs() -> None:
    with pytest.raises(ConfigError, match="per_stock"):
        stock_layout(11, 3)  # 11 - 1 - 3 = 7 columns cannot be 3 x F
    with pytest.raises(ConfigError, match="network"):
        make_agent("ppo", 11, 3, {"network": "per_stock"})
    with pytest.raises(ConfigError, match="network must be one of"):
        make_config("sac", {"network": "transformer"})


# --------------------------------------------------------------------------- the network


def reference_forward(net: PerStockNet, obs: torch.Tensor, actions: torch.Tensor | None) -> torch.Tensor:
    """Network k, sample b, stock i computed one at a time, as the module docstring says."""
    act = torch.tanh if net.activation is tanh else torch.relu  # torch's own tanh as the reference
    weights, biases = list(net.weights), list(net.biases)
    out = torch.zeros(net.num_nets, obs.shape[0], net.num_stocks, weights[-1].shape[-1])
    for k in range(net.num_nets):
        for b in range(obs.shape[0]):
            cash = obs[b, 0]
            inputs = []
            for i in range(net.num_stocks):
                feats = obs[
                    b, 1 + net.num_stocks + i * net.num_features : 1 + net.num_stocks + (i + 1) * net.num_features
                ]
                row = [obs[b, 1 + i : 2 + i], feats]
                if actions is not None:
                    row.append(actions[b, i : i + 1])
                inputs.append(torch.cat(row))
            encoded = [act(x @ weights[0][k] + biases[0][k, 0]) for x in inputs]
            context = torch.stack(encoded).mean(dim=0)
            for i in range(net.num_stocks):
                z = torch.cat([encoded[i], context, cash.reshape(1)])
                for layer in range(1, len(weights)):
                    z = z @ weights[layer][k] + biases[layer][k, 0]
                    if layer < len(weights) - 1:
                        z = act(z)
                out[k, b, i] = z
    return out


def test_the_networks_tanh_is_torchs_to_float32_rounding_with_its_gradient() -> None:
    x = torch.cat([torch.randn(10_000) * 3, torch.tensor([0.0, 1e-8, -1e-8, 20.0, -20.0, 1e4, -1e4])])
    x64 = x.double().requires_grad_()
    torch.tanh(x64).sum().backward()
    x32 = x.clone().requires_grad_()
    out = tanh(x32)
    out.sum().backward()
    torch.testing.assert_close(out.double(), torch.tanh(x.double()), rtol=0, atol=2.5e-7)
    torch.testing.assert_close(x32.grad.double(), x64.grad, rtol=0, atol=5e-7)
    assert float(out.abs().max()) <= 1.0


@pytest.mark.parametrize("action_inputs", [False, True])
@pytest.mark.parametrize("hidden", [(6,), (6, 7), (6, 7, 4)])
def test_per_stock_net_equals_a_loop_over_stocks(hidden: tuple[int, ...], action_inputs: bool) -> None:
    torch.manual_seed(0)
    net = PerStockNet(N, F, hidden, 2, num_nets=2, action_inputs=action_inputs, activation="tanh")
    obs = torch.randn(3, OBS_DIM)
    actions = torch.rand(3, N) * 2 - 1 if action_inputs else None
    expected = reference_forward(net, obs, actions)
    torch.testing.assert_close(net(obs, actions), expected, rtol=1e-5, atol=1e-6)


def _outputs(agent: Any, obs: torch.Tensor, actions: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each network of an agent on normalised ``obs``: per-stock outputs and pooled values."""
    out = {"action": agent.act(obs, deterministic=True)}
    if agent.algo == "ppo":
        out["value"] = agent.value(obs)
    else:
        out["q"] = agent.critic(obs, actions)
    return out


@pytest.mark.parametrize("algo", ALGOS)
def test_permuting_the_stocks_permutes_the_actions(algo: str) -> None:
    agent = make_agent(algo, OBS_DIM, N, per_stock_config(algo), seed=3)
    agent.normalizer.update(torch.randn(64, OBS_DIM) * 2 + 1)  # shared stats: still equivariant
    obs = torch.randn(16, OBS_DIM)
    actions = torch.rand(16, N) * 2 - 1
    perm = torch.tensor([3, 0, 4, 1, 2])
    plain = _outputs(agent, obs, actions)
    permuted = _outputs(agent, permute_obs(obs, perm, N, F), actions[:, perm])
    torch.testing.assert_close(permuted["action"], plain["action"][:, perm], rtol=1e-5, atol=1e-6)
    for key in ("value", "q"):
        if key in plain:  # pooled over the stocks: unchanged
            torch.testing.assert_close(permuted[key], plain[key], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("algo", ALGOS)
def test_parameter_count_does_not_grow_with_the_stocks(algo: str) -> None:
    def count(num_stocks: int) -> int:
        agent = make_agent(algo, 1 + num_stocks + num_stocks * F, num_stocks, per_stock_config(algo))
        return sum(p.numel() for module in agent.modules().values() for p in module.parameters())

    assert count(3) == count(30) == count(100)


def test_shared_normaliser_pools_each_feature_over_the_stocks() -> None:
    groups = stock_groups(N, F)
    normalizer = ObsNormalizer(OBS_DIM, groups=groups)
    rng = np.random.default_rng(0)
    batches = [
        rng.normal(rng.uniform(-3, 3, OBS_DIM), rng.uniform(0.5, 2, OBS_DIM), (size, OBS_DIM)) for size in (7, 1, 30)
    ]
    for batch in batches:
        normalizer.update(torch.as_tensor(batch))
    rows = np.concatenate(batches)
    for group in range(2 + F):
        values = rows[:, (groups == group).numpy()]
        np.testing.assert_allclose(normalizer.mean[groups == group].numpy(), values.mean(), rtol=1e-10)
        np.testing.assert_allclose(normalizer.var[groups == group].numpy(), values.var(), rtol=1e-10)


# --------------------------------------------------------------------------- agents on the market


@pytest.mark.parametrize("algo", ALGOS)
def test_per_stock_agents_train_and_restore_from_a_checkpoint(algo: str, tmp_path: Any) -> None:
    from trader.agents.checkpoint import load_policy
    from trader.training import train

    panel = random_panel(n_tickers=4, n_bars=200)
    panel = replace(panel, meta={"train_end": panel.timestamps[150], "val_end": panel.timestamps[175]})
    overrides = {"network": "per_stock", "hidden_sizes": [8, 8]}
    if algo == "ppo":
        overrides.update(num_steps=8, num_minibatches=2, update_epochs=1)
    else:
        overrides.update(learning_starts=32, batch_size=16, iteration_steps=64)
    result = train(
        algo,
        panel,
        overrides,
        tmp_path / algo,
        steps=256,
        seed=0,
        num_envs=4,
        env_config={"action_mode": "weights", "episode_length": 50},
    )
    assert result.steps >= 256
    policy = load_policy(tmp_path / algo / "checkpoints" / "final.safetensors")
    obs = torch.randn(6, 1 + 4 + 4 * len(panel.feature_names))
    actions = policy.act(obs, deterministic=True)
    assert actions.shape == (6, 4) and torch.isfinite(actions).all()
