"""The run spec (trader.spec) goes straight down: ``--costs MODEL`` reaches the env's
rules as the same `CostModel` object (never through a dict), and a walk-forward fold's
windows reach the env as the same bar positions (never through timestamps), with no
step reading back from the fold's config.toml what its caller holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from market_envs.costs import NamedCosts, cost_model
from market_envs.data import MarketData
from market_envs.config import EnvConfig
from market_envs.env import StockTradingVecEnv
from market_fixtures import random_panel, write_tiny_recipe
from trader import rundir
from podracer.cli import main
from trader.errors import ConfigError
from trader.folds import FoldSpec, Windows, make_folds
from trader.spec import MarketSpec, market_spec
from podracer.walkforward import fold_dir, walk_forward

TINY_PPO = {"num_steps": 16, "update_epochs": 1, "num_minibatches": 2, "hidden_sizes": (8,)}


@pytest.fixture
def envs_built(monkeypatch) -> list[tuple[MarketData, EnvConfig]]:
    """Every `StockTradingVecEnv` built: its panel and its rules, as it was given them."""
    built: list[tuple[MarketData, EnvConfig]] = []
    init = StockTradingVecEnv.__init__

    def spy(self, data, num_envs, device="cpu", config=None, compile=False):
        built.append((data, config))
        init(self, data, num_envs, device, config, compile)

    monkeypatch.setattr(StockTradingVecEnv, "__init__", spy)
    return built


@pytest.fixture
def no_round_trips(monkeypatch) -> list[Path]:
    """Windows may not be found from timestamps (`MarketData.with_periods`,
    `Windows.from_periods`); returns the TOML files read, as they are read."""
    read: list[Path] = []
    read_toml = rundir.read_toml

    def spy_read(path, *args, **kwargs):
        read.append(Path(path))
        return read_toml(path, *args, **kwargs)

    def refuse_periods(self, periods):
        if periods:
            raise AssertionError(f"windows went through timestamps: with_periods({periods})")
        return self

    def refuse_from_periods(cls, periods, timestamps):
        raise AssertionError("windows found again from timestamps")

    monkeypatch.setattr(rundir, "read_toml", spy_read)
    monkeypatch.setattr(MarketData, "with_periods", refuse_periods)
    monkeypatch.setattr(Windows, "from_periods", classmethod(refuse_from_periods))
    return read


# --------------------------------------------------------------------------- --costs


def test_costs_reach_the_env_as_the_same_cost_model_object(tmp_path: Path, envs_built, monkeypatch) -> None:
    import podracer.cli.train as cli_train

    named: list[NamedCosts] = []
    flags = cli_train.cost_flags

    def spy_flags(*args):
        cost, model = flags(*args)
        named.append(model)
        return cost, model

    monkeypatch.setattr(cli_train, "cost_flags", spy_flags)
    (tmp_path / "ppo.toml").write_text("num_steps = 16\nupdate_epochs = 1\nnum_minibatches = 2\nhidden_sizes = [8]\n")
    code = main(
        [
            "train",
            str(tmp_path / "run"),
            "--algo",
            "ppo",
            "--dataset",
            str(write_tiny_recipe(tmp_path)),
            "--costs",
            "institutional",
            "--cost-set",
            "participation=0.05",
            "--steps",
            "32",
            "--num-envs",
            "2",
            "--eval-every",
            "0",
            "--config",
            str(tmp_path / "ppo.toml"),
        ]
    )
    assert code == 0
    (model,) = named
    assert model.costs.participation == 0.05 and model.costs.impact_eta == cost_model("institutional").costs.impact_eta
    assert len(envs_built) == 2  # the training env and the validation env
    for _, rules in envs_built:
        assert rules.costs is model.costs  # the object the flag made, not one rebuilt from a dict
        assert (rules.buy_cost, rules.sell_cost) == (model.buy_cost, model.sell_cost)
    recorded = rundir.read_toml(tmp_path / "run" / rundir.CONFIG)["env"]
    assert recorded["cost_model"] == model.name == "institutional (participation=0.05)"


def test_train_hands_its_start_up_the_config_it_wrote_without_reading_it_back(tmp_path: Path, no_round_trips) -> None:
    """`trader train` prints the run's settings from the values it holds: config.toml is written, not read."""
    code = main(
        ["train", str(tmp_path / "run"), "--algo", "ppo", "--dataset", str(write_tiny_recipe(tmp_path))]
        + ["--steps", "32", "--num-envs", "2", "--eval-every", "0"]
    )
    assert code == 0 and (tmp_path / "run" / rundir.CONFIG).is_file()
    assert tmp_path / "run" / rundir.CONFIG not in no_round_trips


