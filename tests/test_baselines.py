"""Baselines: SB3 on our batched env, FinRL's ensemble, and their rows in the run's report.

A module fixture builds one real run directory (a tiny `trader.train` PPO run with
costs and rules of its own) and trains a tiny SB3 PPO baseline and a tiny FinRL
ensemble into it through the CLI, as a user would.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

pytest.importorskip("stable_baselines3")

from market_envs.data import load  # noqa: E402
from market_envs.config import EnvConfig  # noqa: E402
from market_envs.env import StockTradingVecEnv  # noqa: E402
from market_envs.gym_adapter import GymStockTradingEnv  # noqa: E402
from trader.rundir import config_from_dict  # noqa: E402
from trader.backtesting import BacktestConfig, run_backtest  # noqa: E402
from trader.libraries import finrl  # noqa: E402
from trader.libraries.budget import Budget  # noqa: E402
from trader.adapters.sb3 import ALGOS, SB3Policy  # noqa: E402
from trader.libraries.sb3 import PRESETS, make_model  # noqa: E402
from trader.libraries.sb3_env import SB3VecEnv  # noqa: E402
from podracer.cli import main as cli  # noqa: E402
from trader.errors import UserError  # noqa: E402
from trader.agents.evaluator import market_evaluator  # noqa: E402

from market_fixtures import write_tiny_recipe  # noqa: E402

TINY_PPO = {"num_steps": 32, "update_epochs": 2, "num_minibatches": 2, "hidden_sizes": [16]}
RUN_RULES = {"buy_cost": 0.002, "sell_cost": 0.003, "episode_length": 200, "initial_cash": 500_000.0}


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("baselines")
    path = write_tiny_recipe(root, interval="5min")  # a fifth of the bars: the backtests are bar by bar
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory, recipe: Path) -> Path:
    """A run directory: a tiny PPO run, then `trader baselines` with SB3 PPO and FinRL."""
    import trader

    os.environ["PODRACER_DATA_DIR"] = str(recipe.parent / "data")
    run_dir = recipe.parent / "run"
    trader.train("ppo", str(recipe), TINY_PPO, run_dir, steps=512, num_envs=8, eval_every=256, env_config=RUN_RULES)
    code = cli(
        [
            "baselines",
            str(run_dir),
            "--baselines",
            "sb3,finrl",
            "--baseline-algos",
            "ppo",
            "--steps",
            "300",
            "--eval-every",
            "150",
            "--windows",
            "1",
            "--no-tear-sheet",
            "--output",
            "json",
        ]
    )
    assert code == 0
    return run_dir


def report_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "report.json").read_text())


# ----------------------------------------------------------------- the SB3 VecEnv


@pytest.fixture
def train_panel(recipe: Path):
    return load(str(recipe)).period("train")


def test_sb3_vec_env_steps_like_the_gym_adapter_on_fixed_actions(train_panel) -> None:
    """One sub-environment, same seed, same actions: same observations, rewards and
    ends; at the episode's end SB3's terminal_observation is the adapter's last obs."""
    rules = EnvConfig(episode_length=40, buy_cost=0.002)
    venv = SB3VecEnv(StockTradingVecEnv(train_panel, 1, "cpu", rules))
    gym_env = GymStockTradingEnv(train_panel, rules)
    venv.seed(7)
    obs = venv.reset()
    gym_obs, _ = gym_env.reset(seed=7)
    np.testing.assert_array_equal(obs[0], gym_obs)
    actions = np.random.default_rng(0).uniform(-1, 1, size=(40, train_panel.num_tickers)).astype(np.float32)
    for k, action in enumerate(actions):
        obs, reward, done, infos = venv.step(action[None])
        gym_obs, gym_reward, terminated, truncated, _ = gym_env.step(action)
        assert reward[0] == pytest.approx(gym_reward, rel=1e-6, abs=1e-9)
        assert bool(done[0]) == (terminated or truncated)
        if done[0]:
            np.testing.assert_array_equal(infos[0]["terminal_observation"], gym_obs)
            assert infos[0]["TimeLimit.truncated"] == (truncated and not terminated)
            break
        np.testing.assert_array_equal(obs[0], gym_obs)
    assert k == 39, "the episode of 40 steps ends at its 40th step"


