"""The tournament's result: membership by evidence, the ensemble as one more trial, the
best pod only where its lead is more than luck; random search; what a child inherits.

Known answers on hand-made validation records, then one real tiny tournament whose
pods' validation records are replaced by records of known strength, so that which
pods clear the bar is known.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from market_envs.config import EnvConfig
from market_envs.kernel import aim_weights
from tournament import TournamentConfig
from tournament.generator import PodGenerator, perturb, sample
from tournament.leaderboard import Entry, Leaderboard
from tournament.selection import (
    MEMBERSHIP_PSR,
    Candidate,
    candidates,
    choose,
    ensemble_record,
    member_weights,
    members,
    select,
)
from trader import rundir
from trader.agents import get_spec, make_agent
from trader.agents.ensemble import EnsemblePolicy
from trader.errors import UserError

DAYS = pd.bdate_range("2023-01-02", periods=120)
DAILY_RECIPE = """
name = "tiny-daily"
description = "4 synthetic tickers, daily bars over a year and a half"
source = "synthetic"
interval = "1D"
start = "2022-01-03"
end = "2023-07-01"
train_end = "2022-10-01"
val_end = "2023-01-01"

[synthetic]
n_tickers = 4
seed = 1
"""


def record(sharpe: float, seed: int) -> pd.Series:
    """Daily returns of about the given annualised Sharpe ratio."""
    rng = np.random.default_rng(seed)
    daily = rng.normal(sharpe / math.sqrt(252) * 0.01, 0.01, len(DAYS))
    return pd.Series(daily, index=DAYS)


def write_pod(root: Path, pod_id: str, daily: pd.Series, best_step: int = 512) -> None:
    """A pod folder with a validation record: two passes, the best at ``best_step``."""
    folder = root / rundir.PODS_DIR / pod_id
    keys = pd.DataFrame({"step": [256, best_step], "score": [0.0, 1.0]})
    rundir.write_parquet(folder / rundir.TRIALS, rundir.trials_frame(keys, [daily * 0.0 + 1e-4, daily]))
    rundir.write_json(folder / rundir.CHECKPOINTS / "best.json", {"info": {"step": best_step}})


def entry(pod_id: str, score: float, index: int) -> Entry:
    return Entry(pod_id, index, "ppo", score, 0, None, {}, f"pods/{pod_id}/checkpoints/best")


# --------------------------------------------------------------------------- membership


def test_a_pod_below_the_bar_is_never_a_member_even_at_the_top(tmp_path: Path) -> None:
    strengths = {"p0000": -1.0, "p0001": 5.0, "p0002": 4.0, "p0003": 3.0, "p0004": 0.5}
    for k, (pod, sharpe) in enumerate(strengths.items()):
        write_pod(tmp_path, pod, record(sharpe, k))
    ranked = [entry(p, 9.0 - k, k) for k, p in enumerate(strengths)]  # p0000 ranks first on its score
    found = candidates(tmp_path, ranked)
    assert [c.pod_id for c in found] == list(strengths)
    assert not found[0].qualified and found[0].psr < MEMBERSHIP_PSR
    chosen = members(found, k=2)
    assert [c.pod_id for c in chosen] == ["p0001", "p0002"]  # qualified, best first, at most k
    assert all(c.psr >= MEMBERSHIP_PSR for c in chosen)
    assert not found[4].qualified  # Sharpe 0.5 over 120 days is not above zero at 95%


def test_the_record_is_the_best_snapshots_pass_and_a_pod_without_one_never_qualifies(tmp_path: Path) -> None:
    write_pod(tmp_path, "p0000", record(6.0, 1), best_step=512)
    (found,) = candidates(tmp_path, [entry("p0000", 1.0, 0)])
    pd.testing.assert_series_equal(found.daily, record(6.0, 1), check_names=False, check_freq=False)
    (missing,) = candidates(tmp_path, [entry("p0009", 1.0, 9)])
    assert missing.daily is None and math.isnan(missing.psr) and not missing.qualified


def test_selection_json_gives_each_candidate_the_reason_for_its_weight(tmp_path: Path) -> None:
    """A qualified pod with weight 0 is no longer a riddle: the record says why (the ensemble's k,
    no second qualified pod, a score at or below 0 under score weighting), as it does for members
    and for the pods below the bar."""
    strengths = {"p0000": -1.0, "p0001": 6.0, "p0002": 5.0, "p0003": 5.0}
    for k, (pod, sharpe) in enumerate(strengths.items()):
        write_pod(tmp_path, pod, record(sharpe, k))
    ranked = [entry(p, 9.0 - k, k) for k, p in enumerate([*strengths, "p0009"])]  # p0009: no record

    def validate(chosen, weights):
        return 4.5, record(4.5, 9)

    chosen, _ = select(tmp_path, ranked, 2, "equal", validate)
    reasons = {c["pod_id"]: c["reason"] for c in chosen.to_dict()["candidates"]}
    assert reasons["p0000"].startswith("not qualified: PSR(0) 0.") and "below the bar of 0.95" in reasons["p0000"]
    assert reasons["p0001"] == reasons["p0002"] == "member of the ensemble, weight 0.50 (equal weighting)"
    assert reasons["p0003"].startswith("qualified, but the ensemble takes the 2 best-scoring qualified pods")
    assert reasons["p0009"].startswith("not qualified: no PSR(0)")

    alone, _ = select(tmp_path, ranked[:2], 2, "equal", validate)  # one qualified pod: no ensemble
    assert alone.to_dict()["candidates"][1]["reason"].startswith("qualified, but no other pod did")

    scored = [entry("p0001", 1.0, 0), entry("p0002", -0.5, 1)]  # qualified on its record, scored below 0
    weighted, _ = select(tmp_path, scored, 2, "score", validate)
    assert weighted.weights == [1.0, 0.0]
    assert weighted.to_dict()["candidates"][1]["reason"].startswith("member with weight 0: the weights follow")


def test_member_weights_are_equal_or_follow_the_scores_and_sum_to_one() -> None:
    chosen = [Candidate("a", "", 3.0, 0.99), Candidate("b", "", 1.0, 0.99)]
    assert member_weights(chosen, "equal") == [0.5, 0.5]
    assert member_weights(chosen, "score") == pytest.approx([0.75, 0.25])
    with pytest.raises(ValueError):
        member_weights(chosen, "rank")


def candidate(daily: pd.Series | None, score: float | None = None) -> Candidate:
    """A candidate with this validation record, scored by its annualised Sharpe ratio."""
    if score is None:
        score = float(daily.mean() / daily.std() * math.sqrt(252))
    return Candidate("p0000", "", score, 0.99, daily)


def annual_sharpe(daily: pd.Series) -> float:
    return float(daily.mean() / daily.std() * math.sqrt(252))


def test_without_an_ensemble_the_best_pod_is_the_result() -> None:
    chosen = choose(candidate(record(5.0, 1)), None, None, 8)
    assert chosen.result == "best" and not chosen.tested
    assert choose(candidate(record(5.0, 1)), math.nan, record(4.0, 2), 8).result == "best"


def test_a_lead_that_being_the_best_of_many_explains_leaves_the_ensemble_the_result() -> None:
    """The best pod's record is the ensemble's plus a little noise: a higher score, but a lead
    well inside what the best of 8 shows by luck."""
    ensemble = record(5.0, 1)
    best = ensemble + pd.Series(np.random.default_rng(0).normal(0.0, 0.0004, len(DAYS)), index=DAYS)
    assert annual_sharpe(best) > annual_sharpe(ensemble)  # higher by 0.08, as the best of 8 scores
    chosen = choose(candidate(best), annual_sharpe(ensemble), ensemble, 8)
    assert chosen.tested and chosen.z < chosen.critical and chosen.result == "ensemble"
    assert chosen.critical == pytest.approx(2.4977, abs=1e-4)  # the normal quantile of 1 - 0.05 / 8
    assert "best of 8, needs z >= 2.50 over the ensemble" in chosen.clause()


def test_a_clear_lead_makes_the_best_pod_the_result_and_a_higher_ensemble_wins() -> None:
    best, weak = record(9.0, 1), record(-2.0, 2)
    ensemble = (best + weak) / 2  # one strong member, one losing one
    chosen = choose(candidate(best), annual_sharpe(ensemble), ensemble, 4)
    assert chosen.z >= chosen.critical and chosen.result == "best"
    other = record(9.0, 3)
    ensemble = (best + other) / 2  # two strong members: the average scores higher
    chosen = choose(candidate(best), annual_sharpe(ensemble), ensemble, 4)
    assert chosen.z < 0 and chosen.result == "ensemble"


def test_the_best_pod_is_counted_the_best_of_every_validation_pass_but_the_ensembles(tmp_path: Path) -> None:
    from tournament.selection import best_of

    assert best_of(tmp_path, 5) == 5  # no trials.parquet: the leaderboard's candidates
    keys = pd.DataFrame({"pod_id": ["p0000", "p0000", "p0001", "ensemble"], "step": [1, 2, 1, 0], "score": [0.0] * 4})
    rundir.write_parquet(tmp_path / rundir.TRIALS, rundir.trials_frame(keys, [record(1.0, k) for k in range(4)]))
    assert best_of(tmp_path, 5) == 3


def test_without_a_test_the_scores_decide_as_they_stand_a_tie_to_the_best_pod() -> None:
    daily = record(5.0, 1)
    same = choose(candidate(daily, 2.0), 2.0, daily, 8)
    assert same.result == "best" and not same.tested and "no difference to test" in same.reason
    assert choose(candidate(None, 2.0), 2.1, daily, 8).result == "ensemble"
    assert choose(candidate(None, 2.0), 1.9, daily, 8).result == "best"
    assert "the ensemble has no validation record" in choose(candidate(daily, 2.0), 1.9, None, 8).clause()


def test_among_equally_skilled_pods_the_best_is_rarely_chosen_over_their_ensemble() -> None:
    """8 pods of the same true Sharpe (5 a year) over 63 validation days, correlated at 0.95 (one
    market), and the equal-weight ensemble of the top 3: the best pod's lead is luck. Comparing the
    scores as they stand chooses it on most of 400 draws; the rule at most at 5% (the upper end of
    the binomial 99% band, 0.078)."""
    rng, draws, n, days = np.random.default_rng(42), 400, 8, pd.bdate_range("2024-01-02", periods=63)
    by_score = by_rule = 0
    for _ in range(draws):
        shocks = math.sqrt(0.95) * rng.normal(size=len(days)) + math.sqrt(0.05) * rng.normal(size=(n, len(days)))
        pods = 5.0 / math.sqrt(252) * 0.01 + 0.01 * shocks
        sharpes = pods.mean(axis=1) / pods.std(axis=1, ddof=1)
        top = np.argsort(-sharpes)[:3]
        ensemble = pd.Series(pods[top].mean(axis=0), index=days)
        best = candidate(pd.Series(pods[top[0]], index=days))
        ensemble_score = annual_sharpe(ensemble)
        by_score += best.score > ensemble_score
        by_rule += choose(best, ensemble_score, ensemble, n).result == "best"
    assert by_score / draws > 0.5 and by_rule / draws <= 0.078, (by_score, by_rule)


# --------------------------------------------------------------------------- the ensemble's action


class Fixed:
    """A member that always asks for the same action."""

    obs_dim, act_dim = 5, 4

    def __init__(self, action: list[float]) -> None:
        self.action = torch.tensor([action], dtype=torch.float32)

    def act(self, obs, deterministic=True):
        return self.action.expand(obs.shape[0], -1)


SHORTING = [
    EnvConfig(action_mode="weights", short_selling=True),
    EnvConfig(action_mode="weights", short_selling=True, weights_map="linear", trade_rate=0.2),
    EnvConfig(action_mode="weights", short_selling=True, market_neutral=True),
]


@pytest.mark.parametrize("rules", SHORTING, ids=["normalized", "linear-rate", "market-neutral"])
def test_members_with_opposite_books_give_an_empty_book_and_identical_members_their_own(rules) -> None:
    obs = torch.randn(3, 5)
    one, other = Fixed([0.9, -0.3, 0.1, -0.5]), Fixed([-0.9, 0.3, -0.1, 0.5])
    empty = aim_weights(EnsemblePolicy([one, other], rules=rules).act(obs), rules)
    torch.testing.assert_close(empty, torch.zeros(3, 4, dtype=torch.float64), atol=1e-7, rtol=0)
    alone = aim_weights(one.act(obs), rules)
    same = aim_weights(EnsemblePolicy([one, one], [0.3, 0.7], rules=rules).act(obs), rules)
    torch.testing.assert_close(same, alone, atol=1e-7, rtol=0)
    with pytest.raises(UserError, match="summing to 1"):
        EnsemblePolicy([one, one], [0.5, 0.6], rules=rules)


def test_the_ensemble_averages_books_not_actions() -> None:
    """Under the normalized map an action of gross 4 and one of gross 1 give books of equal
    gross: the ensemble's book is the mean of the two books, which the mean action is not."""
    rules = EnvConfig(action_mode="weights", short_selling=True)
    wide, narrow = Fixed([1.0, 1.0, 1.0, 1.0]), Fixed([1.0, 0.0, 0.0, 0.0])
    obs = torch.randn(2, 5)
    books = [aim_weights(member.act(obs), rules) for member in (wide, narrow)]
    combined = aim_weights(EnsemblePolicy([wide, narrow], rules=rules).act(obs), rules)
    torch.testing.assert_close(combined, (books[0] + books[1]) / 2, atol=1e-7, rtol=0)  # [0.625, 0.125, ...]
    by_actions = aim_weights(EnsemblePolicy([wide, narrow]).act(obs), rules)  # the old rule: mean actions
    assert not torch.allclose(by_actions, combined, atol=1e-3)


