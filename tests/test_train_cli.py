"""`trader.train` and `trader train`: run directory, reproducibility, market path, CLI."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from trader.agents.checkpoint import load_policy, read_metadata
from trader.agents.ppo import PPOConfig
from podracer.cli import main
from trader.errors import ConfigError, UserError
from trader.training import train

from market_fixtures import write_tiny_recipe

TINY = {"num_steps": 32, "update_epochs": 2, "num_minibatches": 2, "hidden_sizes": [16]}


def _tiny_pendulum(run_dir: Path, seed: int = 0) -> object:
    return train(
        "ppo",
        "Pendulum-v1",
        TINY,
        run_dir,
        steps=128,
        seed=seed,
        num_envs=2,
        eval_every=64,
        eval_episodes=2,
    )


def test_train_writes_the_run_directory(tmp_path: Path) -> None:
    result = _tiny_pendulum(tmp_path / "run")
    root = tmp_path / "run"
    config = tomllib.loads((root / "config.toml").read_text())
    assert config["algo"] == "ppo" and config["seed"] == 0 and config["steps"] == 128
    assert config["algo_config"]["num_steps"] == 32
    assert config["algo_config"]["hidden_sizes"] == [16]
    assert config["env"] == {"kind": "gymnasium", "id": "Pendulum-v1", "eval_episodes": 2}
    metrics = pd.read_parquet(root / "metrics.parquet")
    assert metrics["step"].tolist() == [64.0, 128.0]
    assert {"wall_time", "samples_per_s", "policy_loss", "val_score"} <= set(metrics.columns)
    assert metrics["val_score"].notna().all() and (metrics["samples_per_s"] > 0).all()
    assert metrics["wall_time"].is_monotonic_increasing
    for name in ("best", "final"):
        assert (root / "checkpoints" / f"{name}.safetensors").is_file()
    meta = read_metadata(root / "checkpoints" / "best")
    assert meta["info"]["step"] in (64, 128) and meta["data_window"] == {"env": "Pendulum-v1"}
    assert result.best_score == metrics["val_score"].max()
    policy = load_policy(root / "checkpoints" / "final")
    obs = torch.randn(5, 3)
    assert torch.equal(policy.act(obs, True), result.agent.act(obs, True))


def test_train_is_reproducible_from_config_and_seed(tmp_path: Path) -> None:
    _tiny_pendulum(tmp_path / "a", seed=7)
    _tiny_pendulum(tmp_path / "b", seed=7)
    first = load_file(tmp_path / "a" / "checkpoints" / "final.safetensors")
    second = load_file(tmp_path / "b" / "checkpoints" / "final.safetensors")
    assert first.keys() == second.keys()
    for key in first:
        assert torch.equal(first[key], second[key]), key
    scores = [pd.read_parquet(tmp_path / r / "metrics.parquet")["val_score"] for r in "ab"]
    pd.testing.assert_series_equal(scores[0], scores[1])


def test_train_on_a_market_panel(tmp_path: Path) -> None:
    from market_fixtures import random_panel

    panel = random_panel(n_tickers=3, n_bars=90, seed=1)
    stamps = panel.timestamps
    panel = replace(panel, meta={"train_end": stamps[60], "val_end": stamps[75]})
    config = PPOConfig(num_steps=16, update_epochs=1, num_minibatches=2, hidden_sizes=(16,))
    result = train(
        "ppo",
        panel,
        config,
        tmp_path / "market",
        steps=64,
        num_envs=4,
        eval_every=32,
        env_config={"episode_length": 20},
    )
    metrics = pd.read_parquet(tmp_path / "market" / "metrics.parquet")
    assert {"val_score", "val_sharpe", "val_bar_sharpe", "val_return"} <= set(metrics.columns)
    assert metrics["val_score"].equals(metrics["val_bar_sharpe"])  # validation ranks by the bars' Sharpe ratio
    meta = read_metadata(tmp_path / "market" / "checkpoints" / "best")
    assert meta["data_window"]["train"][0] == str(stamps[0])
    assert meta["data_window"]["validation"][0] == str(stamps[60])
    assert result.agent.obs_dim == 1 + 3 * 14
    config_toml = tomllib.loads((tmp_path / "market" / "config.toml").read_text())
    assert config_toml["env"]["kind"] == "market"
    assert config_toml["env"]["env_config"]["episode_length"] == 20


def test_train_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown algo 'a2c'"):
        train("a2c", "Pendulum-v1", None, tmp_path)
    with pytest.raises(UserError, match="unknown PPOConfig key.*clip_cof"):
        train("ppo", "Pendulum-v1", {"clip_cof": 0.1}, tmp_path)
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="CUDA is not available"):
            train("ppo", "Pendulum-v1", TINY, tmp_path, device="cuda")


# --------------------------------------------------------------------------- CLI


def test_cli_trains_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "ppo.toml"
    config.write_text("num_steps = 32\nupdate_epochs = 1\nnum_minibatches = 2\nhidden_sizes = [8]\n")
    code = main(
        [
            "train",
            "--algo",
            "ppo",
            "--env",
            "Pendulum-v1",
            "--steps",
            "64",
            "--num-envs",
            "2",
            str(tmp_path / "cli"),
            "--seed",
            "3",
            "--config",
            str(config),
            "--eval-episodes",
            "1",
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert "run directory" in capsys.readouterr().err
    saved = tomllib.loads((tmp_path / "cli" / "config.toml").read_text())
    assert saved["seed"] == 3 and saved["algo_config"]["hidden_sizes"] == [8]
    assert (tmp_path / "cli" / "checkpoints" / "best.json").is_file()
    # a run's own config.toml is accepted as --config
    code = main(
        [
            "train",
            "--algo",
            "ppo",
            "--env",
            "Pendulum-v1",
            "--steps",
            "64",
            "--num-envs",
            "2",
            str(tmp_path / "again"),
            "--config",
            str(tmp_path / "cli" / "config.toml"),
            "--eval-episodes",
            "1",
        ]
    )
    assert code == 0


def test_cli_prints_a_summary_and_the_config_under_verbose(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 75, finding 11: every `trader train` printed a 78-line config dump. It prints one line
    (algo, env, seed, steps, device, run directory); --verbose prints the resolved config too."""
    args = [
        "train",
        "--algo",
        "ppo",
        "--env",
        "Pendulum-v1",
        "--steps",
        "64",
        "--num-envs",
        "2",
        "--eval-episodes",
        "1",
    ]
    assert main([*args, str(tmp_path / "quiet")]) == 0
    err = capsys.readouterr().err
    assert "algo_config" not in err and len(err.strip().splitlines()) < 10, err  # summary, progress, done (wrapped)
    summary = " ".join(err.split("train ")[0].split())  # the summary line, unwrapped
    assert all(part in summary for part in ("ppo on Pendulum-v1", "64 steps", "cpu", str(tmp_path / "quiet"))), summary
    assert "algo_config" in (tmp_path / "quiet" / "config.toml").read_text()  # the run keeps it all
    assert main([*args, str(tmp_path / "loud"), "--verbose"]) == 0
    assert "'algo_config'" in capsys.readouterr().err