def test_the_values_handed_to_on_start_are_what_config_toml_reads_back(tmp_path: Path) -> None:
    import trader

    handed: list[dict] = []
    recipe = write_tiny_recipe(tmp_path)
    config = {"num_steps": 16, "update_epochs": 1, "num_minibatches": 2, "hidden_sizes": [8]}
    trader.train(
        "ppo", str(recipe), config, tmp_path / "run", steps=32, num_envs=2, eval_every=0, on_start=handed.append
    )
    assert handed == [rundir.read_toml(tmp_path / "run" / rundir.CONFIG)]


def test_market_spec_sets_a_rate_or_a_model_on_the_rules_as_objects() -> None:
    named = cost_model("retail")
    spec = market_spec("tiny-recipe-by-name", {"action_mode": "weights"}, costs=named)
    assert spec.rules.action_mode == "weights" and spec.rules.costs is named.costs
    assert spec.rules.buy_cost == named.buy_cost and spec.windows is None
    rated = market_spec("tiny-recipe-by-name", spec.rules, cost=2e-4)
    assert (rated.rules.buy_cost, rated.rules.sell_cost) == (2e-4, 2e-4) and rated.rules.costs is named.costs
    with pytest.raises(ConfigError, match="not both"):
        market_spec("tiny-recipe-by-name", cost=1e-4, costs=named)
    with pytest.raises(ConfigError, match="gymnasium"):
        market_spec("Pendulum-v1")
    with pytest.raises(ConfigError, match="EnvConfig"):
        MarketSpec("x", {"buy_cost": 0.0})  # type: ignore[arg-type]


# --------------------------------------------------------------------------- bar windows


def test_bar_windows_cut_the_panel_as_the_recorded_periods_do() -> None:
    data = random_panel(n_tickers=3, n_bars=60, seed=4)
    windows = Windows((10, 30), (32, 40), (40, 50))
    cut = data.with_windows(windows.as_dict())
    by_periods = data.with_periods(windows.periods(data.timestamps))
    assert cut.features.data_ptr() == data.features.data_ptr()  # a view
    for name in ("train", "validation", "test"):
        lo, hi = windows.window(name)
        assert cut.period(name).timestamps.equals(data.timestamps[lo:hi])
        assert cut.period(name).timestamps.equals(by_periods.period(name).timestamps)
    assert torch.equal(cut.feature_mean, by_periods.feature_mean) and torch.equal(
        cut.feature_std, by_periods.feature_std
    )
    assert cut.meta["periods"] == by_periods.meta["periods"]  # what config.toml records: the same
    assert Windows.from_periods(cut.meta["periods"], data.timestamps) == windows  # a run file read back: the same bars
    assert "windows" not in cut.with_periods(by_periods.meta["periods"]).meta  # bounds replace windows whole
    with pytest.raises(Exception, match="not inside"):
        data.with_windows({"train": (0, 10), "validation": (10, 20), "test": (20, 61)})