def test_shares_mode_combines_the_orders() -> None:
    agent = make_agent("td3", 5, 3, {"hidden_sizes": (8,)}, seed=0)
    obs = torch.randn(4, 5)
    mean = EnsemblePolicy([agent, agent], rules=EnvConfig()).act(obs)
    torch.testing.assert_close(mean, agent.act(obs, deterministic=True))


# --------------------------------------------------------------------------- a real tournament


@pytest.fixture(scope="module")
def tiny_tournament(tmp_path_factory):
    from distributed import Client

    from tournament import run

    root = tmp_path_factory.mktemp("selection")
    os.environ["PODRACER_DATA_DIR"] = str(root / "data")
    recipe = root / "daily.toml"  # a validation period long enough for a Sharpe ratio's PSR (60 sessions)
    recipe.write_text(DAILY_RECIPE)
    config = TournamentConfig(
        run_dir=str(root / "tour"),
        env=str(recipe),
        algos=("ppo",),
        pod_steps=256,
        num_envs=4,
        pods=3,
        population=3,
        backtest=False,
        algo_configs={"ppo": {"num_steps": 32, "update_epochs": 1, "num_minibatches": 2, "hidden_sizes": [8]}},
    )
    with Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
        result = run(config, client=client)
    return config, result


def test_a_tournament_writes_its_selection_and_a_tiny_one_forms_no_ensemble(tiny_tournament) -> None:
    config, result = tiny_tournament
    values = rundir.read_json(Path(config.run_dir) / rundir.SELECTION, version=rundir.SELECTION_VERSION)
    assert [c["pod_id"] for c in values["candidates"]] == [e.pod_id for e in result.leaderboard.ranked()]
    assert values["result"] == result.selection.result
    if not result.selection.has_ensemble:  # untrained pods on a random walk rarely clear the bar
        assert values["members"] == [] and values["ensemble_score"] is None and values["result"] == "best"
        assert "no ensemble" in result.selection.sentence()


