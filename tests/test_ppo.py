"""PPO: GAE known answers, the clipped objective, learner fusion, the learning-rate and
target-KL schedules, a Pendulum smoke run."""

from __future__ import annotations

import math

import pytest
import torch

from market_envs.gym_vec import GymVecEnv
from trader.agents.parallel import LearnerGroup, average_states
from trader.agents.ppo import (
    PPOAgent,
    PPOConfig,
    PPORunner,
    minibatch_step,
    clipped_surrogate_loss,
    gaussian_entropy,
    gaussian_log_prob,
)
from trader.agents.rollout import RolloutBatch, RolloutStorage, compute_gae
from trader.errors import ConfigError

# --------------------------------------------------------------------------- GAE


def test_gae_known_answer_with_termination_and_truncation() -> None:
    # three sub-environments: no episode end / terminated at t=1 / truncated at t=1
    gamma, lam = 0.9, 0.8
    rewards = torch.ones(3, 3)
    values = torch.tensor([[0.5], [1.0], [2.0]]).expand(3, 3).clone()
    last_value = torch.full((3,), 3.0)
    final_values = torch.zeros(3, 3)
    final_values[1, 2] = 10.0  # value of the truncated episode's real last observation
    final_values[1, 1] = 99.0  # must be ignored: terminated episodes do not bootstrap
    terminated = torch.zeros(3, 3, dtype=torch.bool)
    truncated = torch.zeros(3, 3, dtype=torch.bool)
    terminated[1, 1] = True
    truncated[1, 2] = True
    adv, ret = compute_gae(rewards, values, last_value, final_values, terminated, truncated, gamma, lam)
    # hand-computed: deltas 1.4, 1.8, 1.7 when nothing ends; GAE factor 0.72
    expected = torch.tensor(
        [
            [1.4 + 0.72 * (1.8 + 0.72 * 1.7), 1.4, 1.4 + 0.72 * 9.0],
            [1.8 + 0.72 * 1.7, 0.0, 1.0 + 0.9 * 10.0 - 1.0],
            [1.7, 1.7, 1.7],
        ]
    )
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + values)


def test_gae_lambda_one_gives_discounted_returns() -> None:
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.3], [-0.2], [0.7]])
    zeros_b = torch.zeros(3, 1, dtype=torch.bool)
    _, ret = compute_gae(rewards, values, torch.tensor([5.0]), torch.zeros(3, 1), zeros_b, zeros_b, 0.5, 1.0)
    expected = [1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 5, 2 + 0.5 * 3 + 0.25 * 5, 3 + 0.5 * 5]
    torch.testing.assert_close(ret[:, 0], torch.tensor(expected))


def test_rollout_storage_insert_and_batch() -> None:
    storage = RolloutStorage(num_steps=2, num_envs=3, obs_dim=4, act_dim=1)
    for step in range(2):
        storage.insert(
            step,
            torch.full((3, 4), float(step)),
            torch.zeros(3, 1),
            torch.zeros(3),
            torch.zeros(3),
            torch.ones(3),
            torch.zeros(3, dtype=torch.bool),
            torch.zeros(3, dtype=torch.bool),
            torch.zeros(3),
        )
    storage.compute_returns(torch.zeros(3), gamma=1.0, gae_lambda=1.0)
    batch = storage.batch()
    assert batch.size == 6 and batch.obs.shape == (6, 4)
    torch.testing.assert_close(batch.returns, torch.tensor([2.0, 2, 2, 1, 1, 1]))


# --------------------------------------------------------------------------- the objective