def test_cli_accepts_the_ppo_schedules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "ppo.toml"
    config.write_text(
        "num_steps = 16\nupdate_epochs = 2\nnum_minibatches = 2\nhidden_sizes = [8]\n"
        "learning_rate = 0.001\nanneal_lr = true\ntotal_steps = 64\ntarget_kl = 0.5\n"
        "num_learners = 2\n"
    )
    args = [
        "train",
        "--algo",
        "ppo",
        "--env",
        "Pendulum-v1",
        "--steps",
        "64",
        "--num-envs",
        "2",
        "--eval-episodes",
        "1",
    ]
    code = main([*args, str(tmp_path / "run"), "--config", str(config)])
    assert code == 0, capsys.readouterr().err
    saved = tomllib.loads((tmp_path / "run" / "config.toml").read_text())["algo_config"]
    assert (saved["anneal_lr"], saved["total_steps"], saved["target_kl"]) == (True, 64, 0.5)
    metrics = pd.read_parquet(tmp_path / "run" / "metrics.parquet")
    assert metrics["learning_rate"].tolist() == [1e-3, 0.5e-3]  # 32 of 64 transitions per update
    assert set(metrics["epochs_run"]) <= {1.0, 2.0}
    # the run's own config.toml (None fields dropped: TOML has no null) is accepted back
    again = main([*args, str(tmp_path / "again"), "--config", str(tmp_path / "run" / "config.toml")])
    assert again == 0


