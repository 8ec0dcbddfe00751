"""Tournament parts without a cluster: leaderboard, events, generator, config, ensemble.

The cluster tests (worker killed, orchestrator killed and resumed, elastic workers,
reproducibility) are in tests/test_tournament_cluster.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from tournament.config import TournamentConfig
from trader.agents.ensemble import EnsemblePolicy
from tournament.events import EventLog
from tournament.generator import PodGenerator, perturb, pod_seed_sequence, select_parent
from tournament.leaderboard import Entry, Leaderboard, lineage
from tournament.orchestrator import TournamentState
from tournament.pod import PodResult, PodSpec
from trader.agents import get_spec, make_agent
from trader.agents.base import Bound
from trader.errors import ConfigError, UserError


def entry(index: int, score: float, algo: str = "ppo", parent: str | None = None, **hyper) -> Entry:
    return Entry(
        pod_id=f"p{index:04d}",
        index=index,
        algo=algo,
        score=score,
        generation=0 if parent is None else 1,
        parent_id=parent,
        hyperparameters=hyper or {"learning_rate": 3e-4},
        checkpoint=f"pods/p{index:04d}/checkpoints/best",
        score_history=[(10.0, score)],
    )


# --------------------------------------------------------------------------- leaderboard


def test_leaderboard_ranks_best_first_and_evicts_the_worst() -> None:
    board = Leaderboard(3)
    assert board.consider(entry(0, 1.0)) == (True, [])
    board.consider(entry(1, 3.0))
    board.consider(entry(2, -2.0))
    entered, evicted = board.consider(entry(3, 2.0))
    assert entered and [e.pod_id for e in evicted] == ["p0002"]
    assert [e.pod_id for e in board.ranked()] == ["p0001", "p0003", "p0000"]
    entered, evicted = board.consider(entry(4, 0.5))  # worse than every entry of a full board
    assert not entered and evicted == []
    assert board.best().pod_id == "p0001" and [e.pod_id for e in board.top(2)] == ["p0001", "p0003"]


def test_leaderboard_ties_keep_the_earlier_pod_and_nan_ranks_last() -> None:
    board = Leaderboard(4)
    for e in (entry(5, math.nan), entry(3, 1.0), entry(1, 1.0), entry(2, -math.inf)):
        board.consider(e)
    assert [e.pod_id for e in board.ranked()] == ["p0001", "p0003", "p0002", "p0005"]
    with pytest.raises(UserError, match="already"):
        board.consider(entry(1, 9.0))


def test_leaderboard_round_trips_through_json(tmp_path: Path) -> None:
    board = Leaderboard(5)
    for index, score in enumerate([0.3, math.nan, -1.5, 2.25]):
        board.consider(entry(index, score, algo=("ppo", "sac")[index % 2], parent="p0009" if index else None))
    path = tmp_path / "leaderboard.json"
    board.save(path)
    json.loads(path.read_text())  # strict JSON: no NaN literal
    assert "NaN" not in path.read_text()
    loaded = Leaderboard.load(path)
    assert loaded.capacity == 5
    assert [e.to_dict() for e in loaded.ranked()] == [e.to_dict() for e in board.ranked()]
    assert not list(tmp_path.glob(".*tmp*"))  # written under a temporary name, then renamed


def test_leaderboard_load_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="absent.json: not found"):
        Leaderboard.load(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(UserError, match="bad.json"):
        Leaderboard.load(tmp_path / "bad.json")


def test_lineage_follows_parents_to_the_root() -> None:
    parents = {"p3": "p1", "p1": "p0", "p0": None, "p2": "p0"}
    assert lineage("p3", parents) == ["p3", "p1", "p0"]
    assert lineage("p0", parents) == ["p0"]


# --------------------------------------------------------------------------- events


def test_event_log_skips_a_torn_last_line(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    log.append("submitted", pod_id="p0000", spec={"x": 1})
    log.append("finished", pod_id="p0000", result={"score": math.nan})
    with log.path.open("a") as handle:
        handle.write('{"kind": "finished", "pod_')  # a crash in the middle of a write
    events = log.read()
    assert [e["kind"] for e in events] == ["submitted", "finished"]
    assert events[1]["result"]["score"] is None


# --------------------------------------------------------------------------- generator


@pytest.mark.parametrize(
    "scores",
    [
        [5.0, 4.0, 3.0, 2.0, 1.0, 0.5, 0.2, 0.1],
        [-0.1, -0.2, -1.0, -2.0, -3.0, -4.0, -5.0, -9.0],
        [3.0, -3.0, 2.0, -2.0, 1.0, -1.0, 0.0, -9.0],
    ],
)
def test_parents_come_only_from_the_top_fraction(scores: list[float]) -> None:
    board = Leaderboard(8)
    for index, score in enumerate(scores):
        board.consider(entry(index, score))
    best_two = {e.pod_id for e in sorted(board.ranked(), key=lambda e: -e.score)[:2]}
    rng = np.random.default_rng(0)
    drawn = {select_parent(board, "ppo", 0.25, rng).pod_id for _ in range(200)}
    assert drawn == best_two  # both drawn, nothing else: never the bottom of the board


def test_parents_are_of_the_pods_algorithm_and_at_least_one() -> None:
    board = Leaderboard(8)
    board.consider(entry(0, 9.0, algo="sac"))
    board.consider(entry(1, -5.0, algo="ppo"))
    rng = np.random.default_rng(1)
    assert select_parent(board, "ppo", 0.1, rng).pod_id == "p0001"
    assert select_parent(board, "td3", 0.5, rng) is None


def test_perturbation_stays_within_the_bounds() -> None:
    rng = np.random.default_rng(2)
    for algo in ("ppo", "sac", "td3"):
        bounds = get_spec(algo).mutation_bounds
        assert bounds, f"{algo} declares no MUTATION_BOUNDS"
        values = {key: bound.low for key, bound in bounds.items()}
        for _ in range(50):
            values = perturb(values, bounds, 0.5, rng)
            for key, bound in bounds.items():
                assert bound.low <= values[key] <= bound.high, (algo, key, values[key])
                if bound.integer:
                    assert isinstance(values[key], int)


def test_perturbation_moves_in_log_space_and_leaves_other_keys() -> None:
    bounds = {"lr": Bound(1e-5, 1e-1, "log")}
    rng = np.random.default_rng(3)
    moved = [perturb({"lr": 1e-3, "hidden_sizes": (64, 64)}, bounds, 0.1, rng) for _ in range(400)]
    logs = np.log10([m["lr"] for m in moved])
    assert abs(np.median(logs) + 3.0) < 0.1  # centred on the parent's value in log space
    assert 0.3 < logs.std() < 0.5  # 0.1 x 4 decades
    assert all(m["hidden_sizes"] == (64, 64) for m in moved)


def test_a_value_set_outside_its_bound_is_kept() -> None:
    bounds = get_spec("ppo").mutation_bounds
    parent = {"gamma": 0.0, "gae_lambda": 0.0, "learning_rate": 3e-4}
    for seed in range(20):
        child = perturb(parent, bounds, 0.5, np.random.default_rng(seed))
        assert child["gamma"] == 0.0 and child["gae_lambda"] == 0.0
        assert child["learning_rate"] != 3e-4


def _config(**changes) -> TournamentConfig:
    return TournamentConfig(**{"run_dir": "unused", "env": "Pendulum-v1", "pods": 4, **changes})


def test_generator_is_a_function_of_seed_and_index() -> None:
    board = Leaderboard(4)
    board.consider(entry(0, 1.0, **{"learning_rate": 3e-4}))
    generator = PodGenerator(_config(fresh_probability=0.0, algos=("ppo",)))
    first, again = generator.next_spec(7, board), generator.next_spec(7, board)
    assert first == again and first.pod_id == "p0007" and first.index == 7
    assert first.parent_id == "p0000" and first.generation == 1
    assert first.parent_checkpoint == "pods/p0000/checkpoints/best"
    assert first.algo_config["learning_rate"] != 3e-4
    assert first.seed == int(pod_seed_sequence(0, 7).generate_state(1)[0])
    assert generator.next_spec(8, board).seed != first.seed


def test_every_pod_spec_carries_the_tournaments_compile_flag() -> None:
    board = Leaderboard(4)
    board.consider(entry(0, 1.0, **{"learning_rate": 3e-4}))
    generator = PodGenerator(_config(algos=("ppo",), compile=True))
    specs = [generator.next_spec(index, board) for index in range(12)]
    assert {spec.parent_id is None for spec in specs} == {True, False}  # fresh pods and children
    assert all(spec.compile for spec in specs)
    assert PodSpec.from_dict(specs[0].to_dict()) == specs[0]
    saved = {key: value for key, value in specs[0].to_dict().items() if key != "compile"}
    assert PodSpec.from_dict(saved).compile is False  # pods.parquet written before the flag resumes


def test_pods_carry_compile_validation_and_a_bad_choice_is_refused() -> None:
    generator = PodGenerator(_config(algos=("ppo",), compile="validation"))
    spec = generator.next_spec(0, Leaderboard(4))
    assert spec.compile == "validation"
    assert PodSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    with pytest.raises(ConfigError, match="compile must be"):
        _config(compile="training")


def test_generator_follows_the_algorithm_mix_and_fresh_probability() -> None:
    board = Leaderboard(4)
    board.consider(entry(0, 1.0, **{"learning_rate": 3e-4}))
    mixed = PodGenerator(_config(algo_mix=(2.0, 1.0, 1.0)))
    algos = [mixed.next_spec(i, Leaderboard(4)).algo for i in range(60)]
    assert algos[:8] == ["ppo", "sac", "td3", "ppo", "ppo", "sac", "td3", "ppo"]
    for first in range(1, 61):  # every prefix holds each algorithm's share within one pod
        counts = [algos[:first].count(a) for a in ("ppo", "sac", "td3")]
        assert all(abs(c - share * first) < 1 for c, share in zip(counts, (0.5, 0.25, 0.25), strict=True))
    even = PodGenerator(_config())
    assert [even.next_spec(i, Leaderboard(4)).algo for i in range(6)] == ["ppo", "sac", "td3"] * 2
    none_of_sac = PodGenerator(_config(algo_mix=(1.0, 0.0, 1.0)))
    assert [none_of_sac.next_spec(i, Leaderboard(4)).algo for i in range(6)] == ["ppo", "td3"] * 3
    always_fresh = PodGenerator(_config(algos=("ppo",), fresh_probability=1.0))
    assert all(always_fresh.next_spec(i, board).parent_id is None for i in range(20))
    never_fresh = PodGenerator(_config(algos=("ppo",), fresh_probability=0.0))
    assert all(never_fresh.next_spec(i, board).parent_id == "p0000" for i in range(20))


# --------------------------------------------------------------------------- config, state


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ConfigError, match="unknown algorithm"):
        _config(algos=("ppo", "dqn"))
    with pytest.raises(ConfigError, match="population"):
        _config(population=0)
    with pytest.raises(ConfigError, match="unknown PPOConfig key"):
        _config(algo_configs={"ppo": {"learning_rte": 1e-3}})
    with pytest.raises(UserError, match="unknown TournamentConfig key"):
        TournamentConfig.from_dict({"populaton": 3})
    with pytest.raises(ConfigError, match="give a stop"):
        _config(pods=None)
    assert TournamentConfig.from_dict(_config(algo_mix=(1, 0, 1)).to_dict()) == _config(algo_mix=(1, 0, 1))


def test_state_replays_its_log_without_doubling_a_pod(tmp_path: Path) -> None:
    config = TournamentConfig(run_dir=str(tmp_path), env="Pendulum-v1", pods=3, population=2)
    state = TournamentState(config)
    specs = [PodSpec(f"p{i:04d}", i, "ppo", {"learning_rate": 3e-4}, "Pendulum-v1", 64, seed=i) for i in range(3)]
    for spec in specs:
        state.submitted(spec)
    state.ended(PodResult("p0000", "finished", score=1.0, checkpoint="c0", steps=64))
    state.ended(PodResult("p0001", "failed", error="boom"))
    state.log.append("finished", pod_id="p0000", result=PodResult("p0000", "finished", score=5.0).to_dict())
    replayed = TournamentState.replay(config)
    assert [s.pod_id for s in replayed.in_flight()] == ["p0002"]
    assert replayed.counts() == (1, 1)
    assert [e.pod_id for e in replayed.board.ranked()] == ["p0000"] and replayed.board.best().score == 1.0
    assert replayed.board == Leaderboard.load(tmp_path / "leaderboard.json")
    assert replayed.next_index == 3


# --------------------------------------------------------------------------- ensemble


def test_ensemble_acts_as_the_mean_of_its_members() -> None:
    members = [make_agent("td3", 5, 3, {"hidden_sizes": (8,)}, seed=s) for s in range(3)]
    ensemble = EnsemblePolicy(members)
    obs = torch.randn(4, 5)
    expected = torch.stack([m.act(obs, deterministic=True) for m in members]).mean(dim=0)
    assert torch.allclose(ensemble.act(obs), expected)
    assert ensemble.act(obs).abs().max() <= 1.0
    with pytest.raises(UserError, match="differ"):
        EnsemblePolicy([members[0], make_agent("td3", 6, 3, {"hidden_sizes": (8,)})])


# --------------------------------------------------------------------------- CLI


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--algos", "ppo,dqn"], "unknown algorithm(s) ['dqn']"),
        (["--population", "0"], "population must be >= 1"),
        (["--gpus", "all"], "--gpus needs a CUDA device"),
        (["--time-budget", "soon"], "--time-budget must be a duration"),
        (["--dataset", "x", "--env", "Pendulum-v1"], "not both"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(args: list[str], message: str, tmp_path: Path, capsys) -> None:
    from podracer.cli import main

    if "--gpus" in args and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    env = [] if "--env" in args else ["--env", "Pendulum-v1"]
    code = main(["tournament", str(tmp_path / "run"), *env, *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "run").exists()  # nothing written for bad input


def test_cli_rejects_a_config_key_that_does_not_exist(tmp_path: Path, capsys) -> None:
    from podracer.cli import main

    config = tmp_path / "t.toml"
    config.write_text("populaton = 4\n")
    assert main(["tournament", str(tmp_path / "run"), "--env", "Pendulum-v1", "--config", str(config)]) == 2
    assert "unknown TournamentConfig key(s): populaton" in capsys.readouterr().err


def test_cli_resume_needs_a_tournament(tmp_path: Path, capsys) -> None:
    from podracer.cli import main

    (tmp_path / "plain").mkdir()
    assert main(["tournament", str(tmp_path / "plain"), "--resume"]) == 2
    assert "holds no tournament" in capsys.readouterr().err


def test_cli_unreachable_scheduler_exits_2(tmp_path: Path, capsys, monkeypatch) -> None:
    from tournament import cluster
    from podracer.cli import main

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", 1.0)  # seconds
    args = ["tournament", str(tmp_path / "run"), "--env", "Pendulum-v1", "--scheduler", "tcp://127.0.0.1:9"]
    assert main(args) == 2
    err = capsys.readouterr().err
    # one line naming the address, whether the refused connect or the timeout comes first
    assert (
        "cannot reach the dask scheduler at tcp://127.0.0.1:9" in err
        or "no dask scheduler answered at tcp://127.0.0.1:9" in err
    ), err
    assert not (tmp_path / "run").exists()


def test_cli_refuses_to_start_over_a_tournament(tmp_path: Path, capsys) -> None:
    from podracer.cli import main

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "events.jsonl").write_text("")
    assert main(["tournament", str(tmp_path / "run"), "--env", "Pendulum-v1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds a tournament already (events.jsonl): pass --resume" in err and len(err.splitlines()) == 1


def test_the_market_preset_fills_rules_and_configs_under_the_keys_given(tmp_path: Path) -> None:
    from test_train_cli import TINY_EDGE_RECIPE

    from podracer.presets import apply_preset

    recipe = tmp_path / "edge.toml"
    recipe.write_text(TINY_EDGE_RECIPE)
    values = {
        "env": str(recipe),
        "algos": ("ppo", "td3"),
        "pod_steps": 4096,
        "num_envs": 16,
        "algo_configs": {"ppo": {"learning_rate": 1e-3}, "sac": {"tau": 0.01}},
        "env_config": {"episode_length": 50},
    }
    values["env_config"], values["algo_configs"] = apply_preset(
        "market",
        values["env"],
        0.0002,
        values["algos"],
        steps=4096,
        num_envs=16,
        env_config=values["env_config"],
        algo_configs=values["algo_configs"],
    )
    rules = values["env_config"]
    assert rules["action_mode"] == "weights" and rules["market_neutral"] and list(rules["return_windows"]) == [5]
    assert rules["buy_cost"] == pytest.approx(2e-4) and rules["episode_length"] == 50  # the given key stays
    assert (
        values["algo_configs"]["ppo"]["learning_rate"] == 1e-3
        and values["algo_configs"]["ppo"]["network"] == "per_stock"
    )
    assert values["algo_configs"]["td3"]["updates_per_step"] == pytest.approx(1 / 16)
    assert values["algo_configs"]["sac"] == {"tau": 0.01}  # an algorithm outside the pool is left as given
    TournamentConfig.from_dict({**values, "run_dir": str(tmp_path / "t"), "pods": 1})  # a valid config


# --------------------------------------------------------------------------- interrupts and resumes


def test_the_pods_per_hour_of_a_resumed_run_are_this_sessions() -> None:
    """A resumed run's rate: the pods it finished, over its own clock (the earlier sessions' 30 pods
    over this session's 36 s read 3,000 pods/h); the line says so."""
    from dataclasses import replace

    from tournament.orchestrator import Progress
    from podracer.cli.tournament import progress_line

    resumed = Progress(30, 0, 1, 1, 1.0, "ppo", elapsed=36.0, done_here=1, resumed=True)
    assert resumed.pods_per_hour == pytest.approx(100.0)
    assert progress_line(resumed).endswith("best 1 (ppo), 100 pods/h this session")
    assert progress_line(replace(resumed, done=1, resumed=False)).endswith("best 1 (ppo), 100 pods/h")