@pytest.mark.parametrize(
    ("ratio", "advantage", "has_gradient"),
    [
        (1.5, 1.0, False),  # above 1 + eps with A > 0: clipped, no gradient
        (0.5, -1.0, False),  # below 1 - eps with A < 0: clipped, no gradient
        (1.1, 1.0, True),  # inside the trust region
        (0.5, 1.0, True),  # below 1 - eps with A > 0: the pessimistic term is unclipped
        (1.5, -1.0, True),  # above 1 + eps with A < 0: unclipped
    ],
)
def test_clipped_surrogate_gradient(ratio: float, advantage: float, has_gradient: bool) -> None:
    new_logprob = torch.zeros(4, requires_grad=True)
    old_logprob = torch.full((4,), -math.log(ratio))
    loss, clip_fraction = clipped_surrogate_loss(new_logprob, old_logprob, torch.full((4,), advantage), clip_coef=0.2)
    loss.backward()
    assert bool((new_logprob.grad.abs() > 0).all()) == has_gradient
    assert float(clip_fraction) == (0.0 if abs(ratio - 1.0) <= 0.2 else 1.0)


def test_agent_policy_gradient_is_zero_when_every_ratio_is_clipped() -> None:
    cfg = PPOConfig(norm_adv=False, ent_coef=0.0, vf_coef=0.0, hidden_sizes=(8,))
    agent = PPOAgent(3, 2, cfg, seed=0)
    obs = torch.randn(16, 3)
    actions, logprob, values = agent.explore(obs)

    def batch_with_ratio(ratio: float) -> RolloutBatch:
        return RolloutBatch(
            obs=obs,
            actions=actions,
            logprobs=logprob - math.log(ratio),
            values=values,
            advantages=torch.rand(16) + 0.1,
            returns=values,
        )

    for ratio, expect_zero in ((1.5, True), (1.05, False)):
        agent.optimizer.zero_grad(set_to_none=False)
        loss, _ = agent.losses(batch_with_ratio(ratio), torch.arange(16))
        loss.backward()
        grad_norm = sum(float(p.grad.abs().sum()) for p in agent.actor.parameters())
        assert (grad_norm == 0.0) == expect_zero, (ratio, grad_norm)


@pytest.mark.parametrize("network", ["mlp", "per_stock"])
def test_gradients_accumulated_in_pieces_equal_the_one_pass_loss(network: str, monkeypatch) -> None:
    """`accumulate_gradients` (a CPU minibatch in pieces of at most PASS_ROWS network rows) gives the
    gradient and the metrics of `losses` in one pass, to float summation order."""
    import trader.agents.ppo as ppo

    stocks, features = 4, 2
    obs_dim = 1 + stocks * (1 + features)
    cfg = PPOConfig(hidden_sizes=(8, 8), network=network, ent_coef=0.01)
    agents = [PPOAgent(obs_dim, stocks, cfg, seed=3) for _ in range(2)]
    obs = torch.randn(48, obs_dim, generator=torch.Generator().manual_seed(1))
    actions, logprob, values = agents[0].explore(obs)
    batch = RolloutBatch(
        obs, actions, logprob + 0.3 * torch.randn(48), values, torch.randn(48), values + torch.randn(48)
    )
    indices = torch.randperm(48)[:37]
    loss, expected = agents[0].losses(batch, indices)
    loss.backward()
    monkeypatch.setattr(ppo, "PASS_ROWS", 10 * (stocks if network == "per_stock" else 1))  # 4 pieces
    metrics = agents[1].accumulate_gradients(batch, indices)
    torch.testing.assert_close(metrics, expected, rtol=1e-5, atol=1e-7)
    for name, (one, pieces) in enumerate(zip(*(agent.modules().values() for agent in agents), strict=True)):
        for a, b in zip(one.parameters(), pieces.parameters(), strict=True):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-7, msg=str(name))
    assert float(metrics[4]) > 0  # some ratios clipped: the clipped rows were compared too


def test_gaussian_log_prob_and_entropy_match_torch() -> None:
    mean, log_std = torch.randn(5, 3), torch.randn(3) * 0.3
    actions = torch.randn(5, 3)
    dist = torch.distributions.Normal(mean, log_std.exp())
    torch.testing.assert_close(gaussian_log_prob(actions, mean, log_std), dist.log_prob(actions).sum(-1))
    torch.testing.assert_close(gaussian_entropy(log_std), dist.entropy()[0].sum())