def test_a_folds_windows_reach_every_env_as_the_same_bar_positions_and_no_step_rereads_its_config(
    tmp_path: Path, envs_built, no_round_trips, monkeypatch
) -> None:
    from test_walkforward import daily_frame, write_daily_recipe

    import trader.backtesting.groups as groups

    def refuse_recorded_rules(meta, path, default):
        raise AssertionError(f"a fold's checkpoint rules were read back from its files ({path})")

    monkeypatch.setattr(groups, "_checkpoint_env_rules", refuse_recorded_rules)  # the fold holds them
    recipe = write_daily_recipe(tmp_path / "recipe", daily_frame())
    folds = FoldSpec("10m", "2m", "2m")
    rules = cost_model("retail").apply(EnvConfig())
    result = walk_forward(
        tmp_path / "run",
        str(recipe),
        folds,
        "ppo",
        seed=1,
        algo_config=TINY_PPO,
        steps=32,
        num_envs=2,
        eval_every=0,
        env_config=rules,
    )
    assert [path for path in no_round_trips if path.name == rundir.CONFIG] == []  # no step read a fold's config.toml
    from trader.environments import load_market

    data = load_market(str(recipe))
    plan = make_folds(data.timestamps, folds)
    assert len(plan) == len(result.folds) == 2
    spans = {(data_.timestamps[0], data_.timestamps[-1], data_.num_bars) for data_, _ in envs_built}
    for fold in plan:
        for name in ("train", "validation", "test"):
            lo, hi = fold.window(name)
            assert (data.timestamps[lo], data.timestamps[hi - 1], hi - lo) in spans, (fold.index, name)
        # what the fold's run directory records is the windows' first and last bars
        assert result.folds[fold.index]["windows"] == fold.periods(data.timestamps)
        assert rundir.read_toml(fold_dir(result.run_dir, fold.index) / rundir.CONFIG)["env"]["periods"] == fold.periods(
            data.timestamps
        )
    assert all(env_rules.costs is rules.costs for _, env_rules in envs_built)  # the walk-forward's rules, as given


def test_a_tournament_folds_pods_are_cut_to_its_bar_windows_not_its_timestamps(tmp_path: Path, no_round_trips) -> None:
    """A tournament learner's fold: the fold's `MarketSpec` travels as it is from `TournamentConfig`
    to each `PodSpec` (and through the pod's JSON, as a worker gets it) and into the pod's data,
    never back from timestamps."""
    from test_walkforward import daily_frame, write_daily_recipe

    from tournament import TournamentConfig
    from tournament.generator import PodGenerator
    from tournament.leaderboard import Leaderboard
    from tournament.pod import PodSpec
    from trader.environments import load_market

    recipe = str(write_daily_recipe(tmp_path / "recipe", daily_frame()))
    data = load_market(recipe)
    fold = make_folds(data.timestamps, FoldSpec("10m", "2m", "2m"))[1]
    market = market_spec(recipe, costs=cost_model("retail")).with_windows(fold.windows)
    config = TournamentConfig(run_dir=str(tmp_path / "t"), env=market)
    spec = PodGenerator(config).next_spec(0, Leaderboard(config.population))
    assert spec.env is market
    sent = PodSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert sent == spec and sent.env.rules.costs == market.rules.costs
    assert TournamentConfig.from_dict(rundir.toml_ready(config.to_dict())).env == market  # tournament.toml's round trip
    cut = sent.env.data()  # with_periods would fail here (no_round_trips)
    for name in ("train", "validation", "test"):
        lo, hi = fold.window(name)
        part = cut.period(name)
        assert (part.timestamps[0], part.timestamps[-1], part.num_bars) == (
            data.timestamps[lo],
            data.timestamps[hi - 1],
            hi - lo,
        )