def test_qualified_pods_form_an_ensemble_whose_pass_is_one_more_trial(tiny_tournament, tmp_path: Path) -> None:
    import shutil

    from tournament.orchestrator import TournamentState, select_result
    from trader.backtesting.runs import backtest_config, backtest_run, read_run

    config, result = tiny_tournament
    root = tmp_path / "tour"
    shutil.copytree(config.run_dir, root)
    config = TournamentConfig.from_dict({**config.to_dict(), "run_dir": str(root)})
    state = TournamentState.replay(config)
    ranked = state.board.ranked()
    days = rundir.read_trials(root / rundir.TRIALS)[1].columns
    for k, pod in enumerate(ranked):  # the top two get strong records, the third a losing one
        keys, returns = rundir.read_trials(root / rundir.PODS_DIR / pod.pod_id / rundir.TRIALS)
        step = rundir.read_json(root / pod.checkpoint.replace("checkpoints/best", "checkpoints/best.json"))["info"][
            "step"
        ]
        strong = pd.Series(record(8.0 if k < 2 else -3.0, k).to_numpy()[: len(days)], index=days)
        daily = [strong if s == step else returns.iloc[i].dropna() for i, s in enumerate(keys["step"])]
        rundir.write_parquet(root / rundir.PODS_DIR / pod.pod_id / rundir.TRIALS, rundir.trials_frame(keys, daily))
    from tournament.orchestrator import gather_trials

    pod_trials = gather_trials(state)
    chosen = select_result(config, state)
    assert [m.pod_id for m in chosen.members] == [e.pod_id for e in ranked[:2]]
    assert chosen.has_ensemble and chosen.weights == [0.5, 0.5]
    keys, returns = rundir.read_trials(root / rundir.TRIALS)
    assert len(keys) == pod_trials + 1 and keys["pod_id"].iloc[-1] == "ensemble"
    assert keys["score"].iloc[-1] == pytest.approx(chosen.ensemble_score)
    ensemble_daily = returns.iloc[-1].dropna()
    score, recorded_daily = ensemble_record(root)  # the pass a replay of the rule reads back
    assert score == keys["score"].iloc[-1] and recorded_daily.equals(ensemble_daily)
    assert ensemble_record(root / rundir.PODS_DIR) is None
    assert chosen.choice == choose(chosen.candidates[0], chosen.ensemble_score, ensemble_daily, pod_trials)
    assert rundir.read_json(root / rundir.SELECTION)["comparison"]["best_of"] == pod_trials
    # the backtest reads the ensemble from selection.json, and deflates by every trial, the ensemble's too
    contents = read_run(root)
    assert contents.ensemble == [root / m.checkpoint for m in chosen.members] and contents.result == chosen.result
    report = backtest_run(root, baselines=[], config=backtest_config(contents, tear_sheet=False))
    assert report.evidence["ensemble"]["n_trials"] == pod_trials + 1 == report.evidence["best"]["n_trials"]
    # a second selection (a resumed tournament) replaces the ensemble's row, never adds a second
    gather_trials(state)
    select_result(config, state)
    assert (rundir.read_trials(root / rundir.TRIALS)[0]["pod_id"] == "ensemble").sum() == 1