def test_value_clipping_limits_the_value_update() -> None:
    agent = PPOAgent(2, 1, PPOConfig(clip_vloss=True, clip_coef=0.1, hidden_sizes=(4,)))
    obs = torch.randn(8, 2)
    values = agent.value(obs)
    far = values + 100.0
    clipped = agent._value_loss(obs, values - 5.0, far)  # current value far outside the clip
    unclipped_agent = PPOAgent(2, 1, PPOConfig(clip_vloss=False, hidden_sizes=(4,)))
    plain = unclipped_agent._value_loss(obs, values - 5.0, far)
    assert float(clipped.detach()) > float(plain.detach())  # the pessimistic (clipped) error is the larger one


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="clip_coef"):
        PPOConfig(clip_coef=0.0)
    with pytest.raises(ConfigError, match="gamma"):
        PPOConfig(gamma=1.5)


# --------------------------------------------------------------------------- learners


def _trained_agent(seed: int) -> PPOAgent:
    agent = PPOAgent(3, 1, PPOConfig(hidden_sizes=(8,)), seed=seed)
    obs = torch.randn(32, 3, generator=torch.Generator().manual_seed(seed))
    actions, logprob, values = agent.explore(obs)
    batch = RolloutBatch(obs, actions, logprob, values, torch.randn(32), values + 1.0)
    loss, _ = agent.losses(batch, torch.arange(32))
    loss.backward()
    agent.optimizer.step()
    return agent


def test_averaging_two_learners_gives_mean_parameters_and_moments() -> None:
    a, b = _trained_agent(0), _trained_agent(1)
    fused = average_states([a.state_dict(), b.state_dict()])
    for key in ("net.actor.mean.0.weight", "net.critic.2.bias", "optim.adam.0.exp_avg", "optim.adam.3.exp_avg_sq"):
        torch.testing.assert_close(fused[key], (a.state_dict()[key] + b.state_dict()[key]) / 2)
    # and through the learner group: replicas end equal to the mean
    group = LearnerGroup(a, num_learners=2)
    group.sync_replicas()
    group.replicas[1].load_state_dict(b.state_dict())
    expected = average_states([a.state_dict(), b.state_dict()])
    group.fuse()
    for replica in group.replicas:
        for key, value in replica.state_dict().items():
            torch.testing.assert_close(value, expected[key])


def test_learner_group_shards_are_disjoint_and_cover_the_batch() -> None:
    agent = PPOAgent(3, 1, PPOConfig(hidden_sizes=(4,)))
    seen: list[tuple[int, torch.Tensor]] = []

    def record(replica: object, indices: torch.Tensor) -> torch.Tensor:
        seen.append((id(replica), indices))
        return torch.zeros(1)

    group = LearnerGroup(agent, num_learners=3)
    metrics = group.run_epoch(batch_size=24, num_minibatches=2, step_fn=record)
    assert metrics.shape == (6, 1)
    assert len({rid for rid, _ in seen}) == 3
    rows = torch.cat([idx for _, idx in seen])
    assert sorted(rows.tolist()) == list(range(24))
    with pytest.raises(ConfigError, match="too small"):
        group.run_epoch(batch_size=4, num_minibatches=2, step_fn=record)


# --------------------------------------------------------------------------- schedules


def _rollout(seed: int = 0, rows: int = 32) -> RolloutBatch:
    """A rollout collected by the initial policy of `_schedule_agent` (KL 0 at the start)."""
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(rows, 3, generator=gen)
    actions, logprobs, values = _schedule_agent().explore(obs)
    advantages = torch.randn(rows, generator=gen)
    return RolloutBatch(obs, actions, logprobs, values, advantages, values + advantages)


def _schedule_agent(**overrides: object) -> PPOAgent:
    cfg = PPOConfig(**{"hidden_sizes": (8,), "num_minibatches": 4, "update_epochs": 3, **overrides})
    return PPOAgent(3, 1, cfg, seed=0)