def test_sb3_trains_on_the_vec_env_under_its_checks(train_panel) -> None:
    """SB3's own checks: spaces (`check_for_correct_spaces` on load), no NaN or inf in
    anything that crosses (`VecCheckNan`), and a short PPO run; plus SB3's `check_env`
    on the gym adapter with the same rules (SB3 has no checker for a VecEnv itself)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_checker import check_env
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.utils import check_for_correct_spaces
    from stable_baselines3.common.vec_env import VecCheckNan

    rules = EnvConfig(episode_length=64)
    venv = VecCheckNan(SB3VecEnv(StockTradingVecEnv(train_panel, 4, "cpu", rules)), raise_exception=True)
    check_for_correct_spaces(
        venv,
        GymStockTradingEnv(train_panel, rules).observation_space,
        GymStockTradingEnv(train_panel, rules).action_space,
    )
    check_env(GymStockTradingEnv(train_panel, rules), warn=False)
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.set_logger(Logger(folder=None, output_formats=[]))  # no SB3-<time> folder in the temp directory
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256
    actions = SB3Policy(model).act(torch.zeros(3, venv.observation_space.shape[0]))
    assert actions.shape == (3, train_panel.num_tickers) and actions.abs().max() <= 1.0


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_builds_its_models(train_panel, preset: str) -> None:
    venv = SB3VecEnv(StockTradingVecEnv(train_panel, 1, "cpu", EnvConfig()))
    for algo, params in PRESETS[preset].items():
        assert algo in ALGOS
        model = make_model(algo, venv, params, seed=0, device="cpu")
        for key, value in params.items():
            if key in ("learning_rate", "batch_size", "n_steps", "buffer_size"):
                assert getattr(model, key) == value, (preset, algo, key)


def test_models_write_no_log_folder(train_panel, tmp_path, monkeypatch) -> None:
    """SB3 makes an empty SB3-<time> folder in the temp directory on each `learn` unless the
    model has a logger of its own: a run of ours must leave nothing there."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    venv = SB3VecEnv(StockTradingVecEnv(train_panel, 2, "cpu", EnvConfig()))
    model = make_model("ppo", venv, {"n_steps": 16, "batch_size": 32, "n_epochs": 1}, seed=0, device="cpu")
    model.learn(total_timesteps=32)
    assert model.num_timesteps >= 32 and list(tmp_path.glob("SB3-*")) == []


# ----------------------------------------------------------------- budgets


def test_budgets() -> None:
    assert Budget(steps=100).terms == "equal env steps" and Budget(seconds=5.0).terms == "equal wall-clock"
    assert Budget(steps=100).split(6) == Budget(steps=16)
    assert Budget(seconds=60.0).split(4) == Budget(seconds=15.0)
    with pytest.raises(UserError):
        Budget(steps=10, seconds=1.0)


def test_a_budget_reads_as_people_write_it() -> None:
    """The progress line `[sb3-ppo-s0] training (...)` prints the budget this way."""
    assert str(Budget(seconds=180.04422542799995)) == "equal wall-clock: 180 s"
    assert str(Budget(seconds=1.5)) == "equal wall-clock: 1.5 s"
    assert str(Budget(seconds=5400.0)) == "equal wall-clock: 5,400 s"
    assert str(Budget(steps=100_000)) == "equal env steps: 100,000 steps"


# ----------------------------------------------------------------- FinRL's ensemble