# --------------------------------------------------------------------------- random search


def test_random_search_makes_only_fresh_pods_with_hyperparameters_drawn_in_their_bounds(tmp_path: Path) -> None:
    config = TournamentConfig(run_dir=str(tmp_path), env="Pendulum-v1", algos=("ppo", "td3"), search="random", seed=3)
    board = Leaderboard(4)
    board.consider(Entry("p0000", 0, "ppo", 9.0, 0, None, {"learning_rate": 1e-3}, "pods/p0000/checkpoints/best"))
    generator = PodGenerator(config)
    specs = [generator.next_spec(i, board) for i in range(12)]
    assert all(s.parent_id is None and s.parent_checkpoint is None and s.generation == 0 for s in specs)
    for spec in specs:
        for key, bound in get_spec(spec.algo).mutation_bounds.items():
            if key in spec.algo_config:
                assert bound.low <= spec.algo_config[key] <= bound.high, key
    rates = {s.algo_config["learning_rate"] for s in specs if s.algo == "ppo"}
    assert len(rates) == sum(s.algo == "ppo" for s in specs) > 1  # drawn afresh for every pod
    again = PodGenerator(config)
    assert [again.next_spec(i, board) for i in range(12)] == specs  # a pod is a function of the seed and its index


def test_random_search_keeps_a_value_set_outside_its_bound() -> None:
    bounds = get_spec("ppo").mutation_bounds
    drawn = sample({"gamma": 0.0, "learning_rate": 3e-4}, bounds, np.random.default_rng(0))
    assert drawn["gamma"] == 0.0 and drawn["learning_rate"] != 3e-4
    with pytest.raises(Exception, match="search"):
        TournamentConfig(search="grid")


