"""`--trade-rate`, `--no-trade-band`, `--weights-map` on `trader train` and `trader tournament`:
bad values and the new action in shares mode are one line and exit code 2, before any training."""

from __future__ import annotations

import pytest

from podracer.cli import main


@pytest.mark.parametrize("command", [["train", "--algo", "ppo"], ["tournament"]])
@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--trade-rate", "1.5"], "--trade-rate must be in [0, 1]"),
        (["--trade-rate", "-0.2", "--preset", "market"], "--trade-rate must be in [0, 1]"),
        (["--no-trade-band", "-0.01", "--preset", "market"], "--no-trade-band must be a weight >= 0"),
        (["--weights-map", "log", "--preset", "market"], "--weights-map must be one of normalized, linear"),
        (["--trade-rate", "0.5"], "--trade-rate: the aim, trade rate and band move a book of target weights"),
        (["--no-trade-band", "0.01"], "--no-trade-band: the aim, trade rate and band move a book of target weights"),
    ],
)
def test_bad_aim_flags_exit_2_with_one_line(command, flags, fragment, tmp_path, capsys):
    args = [*command, str(tmp_path / "run"), "--dataset", "synthetic-edge-daily", *flags]
    if command[0] == "train":
        args += ["--steps", "64"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run" / "config.toml").exists()


def test_the_market_costs_preset_trains_with_the_action_that_can_hold(tmp_path):
    """--preset market-costs: the linear aim, the aim reward and the policy's own trade rate
    (rate_action), recorded in config.toml; --trade-rate (a fixed rate) and --no-trade-band go on top;
    the run's rules read back equal."""
    import tomllib

    from test_train_cli import TINY_EDGE_RECIPE

    from market_envs.config import EnvConfig
    from trader.rundir import recorded_rules
    from podracer.presets import COSTS_LINEAR_SCALE

    recipe = tmp_path / "edge.toml"
    recipe.write_text(TINY_EDGE_RECIPE)
    for flags, rate in (([], 1.0), (["--trade-rate", "0.3", "--no-trade-band", "0.01"], 0.3)):
        run_dir = tmp_path / f"run-{rate}"
        code = main(
            [
                "train",
                "--algo",
                "ppo",
                "--dataset",
                str(recipe),
                "--preset",
                "market-costs",
                "--steps",
                "256",
                "--num-envs",
                "4",
                "--eval-every",
                "0",
                str(run_dir),
                *flags,
            ]
        )
        assert code == 0
        rules = tomllib.loads((run_dir / "config.toml").read_text())["env"]["env_config"]
        assert (rules["weights_map"], rules["reward"], rules["trade_rate"]) == ("linear", "aim", rate)
        assert rules["linear_scale"] == COSTS_LINEAR_SCALE
        assert tomllib.loads((run_dir / "config.toml").read_text())["algo_config"]["init_log_std"] == -0.5
        config = recorded_rules(rules, "config.toml")
        assert isinstance(config, EnvConfig) and config.trade_rate == rate
        assert config.rate_action is (not flags)  # the preset's policy rate; a fixed --trade-rate replaces it
        assert config.no_trade_band == (0.01 if flags else 0.0)
    normalized = tmp_path / "run-normalized"
    code = main(
        ["train", "--algo", "ppo", "--dataset", str(recipe), "--preset", "market-costs", "--weights-map", "normalized"]
        + ["--steps", "256", "--num-envs", "4", "--eval-every", "0", str(normalized)]
    )
    rules = tomllib.loads((normalized / "config.toml").read_text())["env"]["env_config"]
    assert code == 0 and rules["weights_map"] == "normalized" and rules["linear_scale"] == 2.0


def test_capital_rules_keep_a_bars_reward_in_basis_points_of_the_capital():
    """The same return of the book is the same reward at any capital: the change of value (which grows
    with the capital) times the reward scale (which shrinks with it) is the return in basis points."""
    from podracer.presets import REWARD_SCALE, capital_rules

    assert capital_rules(1e6) == {"initial_cash": 1e6, "reward_scale": REWARD_SCALE}
    for capital in (2.5e5, 1e7, 3e9):
        rules = capital_rules(capital)
        change_of_value = 0.0003 * rules["initial_cash"]  # a bar's return of 3 bp
        assert change_of_value * rules["reward_scale"] == pytest.approx(3.0, rel=1e-12)
    for bad in (0.0, -1e6, float("nan")):
        with pytest.raises(ValueError, match="capital must be positive"):
            capital_rules(bad)


def test_tournament_value_refuses_a_capital_that_is_not_positive(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "tournament_value.py"
    done = subprocess.run(
        [sys.executable, str(script), "--capital", "-1", "--seeds", "0", "--out", str(tmp_path / "rows.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "--capital must be positive, got -1.0" in done.stderr
    assert not (tmp_path / "rows.json").exists()


def test_rules_at_capital_keep_each_reward_the_same_share_of_the_capital():
    """From the preset's rules (bp of USD 1 million), from the env's defaults (FinRL's 1e-4 of USD 1
    million), and from rules already moved: the same return of the book is the same reward."""
    from market_envs.config import EnvConfig
    from podracer.presets import REWARD_SCALE, capital_rules, rules_at_capital

    preset = {"reward_scale": REWARD_SCALE, "action_mode": "weights"}
    assert rules_at_capital(preset, 1e7) == {**preset, **capital_rules(1e7)}
    for rules in (preset, None, {"initial_cash": 2.5e5, "reward_scale": 4e-2}):
        base = {"initial_cash": EnvConfig.initial_cash, "reward_scale": EnvConfig.reward_scale, **(rules or {})}
        for capital in (1e5, 1e7):
            moved = rules_at_capital(rules, capital)
            assert moved["initial_cash"] == capital
            reward, moved_reward = (0.0003 * r["initial_cash"] * r["reward_scale"] for r in (base, moved))
            assert moved_reward == pytest.approx(reward, rel=1e-12)
            assert rules_at_capital(moved, base["initial_cash"])["reward_scale"] == pytest.approx(base["reward_scale"])


def test_initial_cash_trains_at_that_capital_and_a_rerun_moves_it_again(tmp_path):
    """``trader train --initial-cash``: config.toml records the capital and the reward scale that keeps
    rewards in basis points of it; ``--config RUN/config.toml --initial-cash`` moves that run's rules."""
    import tomllib

    from test_train_cli import TINY_EDGE_RECIPE

    from podracer.presets import REWARD_SCALE

    recipe = tmp_path / "edge.toml"
    recipe.write_text(TINY_EDGE_RECIPE)
    first, second = tmp_path / "at-1e7", tmp_path / "at-2e7"
    tiny = ["--steps", "256", "--num-envs", "4", "--eval-every", "0"]
    assert (
        main(
            ["train", str(first), "--algo", "ppo", "--dataset", str(recipe), "--preset", "market-costs", *tiny]
            + ["--initial-cash", "1e7"]
        )
        == 0
    )
    rules = tomllib.loads((first / "config.toml").read_text())["env"]["env_config"]
    assert rules["initial_cash"] == 1e7 and rules["reward_scale"] == pytest.approx(REWARD_SCALE / 10)
    assert main(["train", str(second), "--config", str(first / "config.toml"), "--initial-cash", "2e7"]) == 0
    rules = tomllib.loads((second / "config.toml").read_text())["env"]["env_config"]
    assert rules["initial_cash"] == 2e7 and rules["reward_scale"] == pytest.approx(REWARD_SCALE / 20)