def test_rolling_windows_cut_the_trading_sessions_and_look_only_back(recipe: Path) -> None:
    data = load(str(recipe))
    dates = pd.Index(data.timestamps.tz_localize(None).normalize().unique())
    windows = finrl.rolling_windows(data, "2023-01-10", 2)  # sessions 10, 11, 12 -> [10, 11], [12]
    trade_days = [pd.Index(data.slice(*w.trade).timestamps.tz_localize(None).normalize().unique()) for w in windows]
    assert [list(d.day) for d in trade_days] == [[10, 11], [12]]
    for w, days in zip(windows, trade_days):
        validation = data.slice(*w.validation).timestamps
        assert w.train == (data.timestamps[0], w.validation[0])  # all data before the validation window
        assert w.validation[1] == w.trade[0]  # the validation window ends where trading starts
        assert validation.tz_localize(None).normalize().nunique() == len(days)  # as many sessions as traded
        assert validation[-1] < w.trade[0]
    assert windows[0].trade[1] == windows[1].trade[0] and windows[1].trade[1] is None
    assert set(dates) >= {d for days in trade_days for d in days}


def test_pick_learner_takes_the_best_sharpe_nan_last_ties_first() -> None:
    assert finrl.pick_learner({"a2c": 0.5, "ppo": 1.5, "ddpg": -1.0}) == "ppo"
    assert finrl.pick_learner({"a2c": math.nan, "ppo": -3.0, "ddpg": math.nan}) == "ppo"
    assert finrl.pick_learner({"a2c": 1.0, "ppo": 1.0, "ddpg": 0.0}) == "a2c"
    assert finrl.pick_learner({"a2c": math.nan, "ppo": math.nan, "ddpg": math.nan}) == "a2c"


class Constant:
    """A stub learner's policy: the same action for every stock at every bar."""

    def __init__(self, level: float) -> None:
        self.level = level

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        return torch.full((obs.shape[0], 4), self.level)


def test_the_validation_score_is_the_bar_sharpe_of_the_backtests_bars_and_the_daily_sharpe_is_kept(
    recipe: Path,
) -> None:
    """The evaluator's score on a minute panel is the Sharpe ratio of the bar returns the backtest engine
    computes independently on the same period and rules (`trader.metrics.bar_sharpe_ratio`); its ``sharpe``
    is the backtest's daily Sharpe ratio; ``score_by="sharpe"`` (FinRL's rule) scores by the latter."""
    from trader import metrics

    data = load(str(recipe))
    train = data.period("train")
    data = data.with_normalization(train.feature_mean, train.feature_std)
    validation = data.period("validation")
    rules = EnvConfig(buy_cost=0.0, sell_cost=0.0)
    stubs = {"buy": Constant(1.0), "part": Constant(0.3)}
    config = BacktestConfig(
        initial_cash=rules.initial_cash, buy_cost=0.0, sell_cost=0.0, tear_sheet=False, policy_env=rules
    )
    result = run_backtest(validation, stubs, baselines=[], config=config)
    for name, stub in stubs.items():
        series = result.series[name].iloc[1:]  # the backtest's first bar holds no position yet (return 0)
        bar = metrics.bar_sharpe_ratio(series["return"].to_numpy(dtype=float), series.index)
        scored = market_evaluator(validation, rules).evaluate(stub)
        assert scored["score"] == pytest.approx(bar, rel=1e-6) and scored["bar_sharpe"] == scored["score"]
        assert scored["sharpe"] == pytest.approx(float(result.metrics.loc[name, "sharpe_ratio"]), rel=1e-6)
        assert scored["bar_sharpe"] != pytest.approx(scored["sharpe"], rel=1e-3)  # intraday: two statistics
        daily = market_evaluator(validation, rules, score_by="sharpe").evaluate(stub)
        assert daily["score"] == daily["sharpe"] == pytest.approx(scored["sharpe"], rel=1e-12)