def test_cli_fills_total_steps_for_anneal_lr_from_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "ppo.toml"
    config.write_text("num_steps = 16\nupdate_epochs = 1\nnum_minibatches = 2\nhidden_sizes = [8]\nanneal_lr = true\n")
    args = [
        "train",
        "--algo",
        "ppo",
        "--env",
        "Pendulum-v1",
        "--steps",
        "96",
        "--num-envs",
        "2",
        "--eval-episodes",
        "1",
        str(tmp_path / "run"),
        "--config",
        str(config),
    ]
    assert main(args) == 0, capsys.readouterr().err
    saved = tomllib.loads((tmp_path / "run" / "config.toml").read_text())["algo_config"]
    assert saved["total_steps"] == 96
    rates = pd.read_parquet(tmp_path / "run" / "metrics.parquet")["learning_rate"].tolist()
    assert rates == pytest.approx([3e-4, 3e-4 * 2 / 3, 3e-4 / 3])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--algo", "ppo"], "exactly one of --env"),
        (["--algo", "ppo", "--env", "Pendulum-v1", "--dataset", "x"], "exactly one of --env"),
        (["--algo", "a2c", "--env", "Pendulum-v1"], "unknown algo"),
        (["--algo", "ppo", "--env", "Pendulum-v1", "--config", "/nonexistent.toml"], "not found"),
    ],
)
def test_cli_bad_input_exits_2(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["train", *args, "--steps", "8", str(tmp_path)])
    assert code == 2
    assert message in capsys.readouterr().err


def test_cli_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("RUN_DIR", "--algo", "--env", "--dataset", "--steps", "--compile"):
        assert option in out


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_off_policy_algos_train_through_the_same_path(algo: str, tmp_path: Path) -> None:
    config = {"hidden_sizes": [16], "learning_starts": 32, "batch_size": 16, "iteration_steps": 32, "buffer_size": 256}
    result = train(algo, "Pendulum-v1", config, tmp_path, steps=64, num_envs=2, eval_every=0, eval_episodes=1)
    metrics = pd.read_parquet(tmp_path / "metrics.parquet")
    assert metrics["step"].tolist() == [32.0, 64.0]
    assert metrics["val_score"].notna().tolist() == [False, True]
    policy = load_policy(tmp_path / "checkpoints" / "best")
    assert policy.algo == algo
    obs = torch.randn(3, 3)
    assert torch.equal(policy.act(obs, True), result.agent.act(obs, True))


@pytest.mark.slow
def test_train_with_torch_compile(tmp_path: Path) -> None:
    """--compile path: the compiled forward passes train and act (slow: compilation)."""
    result = train(
        "ppo", "Pendulum-v1", TINY, tmp_path, steps=64, num_envs=2, eval_every=0, eval_episodes=1, compile=True
    )
    assert result.best_score is not None
    policy = load_policy(tmp_path / "checkpoints" / "final")
    obs = torch.randn(4, 3)
    torch.testing.assert_close(policy.act(obs, True), result.agent.act(obs, True))