# --------------------------------------------------------------------------- what a child inherits


@pytest.mark.parametrize("algo", ["ppo", "sac", "td3"])
def test_a_child_starts_from_its_parents_weights_normaliser_and_optimiser_but_its_own_rates(
    algo, tmp_path: Path
) -> None:
    """A child pod (`trader.train`'s ``init_from``, `continue_from`) copies the parent's
    best snapshot: every network, the optimisers' moments and step counts, the
    observation normaliser and the extra state (update counters); it keeps its own
    learning rates (its config's, perhaps perturbed) and its own random stream. The
    replay buffer of SAC and TD3 is not part of a checkpoint: a child refills its own."""
    from market_envs.gym_vec import GymVecEnv
    from trader.agents.checkpoint import RNG_KEY, load_checkpoint, save_checkpoint
    from trader.training import continue_from

    env = GymVecEnv("Pendulum-v1", 2, "cpu", 0)
    base = {"hidden_sizes": (8,), "normalize_obs": True}
    extra = (
        {"num_steps": 16, "num_minibatches": 2, "update_epochs": 1}
        if algo == "ppo"
        else {"learning_starts": 32, "batch_size": 16, "iteration_steps": 64}
    )
    parent = make_agent(algo, env.obs_dim, env.act_dim, {**base, **extra}, seed=1)
    runner = get_spec(algo).runner_cls(parent, env)
    for _ in range(3):
        runner.iteration()
    save_checkpoint(parent, tmp_path / "best")
    rate_key = "learning_rate" if algo == "ppo" else "actor_lr"
    child = make_agent(algo, env.obs_dim, env.act_dim, {**base, **extra, rate_key: 1e-5}, seed=2)
    continue_from(child, tmp_path / "best", seed=2)
    saved, _ = load_checkpoint(tmp_path / "best", "cpu")
    state = child.state_dict()
    assert set(state) == set(saved) - {RNG_KEY}
    own_rates = {key for key in saved if key.endswith(".lr")}
    for key, tensor in saved.items():
        if key != RNG_KEY and key not in own_rates:
            assert torch.equal(state[key], tensor), key
    assert any(k.startswith("norm") for k in saved) and any(".exp_avg" in k for k in saved)  # normaliser, moments
    assert own_rates and any(float(state[key]) == 1e-5 != float(saved[key]) for key in own_rates)