def test_the_ensemble_picks_per_window_the_best_validation_sharpe_of_the_backtest(recipe: Path) -> None:
    """Stub learners (buy, hold cash, sell what is held): per window the choice is the
    learner whose validation Sharpe is the highest, the Sharpe computed independently
    by the backtest engine on that validation window under the same rules."""
    data = load(str(recipe))
    train = data.period("train")
    data = data.with_normalization(train.feature_mean, train.feature_std)
    rules = EnvConfig(buy_cost=0.0, sell_cost=0.0)
    stubs = {"a2c": Constant(0.0), "ppo": Constant(1.0), "ddpg": Constant(0.3)}
    windows = finrl.rolling_windows(data, "2023-01-09", 2)
    fitted = []

    def fit(learner, panel, validation, k):
        fitted.append((learner, k, panel.end < validation.start))
        evaluator = market_evaluator(validation, rules, score_by="sharpe")  # FinRL's rule: the daily Sharpe
        return stubs[learner], evaluator.evaluate(stubs[learner])["score"], {}

    choices = finrl.run_ensemble(data, windows, fit)
    assert all(before for _, _, before in fitted) and len(fitted) == 6
    config = BacktestConfig(
        initial_cash=rules.initial_cash, buy_cost=0.0, sell_cost=0.0, tear_sheet=False, policy_env=rules
    )
    for choice in choices:
        validation = data.slice(*choice.window.validation)
        sharpe = run_backtest(validation, stubs, baselines=[], config=config).metrics["sharpe_ratio"]
        reference = {name: float(sharpe[name]) for name in stubs}
        for name in stubs:
            if math.isnan(reference[name]):
                assert math.isnan(choice.scores[name])
            else:
                assert choice.scores[name] == pytest.approx(reference[name], rel=1e-6)
        assert choice.chosen == finrl.pick_learner(reference)
        assert choice.policy is stubs[choice.chosen]


# ----------------------------------------------------------------- the run directory


def test_a_tiny_sb3_baseline_writes_folder_sidecar_and_report_row(built: Path) -> None:
    folder = built / "baselines" / "sb3-ppo-s0"
    assert sorted(p.name for p in folder.iterdir()) == ["baseline.json", "model.zip"]
    sidecar = json.loads((folder / "baseline.json").read_text())
    assert sidecar["status"] == "finished" and sidecar["library"] == "sb3" and sidecar["algo"] == "ppo"
    assert sidecar["budget"] == {"terms": "equal env steps", "steps": 300, "seconds": None}
    assert sidecar["steps"] >= 300 and sidecar["seconds"] > 0 and sidecar["library_version"]
    assert [row["step"] for row in sidecar["validation"]][-1] == sidecar["steps"]
    report = report_of(built)
    rows = {s["name"]: s for s in report["strategies"]}
    assert rows["sb3-ppo-s0"]["kind"] == "library" and rows["sb3-ppo-s0"]["label"] == "SB3 PPO (seed 0)"
    assert rows["sb3-ppo-s0"]["training"]["steps"] == sidecar["steps"]
    assert {"best", "final", "sb3-ppo-s0", "finrl-ensemble-s0", "benchmark", "equal_weight"} <= set(report["order"])
    assert (built / "backtests" / "sb3-ppo-s0.parquet").is_file()
    assert "SB3 PPO (seed 0): equal env steps" in (built / "report.md").read_text()
    from test_rundir import assert_every_file_is_documented

    assert_every_file_is_documented(built)


def test_baselines_again_keep_the_reports_breakeven_column(built: Path, tmp_path: Path) -> None:
    """Issue 75, finding 4: `trader baselines` rewrote a report of `trader backtest` without its
    breakeven costs (4.74x became "-"). Each strategy's breakeven is computed again, the new
    baseline's too."""
    run = shutil.copytree(built, tmp_path / "run")
    assert cli(["backtest", str(run), "--no-tear-sheet", "--overwrite", "--output", "json"]) == 0
    before = report_of(run)["breakeven"]
    assert before and all(row["text"] not in ("", "-") for row in before.values())
    args = ["baselines", str(run), "--baselines", "sb3", "--baseline-algos", "a2c", "--steps", "300"]
    assert cli([*args, "--eval-every", "0", "--no-tear-sheet", "--output", "json"]) == 0
    after = report_of(run)["breakeven"]
    assert set(after) == set(before) | {"sb3-a2c-s0"}
    assert {name: after[name]["text"] for name in before} == {name: row["text"] for name, row in before.items()}


