"""GymStockTradingEnv: gymnasium's checker, numpy types, episode ends, SB3 training."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env
from market_fixtures import random_panel

from market_envs import EnvConfig, GymStockTradingEnv, StockTradingVecEnv
from trader.errors import UserError

PANEL = random_panel(n_tickers=3, n_bars=70, seed=5)


@pytest.mark.parametrize("mode", ["shares", "weights"])
def test_passes_gymnasium_env_checker(mode):
    env = GymStockTradingEnv(PANEL, EnvConfig(action_mode=mode, episode_length=20))
    check_env(env, skip_render_check=True)


def test_numpy_in_and_out_and_same_rules_as_vector_env():
    config = EnvConfig(episode_length=10)
    env = GymStockTradingEnv(PANEL, config)
    obs, info = env.reset(seed=4)
    assert isinstance(obs, np.ndarray) and obs.dtype == np.float32 and obs.shape == env.observation_space.shape
    vec = StockTradingVecEnv(PANEL, 1, "cpu", config)
    vec_obs, _ = vec.reset(seed=4)
    np.testing.assert_array_equal(obs, vec_obs[0].numpy())
    rng = np.random.default_rng(0)
    for _ in range(5):
        action = rng.uniform(-1, 1, size=3).astype(np.float32)
        obs, reward, terminated, truncated, info = env.step(action)
        vec_obs, vec_reward, *_ = vec.step(torch.from_numpy(action[None]))
        assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
        np.testing.assert_array_equal(obs, vec_obs[0].numpy())
        assert reward == pytest.approx(float(vec_reward[0]))
        assert set(info) == {"t", "value", "cash", "turnover", "costs", "holdings"}


def test_episode_end_returns_the_last_observation_then_reset_starts_fresh():
    env = GymStockTradingEnv(PANEL, EnvConfig(episode_length=4))
    env.reset(seed=1)
    buy = np.ones(3, dtype=np.float32)
    for _ in range(3):
        *_, terminated, truncated, _ = env.step(buy)
        assert not (terminated or truncated)
    obs, _, terminated, truncated, info = env.step(buy)
    assert truncated and not terminated
    assert obs[1:4].sum() > 0 and info["holdings"].sum() > 0  # the finished episode's positions
    obs, _ = env.reset()
    assert obs[0] == 1.0 and (obs[1:4] == 0).all()


def test_wrong_action_shape_is_refused():
    env = GymStockTradingEnv(PANEL)
    env.reset(seed=0)
    with pytest.raises(UserError, match="shape"):
        env.step(np.zeros(4, dtype=np.float32))


def test_sb3_ppo_trains_on_the_adapter():
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_checker import check_env as sb3_check_env
    from stable_baselines3.common.logger import Logger

    env = GymStockTradingEnv(PANEL, EnvConfig(episode_length=30, features=("close", "rsi_30")))
    sb3_check_env(env, warn=False)
    model = sb3.PPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=2, seed=0, device="cpu")
    model.set_logger(Logger(folder=None, output_formats=[]))  # no SB3-<time> folder in the temp directory
    model.learn(total_timesteps=256)
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, deterministic=True)
    assert action.shape == (3,) and np.all(np.abs(action) <= 1.0)
    assert np.isfinite(env.step(action)[1])