def test_a_folds_baselines_train_on_its_spec_without_reading_its_files(
    tmp_path: Path, envs_built, no_round_trips
) -> None:
    pytest.importorskip("stable_baselines3")
    from trader.environments import load_market
    from trader.libraries import baselines

    recipe = write_tiny_recipe(tmp_path)
    bars = load_market(str(recipe)).num_bars
    windows = Windows((0, bars // 2), (bars // 2, 3 * bars // 4), (3 * bars // 4, bars))
    spec = market_spec(str(recipe), costs=cost_model("retail")).with_windows(windows)
    result = baselines(tmp_path / "fold", ("sb3",), ("ppo",), steps=64, seeds=[0], spec=spec, backtest=False)
    assert [o.status for o in result.outcomes] == ["finished"]
    data = load_market(str(recipe))
    spans = {(d.timestamps[0], d.num_bars) for d, _ in envs_built}
    for name in ("train", "validation"):
        lo, hi = windows.window(name)
        assert (data.timestamps[lo], hi - lo) in spans
    assert all(rules.costs is spec.rules.costs for _, rules in envs_built)
    assert no_round_trips == []
    # the fold's test step: the baseline trades under the rules the fold holds, not its sidecar's
    from trader.backtesting.runs import read_run, run_strategies

    (baseline,) = run_strategies(read_run(tmp_path / "fold", spec)).values()
    assert baseline.env_config is spec.rules
    (recorded,) = run_strategies(read_run(tmp_path / "fold")).values()  # no spec: read from its files
    assert recorded.env_config is not spec.rules and recorded.env_config.costs == spec.rules.costs


def test_a_run_on_bar_windows_trains_again_bit_for_bit_from_its_config_toml(tmp_path: Path) -> None:
    from test_reproduce import assert_same_weights

    from trader.environments import load_market
    from trader.training import train

    recipe = write_tiny_recipe(tmp_path)
    bars = load_market(str(recipe)).num_bars
    windows = Windows((5, bars // 2), (bars // 2, 3 * bars // 4), (3 * bars // 4, bars))
    spec = market_spec(str(recipe), {"action_mode": "weights"}, costs=cost_model("retail")).with_windows(windows)
    train("ppo", spec, TINY_PPO, tmp_path / "first", steps=64, num_envs=2, eval_every=32, seed=2)
    recorded = rundir.read_toml(tmp_path / "first" / rundir.CONFIG)
    assert Windows.from_periods(recorded["env"]["periods"], load_market(str(recipe)).timestamps) == windows
    assert main(["train", str(tmp_path / "again"), "--config", str(tmp_path / "first" / rundir.CONFIG)]) == 0
    assert_same_weights(tmp_path / "first", tmp_path / "again")
    assert rundir.read_toml(tmp_path / "again" / rundir.CONFIG) == recorded


# --------------------------------------------------------------------------- the codec and older files


def test_a_market_spec_round_trips_through_json_and_toml() -> None:
    """`MarketSpec.to_dict` / `from_dict`: the rules (a cost model's objects included) and the bar
    windows come back equal, through strict JSON and through TOML."""
    spec = market_spec("tiny-recipe-by-name", {"action_mode": "weights"}, costs=cost_model("retail"))
    for windowed in (spec, spec.with_windows(Windows((0, 10), (10, 20), (20, 30)))):
        assert MarketSpec.from_dict(json.loads(json.dumps(windowed.to_dict()))) == windowed
        text = rundir.toml_ready({"env": windowed.to_dict()})
        assert MarketSpec.from_dict(text["env"]) == windowed
    assert "windows" not in spec.to_dict()
    with pytest.raises(ConfigError, match="dataset, rules and windows"):
        MarketSpec.from_dict({"dataset": "x", "env_config": {}})
    with pytest.raises(ConfigError, match="windows needs"):
        MarketSpec.from_dict({"dataset": "x", "windows": {"train": [0, 1]}})


def test_a_tournament_toml_and_a_pod_spec_of_the_older_form_still_load(tmp_path: Path) -> None:
    """tournament.toml and a pod's spec (pods.parquet, events.jsonl) of runs written before the market
    was one value: ``env`` a name beside ``env_config``, ``periods`` and ``windows``; read into the
    same `MarketSpec`, written back in the new form. A gymnasium id stays a name."""
    from tournament import TournamentConfig
    from tournament.pod import PodSpec

    windows = {"train": [0, 10], "validation": [10, 20], "test": [20, 30]}
    old = {"env": "tiny-recipe-by-name", "env_config": {"buy_cost": 2e-4}}
    config = TournamentConfig.from_dict({**old, "run_dir": str(tmp_path), "periods": {}, "windows": windows})
    assert config.env == MarketSpec(
        "tiny-recipe-by-name", EnvConfig(buy_cost=2e-4), Windows((0, 10), (10, 20), (20, 30))
    )
    written = config.to_dict()
    assert "env_config" not in written and "windows" not in written and written["env"]["windows"] == windows
    assert TournamentConfig.from_dict(written) == config
    gym = TournamentConfig.from_dict({"env": "Pendulum-v1", "env_config": {}, "periods": {}, "windows": {}})
    assert gym.env == "Pendulum-v1" and gym.to_dict()["env"] == "Pendulum-v1" and gym.market is None
    assert TournamentConfig(env="tiny-recipe-by-name").env == market_spec("tiny-recipe-by-name")
    pod = {"pod_id": "p0000", "index": 0, "algo": "ppo", "algo_config": {}, "steps": 64, "seed": 1}
    spec = PodSpec.from_dict({**pod, **old, "periods": None, "windows": windows})
    assert spec.env == config.env and PodSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert PodSpec.from_dict({**pod, "env": "Pendulum-v1", "env_config": {}}).env == "Pendulum-v1"