def test_the_baselines_saw_the_runs_test_period_costs_and_rules(built: Path, recipe: Path) -> None:
    report = report_of(built)
    data = load(str(recipe))
    test = data.period("test")
    assert report["period"]["name"] == "test"
    assert report["period"]["start"] == str(test.start) and report["period"]["end"] == str(test.end)
    assert (
        report["config"]["buy_cost"] == RUN_RULES["buy_cost"]
        and report["config"]["sell_cost"] == RUN_RULES["sell_cost"]
    )
    assert report["config"]["initial_cash"] == RUN_RULES["initial_cash"]
    run_rules = json.loads((built / "checkpoints" / "best.json").read_text())["data_window"]["env_config"]
    for name in ("sb3-ppo-s0", "finrl-ensemble-s0"):
        sidecar = json.loads((built / "baselines" / name / "baseline.json").read_text())
        assert config_from_dict(EnvConfig, sidecar["env_config"]) == config_from_dict(EnvConfig, run_rules)
        assert sidecar["periods"]["train"] == [str(data.period("train").start), str(data.period("train").end)]
    series = pd.read_parquet(built / "backtests" / "sb3-ppo-s0.parquet")
    assert series["value"].iloc[0] == RUN_RULES["initial_cash"]


def test_the_ensemble_folder_keeps_the_chosen_model_of_each_window(built: Path) -> None:
    folder = built / "baselines" / "finrl-ensemble-s0"
    sidecar = json.loads((folder / "baseline.json").read_text())
    assert len(sidecar["windows"]) == 1 and sidecar["budget"]["steps"] == 300
    window = sidecar["windows"][0]
    assert set(window["scores"]) == {"a2c", "ppo", "ddpg"} and window["chosen"] in window["scores"]
    assert [m["file"] for m in sidecar["models"]] == [window["learners"][window["chosen"]]["file"]]
    assert sorted(p.name for p in folder.iterdir()) == sorted(["baseline.json", sidecar["models"][0]["file"]])
    assert sidecar["steps"] == sum(d["steps"] for d in window["learners"].values())