@pytest.mark.parametrize("num_learners", [1, 2])
def test_anneal_lr_is_linear_in_the_transitions_learned_from(num_learners: int) -> None:
    agent = _schedule_agent(learning_rate=1e-3, anneal_lr=True, total_steps=64, num_learners=num_learners)
    rates = []
    for seed in range(4):
        metrics = agent.update(_rollout(seed))  # 32 rows each
        rates.append(metrics["learning_rate"])
        for replica in agent.learners.replicas:  # fusion keeps the schedule on every replica
            assert [g["lr"] for g in replica.optimizer.param_groups] == [rates[-1]]
    assert rates == [1e-3, 0.5e-3, 0.0, 0.0]  # half after half of total_steps, then 0
    assert agent.env_steps == 128 and len(agent.learners.replicas) == num_learners


def test_without_anneal_lr_the_rate_stays_and_every_epoch_runs() -> None:
    agent = _schedule_agent(learning_rate=1e-3)
    for seed in range(2):
        metrics = agent.update(_rollout(seed))
        assert metrics["learning_rate"] == 1e-3 and metrics["epochs_run"] == 3
    assert agent.optimizer.param_groups[0]["lr"] == 1e-3


def test_schedule_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match="anneal_lr needs total_steps"):
        PPOConfig(anneal_lr=True)
    with pytest.raises(ConfigError, match="total_steps"):
        PPOConfig(total_steps=0)
    with pytest.raises(ConfigError, match="target_kl"):
        PPOConfig(target_kl=0.0)
    from trader.agents import make_config

    cfg = make_config("ppo", {"anneal_lr": True, "total_steps": 1000, "target_kl": 0.02})
    assert (cfg.anneal_lr, cfg.total_steps, cfg.target_kl) == (True, 1000, 0.02)


def test_default_update_is_plain_epochs_through_the_learner_group() -> None:
    """Defaults (no schedule, no target KL): ``update_epochs`` plain epochs, bit for bit."""
    agent, reference = _schedule_agent(), _schedule_agent()
    batch = _rollout(1)
    metrics = agent.update(batch)
    for _ in range(3):
        reference.learners.run_epoch(batch.size, 4, minibatch_step(batch))
    assert metrics["epochs_run"] == 3
    for key, value in reference.state_dict().items():
        if key != "extra.env_steps":
            assert torch.equal(agent.state_dict()[key], value), key


def _epoch_kls(batch: RolloutBatch) -> list[float]:
    """Mean approximate KL of each epoch of a full (no target KL) update."""
    agent = _schedule_agent(update_epochs=6)
    kls: list[float] = []
    run_epoch = agent.learners.run_epoch

    def recording(*args: object) -> torch.Tensor:
        metrics = run_epoch(*args)
        kls.append(float(metrics[:, 3].mean()))
        return metrics

    agent.learners.run_epoch = recording
    agent.update(batch)
    return kls


def test_target_kl_stops_after_the_first_epoch_over_it() -> None:
    batch = _rollout(2)
    kls = _epoch_kls(batch)
    assert len(kls) == 6 and all(kl > 0 for kl in kls)
    for target in (1e-9, sorted(kls)[2], 1e9):
        agent = _schedule_agent(update_epochs=6, target_kl=target)
        expected = next((i + 1 for i, kl in enumerate(kls) if kl > target), 6)
        assert agent.update(batch)["epochs_run"] == expected, target
    # 1e-9: exactly one epoch, i.e. the same as an update of one epoch
    once, one_epoch = _schedule_agent(target_kl=1e-9), _schedule_agent(update_epochs=1)
    assert once.update(batch)["epochs_run"] == 1
    one_epoch.update(batch)
    for key, value in one_epoch.state_dict().items():
        assert torch.equal(once.state_dict()[key], value), key
    # a target never reached changes nothing
    never, plain = _schedule_agent(target_kl=1e9), _schedule_agent()
    never.update(batch)
    plain.update(batch)
    for key, value in plain.state_dict().items():
        assert torch.equal(never.state_dict()[key], value), key