def test_a_child_with_a_perturbed_noise_moves_its_parents_learned_noise_by_the_difference(tmp_path: Path) -> None:
    """PPO's exploration noise is bred as a learning rate is: the child's ``init_log_std`` less
    the parent's shifts the inherited (learned) log-std; everything else is the parent's."""
    from market_envs.gym_vec import GymVecEnv
    from trader.agents.checkpoint import load_checkpoint, save_checkpoint
    from trader.training import continue_from

    env = GymVecEnv("Pendulum-v1", 2, "cpu", 0)
    config = {"hidden_sizes": (8,), "num_steps": 16, "num_minibatches": 2, "update_epochs": 1, "init_log_std": -1.0}
    parent = make_agent("ppo", env.obs_dim, env.act_dim, config, seed=1)
    runner = get_spec("ppo").runner_cls(parent, env)
    for _ in range(3):
        runner.iteration()
    save_checkpoint(parent, tmp_path / "best")
    learned = parent.actor.log_std.detach().clone()
    assert not torch.equal(learned, torch.full_like(learned, -1.0))  # the parent learned its noise
    for child_std, shift in ((-1.0, 0.0), (-1.5, -0.5), (0.0, 1.0)):
        child = make_agent("ppo", env.obs_dim, env.act_dim, {**config, "init_log_std": child_std}, seed=2)
        continue_from(child, tmp_path / "best", seed=2)
        torch.testing.assert_close(child.actor.log_std.detach(), learned + shift, rtol=0, atol=1e-7)
        saved, _ = load_checkpoint(tmp_path / "best", "cpu")
        same = [
            k for k, v in child.state_dict().items() if k in saved and "log_std" not in k and torch.equal(v, saved[k])
        ]
        weights = [k for k in saved if k.startswith("net.actor") and "log_std" not in k]
        assert weights and set(weights) <= set(same)


def test_mutation_covers_what_decides_learning_under_costs() -> None:
    """The noise and the reward scale are bred beside today's (the discount is, inside its
    bound: a preset's discount of 0 is set outside it on purpose and kept)."""
    for algo, noise in (("ppo", "init_log_std"), ("td3", "exploration_noise")):
        bounds = get_spec(algo).mutation_bounds
        assert {noise, "reward_scale", "gamma"} <= set(bounds)
    assert "reward_scale" in get_spec("sac").mutation_bounds
    base = {"init_log_std": -2.0, "reward_scale": 1.0, "gamma": 0.0, "learning_rate": 3e-4}
    moved = [perturb(base, get_spec("ppo").mutation_bounds, 0.2, np.random.default_rng(seed)) for seed in range(20)]
    assert all(-3.0 <= m["init_log_std"] <= 0.0 and 0.1 <= m["reward_scale"] <= 10.0 for m in moved)
    assert len({m["init_log_std"] for m in moved}) == 20 and len({m["reward_scale"] for m in moved}) == 20
    assert all(m["gamma"] == 0.0 for m in moved)