def test_trader_backtest_finds_the_baselines_again_and_leaves_the_ensemble_out_before_it_trades(
    built: Path, capsys
) -> None:
    before = report_of(built)["metrics"]["sb3-ppo-s0"]["sharpe_ratio"]
    assert cli(["backtest", str(built), "--output", "json", "--no-tear-sheet", "--overwrite"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["metrics"]["sb3-ppo-s0"]["sharpe_ratio"] == pytest.approx(before, rel=1e-9, abs=1e-12)
    own = (built / "report.json").read_bytes()
    with pytest.warns(UserWarning, match="finrl-ensemble-s0 left out"):
        code = cli(["backtest", str(built), "--period", "validation", "--output", "json", "--no-tear-sheet"])
    assert code == 0
    assert "finrl-ensemble-s0" not in json.loads(capsys.readouterr().out)["order"]
    assert (built / "reports" / "validation" / "report.json").is_file()  # a report of its own
    assert (built / "report.json").read_bytes() == own  # the run's own report is untouched


def test_a_crashing_baseline_is_reported_and_the_others_still_run(built: Path, tmp_path: Path, monkeypatch) -> None:
    import shutil

    import trader
    from trader.libraries import sb3

    run_dir = tmp_path / "run"
    shutil.copytree(built, run_dir)
    real = sb3.make_model

    def make_model(algo, *args, **kwargs):
        if algo == "td3":
            raise RuntimeError("boom")
        return real(algo, *args, **kwargs)

    monkeypatch.setattr(sb3, "make_model", make_model)
    result = trader.baselines(run_dir, ["sb3"], ["td3", "a2c"], steps=50, eval_every=0, tear_sheet=False)
    status = {o.name: o.status for o in result.outcomes}
    assert status == {"sb3-td3-s0": "failed", "sb3-a2c-s0": "finished"}
    failed = json.loads((run_dir / "baselines" / "sb3-td3-s0" / "baseline.json").read_text())
    assert failed["status"] == "failed" and "boom" in failed["error"]
    order = report_of(run_dir)["order"]
    assert "sb3-a2c-s0" in order and "sb3-td3-s0" not in order and "sb3-ppo-s0" in order


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--baselines", "keras"], "unknown library"),
        (["--baselines", "rllib"], "RLlib is not installed"),
        (["--baselines", "rllib", "--baseline-algos", "td3"], "RLlib baselines take ppo, sac"),
        (["--baseline-algos", "dqn"], "unknown algorithm"),
        (["--hyperparameters", "zoo"], "unknown preset 'zoo'"),
        (["--steps", "10", "--time-budget", "1m"], "not both"),
        (["--time-budget", "ten minutes"], "--time-budget must be a duration"),
        (["--seeds", "0"], "--seeds must be at least 1"),
    ],
)
def test_bad_input_exits_2_before_any_training(built: Path, capsys, monkeypatch, args, message) -> None:
    monkeypatch.setenv("PODRACER_RLLIB_PYTHON", str(built / "no-such-python"))  # as where `make rllib` was not run
    assert cli(["baselines", str(built), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_a_folder_without_a_data_set_exits_2(tmp_path: Path, capsys) -> None:
    assert cli(["baselines", str(tmp_path / "empty")]) == 2
    assert "no data set" in capsys.readouterr().err


def _rllib_skip_reason() -> str | None:
    from trader.libraries.rllib import rllib_python

    try:
        rllib_python()
    except UserError as err:
        return str(err)
    return None


@pytest.mark.skipif(_rllib_skip_reason() is not None, reason="RLlib is not installed (`make rllib` builds .venv-rllib)")
def test_a_tiny_rllib_ppo_baseline_trains_in_its_own_environment_and_backtests_here(
    built: Path, tmp_path: Path
) -> None:
    """The worker runs in .venv-rllib, exports the actor only after checking that the
    exported MLP gives RLlib's own actions; this side loads it without Ray."""
    import shutil
    import sys

    import trader

    run_dir = tmp_path / "run"
    shutil.copytree(built, run_dir)
    result = trader.baselines(run_dir, ["rllib"], ["ppo"], steps=1000, eval_every=0, tear_sheet=False)
    assert [o.status for o in result.outcomes] == ["finished"], result.outcomes
    folder = run_dir / "baselines" / "rllib-ppo-s0"
    assert {"policy.safetensors", "policy.json", "baseline.json"} <= {p.name for p in folder.iterdir()}
    sidecar = json.loads((folder / "baseline.json").read_text())
    assert sidecar["steps"] >= 1000 and sidecar["library_version"].startswith("2.")
    assert "ray" not in sys.modules
    rows = {s["name"]: s for s in report_of(run_dir)["strategies"]}
    assert rows["rllib-ppo-s0"]["label"] == "RLlib PPO (seed 0)"


@pytest.mark.parametrize(("squash", "expected"), [("clip", lambda m: m.clamp(-1, 1)), ("tanh", torch.tanh)])
def test_an_exported_rllib_actor_acts_as_its_mlps_mean_squashed(tmp_path: Path, squash, expected) -> None:
    """The loader needs no Ray: weights in order, tanh between layers, the first
    ``act_dim`` outputs (the mean; the rest are log-stds), clipped (PPO) or tanh (SAC)."""
    from safetensors.torch import save_file

    from trader.adapters.mlp import MLPPolicy

    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 6))
    tensors = [reference[0].weight, reference[0].bias, reference[2].weight, reference[2].bias]
    save_file({f"t{k}": t.detach().contiguous() for k, t in enumerate(tensors)}, str(tmp_path / "policy.safetensors"))
    (tmp_path / "policy.json").write_text(
        json.dumps({"sizes": [5, 8, 6], "activation": "tanh", "act_dim": 3, "squash": squash})
    )
    obs = 3 * torch.randn(16, 5)
    with torch.no_grad():
        want = expected(reference(obs)[:, :3])
    torch.testing.assert_close(MLPPolicy(tmp_path / "policy.safetensors").act(obs), want)