def test_a_run_continued_from_its_checkpoint_equals_one_uninterrupted_run(tmp_path: Path) -> None:
    """PPO, same seed, on the CPU: 128 + 128 steps through init_from == 256 steps at once.

    Episodes of 16 bars from the first bar restart exactly at the 128-step boundary, so
    the uninterrupted run's env is where a fresh reset puts it (see trader.train's doc).
    """
    recipe = write_tiny_recipe(tmp_path)
    rules = {"random_start": False, "episode_length": 16}
    common = dict(num_envs=4, seed=3, env_config=rules, eval_every=0)

    def run(name: str, steps: int, **extra) -> Path:
        train("ppo", str(recipe), {**TINY, "num_steps": 16}, tmp_path / name, steps=steps, **common, **extra)
        return tmp_path / name / "checkpoints" / "final.safetensors"

    whole = load_file(run("whole", 256))
    half = run("half", 128)
    continued = load_file(run("continued", 128, init_from=half.with_suffix("")))
    assert whole.keys() == continued.keys()
    for key in whole:
        assert torch.equal(whole[key], continued[key]), key
    assert not torch.equal(load_file(half)["net.actor.mean.0.weight"], whole["net.actor.mean.0.weight"])
    config = tomllib.loads((tmp_path / "continued" / "config.toml").read_text())
    assert config["init_from"].endswith("half/checkpoints/final")


def test_init_from_keeps_the_new_learning_rate_and_checks_the_algorithm(tmp_path: Path) -> None:
    recipe = write_tiny_recipe(tmp_path)
    train("ppo", str(recipe), TINY, tmp_path / "parent", steps=64, num_envs=2, eval_every=0)
    parent = tmp_path / "parent" / "checkpoints" / "final"
    child = train(
        "ppo",
        str(recipe),
        {**TINY, "learning_rate": 1e-3},
        tmp_path / "child",
        steps=64,
        num_envs=2,
        eval_every=0,
        seed=5,
        init_from=parent,
    )
    assert child.agent.optimizer.param_groups[0]["lr"] == 1e-3
    with pytest.raises(UserError, match="ppo checkpoint cannot start a sac run"):
        train("sac", str(recipe), {"hidden_sizes": [8]}, tmp_path / "bad", steps=64, num_envs=2, init_from=parent)


def test_time_budget_stops_training_and_validates_once_more(tmp_path: Path) -> None:
    result = train(
        "ppo",
        "Pendulum-v1",
        TINY,
        tmp_path / "run",
        steps=10**9,
        num_envs=2,
        eval_every=0,
        eval_episodes=1,
        time_budget=0.5,
    )
    assert 0 < result.steps < 10**9
    metrics = pd.read_parquet(tmp_path / "run" / "metrics.parquet")
    assert metrics["val_score"].notna().tolist()[-1] and metrics["val_score"].notna().sum() == 1
    assert (tmp_path / "run" / "checkpoints" / "best.safetensors").is_file()
    with pytest.raises(UserError, match="time_budget"):
        train("ppo", "Pendulum-v1", TINY, tmp_path / "bad", steps=64, time_budget=0)


TINY_EDGE_RECIPE = """
name = "tiny-edge-daily"
description = "6 synthetic tickers in daily bars, a planted 5-day mean reversion"
source = "synthetic"
interval = "1D"
start = "2020-01-02"
end = "2022-01-01"
train_end = "2021-01-01"
val_end = "2021-07-01"

[synthetic]
n_tickers = 6
seed = 2

[synthetic.edge]
kind = "mean_reversion"
strength_sharpe = 8.0
horizon = 5
"""