def test_a_resumed_agent_continues_the_learning_rate_schedule(tmp_path: object) -> None:
    from trader.agents.checkpoint import load_agent, save_checkpoint

    agent = _schedule_agent(learning_rate=1e-3, anneal_lr=True, total_steps=128)
    agent.update(_rollout(0))
    save_checkpoint(agent, tmp_path / "ckpt")
    resumed = load_agent(tmp_path / "ckpt")
    assert resumed.env_steps == 32 and resumed.scheduled_learning_rate() == 0.75e-3
    resumed.generator.set_state(agent.generator.get_state())
    batch = _rollout(1)
    assert resumed.update(batch) == agent.update(batch)
    assert agent.optimizer.param_groups[0]["lr"] == 0.75e-3
    for key, value in agent.state_dict().items():
        assert torch.equal(resumed.state_dict()[key], value), key


def test_a_state_without_the_step_counter_loads_only_without_a_schedule() -> None:
    from trader.errors import CheckpointError

    state = _schedule_agent().state_dict()
    del state["extra.env_steps"]  # as saved before the counter existed
    _schedule_agent().load_state_dict(state)
    with pytest.raises(CheckpointError, match="env_steps"):
        _schedule_agent(anneal_lr=True, total_steps=10).load_state_dict(state)


# --------------------------------------------------------------------------- smoke runs


def _pendulum_run(seed: int, num_learners: int = 1, iterations: int = 2) -> tuple[PPOAgent, list]:
    cfg = PPOConfig(
        num_steps=32,
        update_epochs=2,
        num_minibatches=4,
        hidden_sizes=(16,),
        num_learners=num_learners,
        reward_scale=0.1,
    )
    env = GymVecEnv("Pendulum-v1", num_envs=4, seed=seed, max_episode_steps=50)
    agent = PPOAgent(env.obs_dim, env.act_dim, cfg, seed=seed)
    runner = PPORunner(agent, env)
    return agent, [runner.iteration() for _ in range(iterations)]


@pytest.mark.parametrize("num_learners", [1, 2])
def test_ppo_pendulum_smoke_run(num_learners: int) -> None:
    agent, history = _pendulum_run(seed=0, num_learners=num_learners)
    for metrics in history:
        assert metrics["env_steps"] == 128
        assert all(math.isfinite(v) for k, v in metrics.items() if k != "explained_variance")
    assert history[-1]["episodes"] == 4  # 64 steps per env, episodes of 50
    assert float(agent.normalizer.count) == 256
    actions = agent.act(torch.randn(7, 3))
    assert actions.shape == (7, 1) and float(actions.abs().max()) <= 1.0


def test_ppo_training_is_a_pure_function_of_config_and_seed() -> None:
    first, _ = _pendulum_run(seed=3)
    second, _ = _pendulum_run(seed=3)
    other, _ = _pendulum_run(seed=4)
    for key, value in first.state_dict().items():
        assert torch.equal(value, second.state_dict()[key]), key
    key = "net.critic.0.weight"
    assert not torch.equal(first.state_dict()[key], other.state_dict()[key])


@pytest.mark.slow
def test_ppo_learns_on_pendulum() -> None:
    """PPO improves Pendulum's return clearly within 100k steps (slow)."""
    cfg = PPOConfig(
        num_steps=256, num_minibatches=16, reward_scale=0.1, learning_rate=1e-3, gae_lambda=0.95, ent_coef=0.0
    )
    env = GymVecEnv("Pendulum-v1", num_envs=8, seed=0)
    runner = PPORunner(PPOAgent(env.obs_dim, env.act_dim, cfg, seed=0), env)
    returns = [runner.iteration().get("episode_return", math.nan) for _ in range(50)]
    early = [r for r in returns[:5] if not math.isnan(r)]
    late = [r for r in returns[-5:] if not math.isnan(r)]
    assert sum(late) / len(late) > sum(early) / len(early) + 200