@pytest.mark.parametrize(
    "stage, target", [("pods", "_session"), ("ensemble", "select_result"), ("backtest", "_final_backtest")]
)
def test_an_interrupt_at_any_stage_ends_the_run_saying_where(tmp_path: Path, monkeypatch, stage, target) -> None:
    from market_fixtures import write_tiny_recipe

    from tournament import orchestrator

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(orchestrator, "_session", lambda *args: ("pods", 1.0))  # no cluster: no pod ran
    monkeypatch.setattr(orchestrator, target, interrupt)
    config = TournamentConfig(run_dir=str(tmp_path / "run"), env=str(write_tiny_recipe(tmp_path)), pods=2)
    with pytest.raises(orchestrator.Interrupted) as caught:
        orchestrator.run(config)
    assert isinstance(caught.value, KeyboardInterrupt) and caught.value.stage == stage
    words = "while training pods (0 pods finished, 0 failed, 0 in flight" if stage == "pods" else "during the "
    assert caught.value.where().startswith(words) and str(tmp_path / "run") in str(caught.value)


@pytest.mark.parametrize("stage", ["pods", "backtest", "report"])
def test_the_cli_says_in_one_line_where_an_interrupt_stopped_and_what_resumes(
    tmp_path: Path, monkeypatch, capsys, stage
) -> None:
    import tournament
    from tournament import cluster
    from tournament.orchestrator import Interrupted
    from podracer.cli import main
    from podracer.cli import tournament as command

    run_dir = tmp_path / "run"

    def interrupt(*args, **kwargs):
        if stage == "report":
            raise KeyboardInterrupt
        raise Interrupted(run_dir, stage, 2, 1, 1)

    monkeypatch.setattr(cluster, "connect_for", lambda config: None)
    monkeypatch.setattr(cluster, "close", lambda client: None)
    monkeypatch.setattr(tournament, "run", (lambda *args, **kwargs: None) if stage == "report" else interrupt)
    monkeypatch.setattr(command, "_print_result", interrupt)
    assert main(["tournament", str(run_dir), "--env", "Pendulum-v1", "--pods", "4"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    where = {
        "pods": "while training pods (2 pods finished, 1 failed, 1 in flight, run again on resume); resume with: ",
        "backtest": "during the final backtest (2 pods finished, 1 failed; none left to train); resume with: ",
        "report": "while printing the results; the tournament finished: see ",
    }[stage]
    tail = f"{run_dir / 'report.md'}" if stage == "report" else f"trader tournament {run_dir} --resume"
    assert err[-1] == f"interrupted (SIGINT) {where}{tail}", err
    assert sum("interrupted" in line for line in err) == 1 and "Traceback" not in "\n".join(err)