def test_the_market_preset_sets_the_rules_and_the_per_stock_network(tmp_path: Path) -> None:
    recipe = tmp_path / "edge.toml"
    recipe.write_text(TINY_EDGE_RECIPE)
    run_dir = tmp_path / "run"
    code = main(
        [
            "train",
            "--algo",
            "ppo",
            "--dataset",
            str(recipe),
            "--preset",
            "market",
            "--commission",
            "0.0002",
            "--steps",
            "256",
            "--num-envs",
            "4",
            "--eval-every",
            "0",
            str(run_dir),
        ]
    )
    assert code == 0
    saved = tomllib.loads((run_dir / "config.toml").read_text())
    rules = saved["env"]["env_config"]
    assert rules["action_mode"] == "weights" and rules["short_selling"] and rules["market_neutral"]
    assert rules["return_windows"] == [5]  # the planted edge's horizon
    assert rules["buy_cost"] == rules["sell_cost"] == pytest.approx(2e-4)
    assert rules["reward_scale"] == pytest.approx(1e-2)
    assert saved["algo_config"]["network"] == "per_stock" and saved["algo_config"]["gamma"] == 0.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--env", "Pendulum-v1", "--preset", "market"], "--preset applies to market data sets (--dataset)"),
        (["--env", "Pendulum-v1", "--preset", "fast"], "unknown preset"),
    ],
)
def test_cli_rejects_a_bad_preset(args: list[str], message: str, tmp_path: Path, capsys) -> None:
    code = main(["train", "--algo", "ppo", str(tmp_path / "run"), *args])
    assert code == 2
    assert message in capsys.readouterr().err


def test_compile_reaches_the_validation_env(tmp_path: Path) -> None:
    """``compile=True`` compiles the validation pass too, not just the training env
    (the validation pass is the larger cost of a short market run)."""
    from market_envs.config import EnvConfig
    from market_fixtures import random_panel

    from trader.agents.evaluator import market_evaluator

    panel = random_panel(n_tickers=3, n_bars=40, seed=2)
    assert market_evaluator(panel, EnvConfig(), compile=True).env.compiled
    assert not market_evaluator(panel, EnvConfig()).env.compiled


def test_compile_validation_compiles_the_validation_pass_only() -> None:
    """``compile="validation"``: the training env stays eager (its results are the eager
    run's), the validation env is compiled; True and False mean "all" and "off"."""
    from market_fixtures import random_panel

    from trader.training_envs import build_envs, compile_choice

    panel = random_panel(n_tickers=3, n_bars=400, seed=2)
    stamps = panel.timestamps
    panel = replace(panel, meta={**panel.meta, "train_end": stamps[200], "val_end": stamps[300]})
    expected = {"off": (False, False), "validation": (False, True), "all": (True, True)}
    for choice, (train_compiled, validation_compiled) in expected.items():
        envs = build_envs(panel, 2, torch.device("cpu"), 0, compile=choice)
        assert (envs.train.compiled, envs.evaluator.env.compiled) == (train_compiled, validation_compiled)
    assert [compile_choice(value) for value in (False, True, "validation")] == ["off", "all", "validation"]
    with pytest.raises(ConfigError, match="compile must be"):
        compile_choice("training")


@pytest.mark.slow
def test_compiled_validation_scores_as_the_eager_one() -> None:
    """The compiled validation pass records the eager one's values (slow: compiles)."""
    from market_envs.config import EnvConfig
    from market_fixtures import random_panel

    from trader.agents import make_agent, make_config
    from trader.agents.evaluator import market_evaluator

    panel = random_panel(n_tickers=3, n_bars=60, seed=2)
    rules = EnvConfig(action_mode="weights", short_selling=True)
    eager, compiled = market_evaluator(panel, rules), market_evaluator(panel, rules, compile=True)
    agent = make_agent("ppo", eager.env.obs_dim, eager.env.act_dim, make_config("ppo", {}), seed=3)
    left, right = eager.run_episodes(agent), compiled.run_episodes(agent)
    torch.testing.assert_close(right.infos["value"], left.infos["value"], rtol=1e-9, atol=1e-6)
    assert right.returns.tolist() == pytest.approx(left.returns.tolist(), rel=1e-5)
