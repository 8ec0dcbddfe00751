"""SAC and TD3: known-answer updates, delayed actor updates, checkpoints, K learners,
Pendulum runs."""

from __future__ import annotations

import math
import time

import pytest
import torch

from market_envs.gym_vec import GymVecEnv
from trader.agents import get_spec, make_agent, make_config
from trader.agents.checkpoint import load_agent, save_checkpoint
from trader.agents.normalizer import ObsNormalizer
from trader.agents.offpolicy import OffPolicyRunner
from trader.agents.parallel import LearnerGroup
from trader.agents.replay import ReplayBatch, ReplayBuffer
from trader.agents.sac import SACAgent, SACConfig
from trader.agents.td3 import TD3Agent, TD3Config
from trader.errors import ConfigError

TINY = {"hidden_sizes": (32, 32), "batch_size": 64}


def random_batch(obs_dim: int = 3, act_dim: int = 1, size: int = 64, seed: int = 0) -> ReplayBatch:
    """A batch with both terminated and non-terminated transitions."""
    gen = torch.Generator().manual_seed(seed)
    return ReplayBatch(
        obs=torch.randn(size, obs_dim, generator=gen),
        actions=torch.rand(size, act_dim, generator=gen) * 2 - 1,
        rewards=torch.randn(size, generator=gen),
        next_obs=torch.randn(size, obs_dim, generator=gen),
        terminated=(torch.rand(size, generator=gen) < 0.5).float(),
    )


def params(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in module.parameters()]).clone()


# --------------------------------------------------------------------------- SAC


@pytest.mark.parametrize("target_entropy", [2.0, -20.0])
def test_sac_temperature_moves_towards_the_target_entropy(target_entropy):
    """Entropy below the target raises alpha, above it lowers alpha (first Adam step = lr)."""
    config = SACConfig(**TINY, target_entropy=target_entropy, alpha_lr=0.01)
    agent = SACAgent(3, 1, config, seed=1)
    batch = random_batch()
    metrics = agent.update(batch)
    # Adam's first step moves log(alpha) by lr against the sign of the gradient,
    # and d(alpha_loss)/d(log alpha) = entropy - target_entropy.
    direction = math.copysign(1.0, target_entropy - metrics["entropy"])
    assert math.log(agent.temperature().item()) == pytest.approx(direction * 0.01, abs=1e-6)
    alphas = [agent.update(batch)["alpha"] for _ in range(30)]
    if target_entropy > 0:  # unreachable for a squashed 1-D action: alpha keeps growing
        assert all(b > a for a, b in zip(alphas, alphas[1:], strict=False))
    else:
        assert all(b < a for a, b in zip(alphas, alphas[1:], strict=False))


def test_sac_default_target_entropy_is_minus_action_dim():
    assert SACAgent(5, 3, SACConfig(**TINY)).target_entropy == -3.0


def test_sac_critic_loss_matches_a_hand_computed_bellman_target():
    """Target = r + gamma * (1 - terminated) * (min target Q - alpha * log pi) at the next state."""
    config = SACConfig(**TINY, gamma=0.9, init_alpha=0.5, reward_scale=2.0)
    agent = SACAgent(3, 1, config, seed=2)
    batch = random_batch(seed=3)
    state = agent.generator.get_state()
    with torch.no_grad():
        next_a, next_logp = agent.actor.sample(batch.next_obs, agent.generator)
        next_q = torch.minimum(*agent.target_critic(batch.next_obs, next_a))
        target = 2.0 * batch.rewards + 0.9 * (1 - batch.terminated) * (next_q - 0.5 * next_logp)
        q1, q2 = agent.critic(batch.obs, batch.actions)
        expected = 0.5 * (torch.mean((q1 - target) ** 2) + torch.mean((q2 - target) ** 2))
    agent.generator.set_state(state)
    metrics = agent.update(batch)
    assert metrics["critic_loss"] == pytest.approx(expected.item(), rel=1e-5)


def test_sac_actions_are_squashed_and_log_prob_has_the_tanh_correction():
    agent = SACAgent(3, 2, SACConfig(**TINY), seed=0)
    obs = torch.randn(4096, 3) * 5
    actions = agent.act(obs)
    assert actions.shape == (4096, 2) and bool((actions.abs() <= 1).all())
    # Known answer: with mean 0 and std 1 the log-prob equals N(u) / (1 - tanh(u)^2).
    gen = torch.Generator().manual_seed(0)
    agent.actor.forward = lambda o: (torch.zeros(len(o), 2), torch.zeros(len(o), 2))
    squashed, log_prob = agent.actor.sample(obs[:16], gen)
    u = torch.atanh(squashed.double())
    normal = torch.distributions.Normal(0.0, 1.0).log_prob(u).sum(-1)
    expected = normal - torch.log1p(-(torch.tanh(u) ** 2)).sum(-1)
    torch.testing.assert_close(log_prob.double(), expected, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- TD3


def test_td3_updates_the_actor_once_per_policy_delay_critic_updates():
    agent = TD3Agent(3, 1, TD3Config(**TINY, policy_delay=3), seed=0)
    batch = random_batch()
    changed_actor, changed_target_actor = [], []
    for _ in range(9):
        actor_before, target_before = params(agent.actor), params(agent.target_actor)
        critic_before = params(agent.critic)
        metrics = agent.update(batch)
        changed_actor.append(not torch.equal(actor_before, params(agent.actor)))
        changed_target_actor.append(not torch.equal(target_before, params(agent.target_actor)))
        assert not torch.equal(critic_before, params(agent.critic))  # every call
        assert metrics["actor_updates"] == float(changed_actor[-1])
    expected = [False, False, True] * 3
    assert changed_actor == expected and changed_target_actor == expected
    assert agent.actor_updates == 3 and agent.num_updates == 9


def test_td3_target_uses_the_smoothed_target_actor_and_terminated_only():
    config = TD3Config(**TINY, gamma=0.8, policy_noise=0.3, noise_clip=0.1)
    agent = TD3Agent(3, 1, config, seed=4)
    # Make the target actor differ from the actor, so using the wrong one shows.
    with torch.no_grad():
        for p in agent.target_actor.parameters():
            p.add_(0.3)
    batch = random_batch(seed=5)
    state = agent.generator.get_state()
    with torch.no_grad():
        target_a = agent.target_actor(batch.next_obs)
        noise = torch.randn(target_a.shape, generator=agent.generator) * 0.3
        next_a = (target_a + noise.clamp(-0.1, 0.1)).clamp(-1, 1)
        next_q = torch.minimum(*agent.target_critic(batch.next_obs, next_a))
        target = batch.rewards + 0.8 * (1 - batch.terminated) * next_q
        q1, q2 = agent.critic(batch.obs, batch.actions)
        expected = torch.mean((q1 - target) ** 2) + torch.mean((q2 - target) ** 2)
    agent.generator.set_state(state)
    assert agent.update(batch)["critic_loss"] == pytest.approx(expected.item(), rel=1e-5)


def test_td3_exploration_noise_and_deterministic_action():
    agent = TD3Agent(3, 1, TD3Config(**TINY, exploration_noise=0.5), seed=0)
    obs = torch.randn(256, 3)
    greedy = agent.act(obs, deterministic=True)
    noisy = agent.act(obs)
    assert bool((noisy.abs() <= 1).all())
    assert 0.2 < (noisy - greedy).std().item() < 0.6
    torch.testing.assert_close(agent.act(obs, deterministic=True), greedy)


# --------------------------------------------------------------------------- shared


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_checkpoint_round_trip_reproduces_actions_and_training_exactly(algo, tmp_path):
    config = make_config(algo, {**TINY, "normalize_obs": True})
    agent = make_agent(algo, 3, 1, config, seed=3)
    for seed in range(4):
        agent.observe(torch.randn(8, 3) * 3 + 1)
        agent.update(random_batch(seed=seed))
    save_checkpoint(agent, tmp_path / "ckpt", data_window={"env": "test"})
    loaded = load_agent(tmp_path / "ckpt")
    assert type(loaded) is type(agent) and loaded.config == agent.config
    obs = torch.randn(32, 3)
    assert torch.equal(loaded.act(obs, deterministic=True), agent.act(obs, deterministic=True))
    # Same generator state: stochastic actions and the next update agree too.
    loaded.generator.set_state(agent.generator.get_state())
    assert torch.equal(loaded.act(obs), agent.act(obs))
    batch = random_batch(seed=9)
    assert loaded.update(batch) == agent.update(batch)
    assert torch.equal(params(loaded.actor), params(agent.actor))
    assert loaded.num_updates == agent.num_updates == 5


@pytest.mark.parametrize(
    ("algo", "overrides", "key"),
    [
        ("sac", {"tau": 0.0}, "tau"),
        ("sac", {"log_std_min": 3.0}, "log_std_min"),
        ("td3", {"policy_delay": 0}, "policy_delay"),
        ("td3", {"batch_size": 0}, "batch_size"),
        ("td3", {"polcy_delay": 2}, "polcy_delay"),
        ("sac", {"num_learners": 0}, "num_learners"),
        ("td3", {"critic_init_scale": 0.0}, "critic_init_scale"),
        ("td3", {"preactivation_penalty": -1.0}, "preactivation_penalty"),
    ],
)
def test_bad_config_values_raise_naming_the_key(algo, overrides, key):
    with pytest.raises(ConfigError, match=key):
        make_config(algo, overrides)


@pytest.mark.parametrize("algo", ["sac", "td3"])
@pytest.mark.parametrize("network", ["mlp", "per_stock"])
def test_critic_init_scale_shrinks_only_the_critics_output_layer(algo, network):
    """The same seed with critic_init_scale s: the critics' (and target critics') last
    weights and bias are s times the plain ones, every other parameter is unchanged,
    so the untrained Q-values are s times as steep in the actions."""
    obs_dim, act_dim = 1 + 4 + 4 * 2, 4  # a market layout: 4 stocks, 2 features
    base = {"network": network, "hidden_sizes": (8, 8)}
    plain = make_agent(algo, obs_dim, act_dim, make_config(algo, base), seed=5)
    flat = make_agent(algo, obs_dim, act_dim, make_config(algo, {**base, "critic_init_scale": 0.01}), seed=5)
    for name in ("critic", "target_critic"):
        ours = list(flat.modules()[name].parameters())
        theirs = list(plain.modules()[name].parameters())
        half = len(ours) // 2  # weights, then biases
        last = {half - 1, len(ours) - 1}
        for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            expected = b * 0.01 if index in last else b
            assert torch.allclose(a, expected, rtol=1e-6, atol=0), (name, index)
    for a, b in zip(flat.actor.parameters(), plain.actor.parameters(), strict=True):
        assert torch.equal(a, b)
    obs, actions = torch.randn(6, obs_dim), torch.rand(6, act_dim) * 2 - 1
    with torch.no_grad():
        q_flat = flat.critic(obs, actions) - flat.critic(obs, torch.zeros_like(actions))
        q_plain = plain.critic(obs, actions) - plain.critic(obs, torch.zeros_like(actions))
    assert torch.allclose(q_flat, 0.01 * q_plain, rtol=1e-4, atol=1e-7)


def test_preactivation_penalty_shrinks_the_actors_preactivations_where_the_critic_is_flat():
    """With critics that ignore the actions, the actor's only gradient is the penalty's:
    without it one actor update leaves the actor unchanged, with it the squared
    pre-tanh actions shrink."""
    obs_dim, act_dim = 5, 3

    def updated(penalty: float) -> tuple[torch.Tensor, torch.Tensor]:
        config = make_config("td3", {**TINY, "policy_delay": 1, "preactivation_penalty": penalty})
        agent = make_agent("td3", obs_dim, act_dim, config, seed=2)
        with torch.no_grad():  # TwinQ's first layer is [K, obs + act, hidden]: zero the action rows
            agent.critic.weights[0][:, obs_dim:] = 0.0
            agent.target_critic.weights[0][:, obs_dim:] = 0.0
        obs = torch.randn(64, obs_dim)
        before = agent.actor.preactivation(agent.normalizer.normalize(obs)).detach()
        agent.learn(random_batch(obs_dim, act_dim, seed=1))
        return before, agent.actor.preactivation(agent.normalizer.normalize(obs)).detach()

    before, after = updated(0.0)
    assert torch.equal(before, after)
    before, after = updated(1.0)
    assert after.square().mean() < before.square().mean()


def test_configs_survive_a_dict_round_trip():
    from trader.rundir import config_from_dict, config_to_dict

    config = SACConfig(hidden_sizes=(64, 64), target_entropy=-2.0, max_grad_norm=1.0)
    assert config_from_dict(SACConfig, config_to_dict(config)) == config


def pendulum_runner(algo: str, num_envs: int, seed: int, **overrides) -> OffPolicyRunner:
    env = GymVecEnv("Pendulum-v1", num_envs, seed=seed)
    config = make_config(algo, {**TINY, **overrides})
    agent = make_agent(algo, env.obs_dim, env.act_dim, config, seed=seed)
    return get_spec(algo).runner_cls(agent, env)


@pytest.mark.parametrize("num_learners", [1, 2])
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_pendulum_smoke_run(algo, num_learners):
    runner = pendulum_runner(
        algo,
        num_envs=2,
        seed=0,
        learning_starts=200,
        iteration_steps=200,
        updates_per_step=0.5,
        num_learners=num_learners,
    )
    logs = [runner.iteration() for _ in range(3)]
    assert [m["env_steps"] for m in logs] == [200.0] * 3
    # 0.5 updates per transition once learning starts (after the first 200 transitions).
    assert [m["updates"] for m in logs] == [1.0, 100.0, 100.0]
    assert len(runner.buffer) == 600
    # Each env's 200-step episode ends at its step 200 = transition 400 (second iteration).
    assert logs[1]["episodes"] == 2.0 and "episodes" not in logs[2]
    assert all(math.isfinite(v) for v in logs[-1].values())
    assert runner.agent.num_updates == 201


def test_runs_are_a_pure_function_of_the_seed():
    runs = []
    for _ in range(2):
        runner = pendulum_runner("sac", 2, seed=5, learning_starts=50, iteration_steps=100)
        runs.append((runner.iteration(), params(runner.agent.actor)))
    assert runs[0][0] == runs[1][0]
    assert torch.equal(runs[0][1], runs[1][1])


# --------------------------------------------------------------------------- K learners

K_RUN = {"learning_starts": 50, "iteration_steps": 100, "updates_per_step": 0.25, "normalize_obs": True}


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_one_learner_runner_is_the_plain_sample_and_learn_loop(algo):
    """K = 1: each owed update is ``learn(sample(batch_size, agent.generator))``, nothing else."""
    runner = pendulum_runner(algo, 2, seed=1, **K_RUN)
    runner.iteration()
    runner.iteration()
    plain = pendulum_runner(algo, 2, seed=1, **K_RUN)
    credit = 0.0
    while plain.env_steps < 200:
        plain.collect_step()
        if plain.env_steps >= 50:
            credit += 0.25 * 2
            for _ in range(int(credit)):
                plain.agent.learn(plain.buffer.sample(64, plain.agent.generator))
            credit -= int(credit)
    assert plain.agent.num_updates == runner.agent.num_updates == 38
    for key, value in runner.agent.state_dict().items():
        assert torch.equal(value, plain.agent.state_dict()[key]), key


def _recording_k2_run(algo: str, **overrides):
    """One iteration with K = 2, recording each replay sample, each replica's batches and
    metrics, and every replica's state and the agent's normaliser just before fusion."""
    runner = pendulum_runner(algo, 2, seed=2, **{**K_RUN, "num_learners": 2, **overrides})
    record = {"samples": [], "batches": ([], []), "metrics": ([], []), "before_fuse": None}
    sample = runner.buffer.sample

    def recording_sample(*args, **kwargs):
        record["samples"].append(sample(*args, **kwargs))
        return record["samples"][-1]

    runner.buffer.sample = recording_sample
    for index, replica in enumerate(runner.learners.replicas):
        learn = replica.learn

        def recording_learn(batch, learn=learn, index=index):
            record["batches"][index].append(batch)
            record["metrics"][index].append(learn(batch))
            return record["metrics"][index][-1]

        replica.learn = recording_learn
    fuse = runner.learners.fuse

    def recording_fuse():
        states = [replica.state_dict() for replica in runner.learners.replicas]
        record["before_fuse"] = states
        fuse()

    runner.learners.fuse = recording_fuse
    metrics = runner.iteration()
    return runner, record, metrics


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_two_learners_fuse_to_the_mean_of_replicas_that_saw_different_shards(algo):
    runner, record, metrics = _recording_k2_run(algo)
    n_updates = int(metrics["updates"])
    assert n_updates == 13 and len(record["samples"]) == n_updates
    # Each update: one sample of 2 x 64 rows; replica k learned on rows [64k, 64(k+1)).
    for step, sample in enumerate(record["samples"]):
        assert sample.obs.shape[0] == 128
        for k in (0, 1):
            batch = record["batches"][k][step]
            assert torch.equal(batch.obs, sample.obs[64 * k : 64 * (k + 1)])
            assert torch.equal(batch.rewards, sample.rewards[64 * k : 64 * (k + 1)])
    first, second = record["before_fuse"]
    fused = runner.agent.state_dict()
    averaged = 0
    for key, value in fused.items():
        if key.startswith("normalizer."):
            continue
        a, b = first[key], second[key]
        if a.is_floating_point() and not torch.equal(a, b):
            torch.testing.assert_close(value, (a + b) / 2, rtol=0, atol=1e-7)
            averaged += 1
        else:
            assert torch.equal(value, a), key
    # networks, target networks and Adam moments all differed and were averaged
    for part in ("net.actor.", "net.critic.", "net.target_critic.", ".exp_avg", ".exp_avg_sq"):
        assert any(part in key and not torch.equal(first[key], second[key]) for key in first), part
    assert averaged > 20
    for replica in runner.learners.replicas[1:]:
        for key, value in replica.state_dict().items():
            assert torch.equal(value, fused[key]), key
    # metrics are the mean over the two replicas
    metric_sum = torch.stack([torch.stack(record["metrics"][k]) for k in (0, 1)]).mean(0).sum(0)
    expected = dict(zip(runner.agent.metric_names, (metric_sum / n_updates).tolist(), strict=True))
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, rel=1e-5, abs=1e-7), name


def test_two_sac_learners_fuse_the_temperature_and_its_adam_moments():
    runner, record, _ = _recording_k2_run("sac", alpha_lr=0.01)
    first, second = record["before_fuse"]
    key = "net.temperature.log_alpha"
    assert not torch.equal(first[key], second[key])  # the replicas' alphas moved apart
    agent = runner.agent
    torch.testing.assert_close(agent.temperature.log_alpha.detach(), (first[key] + second[key]) / 2)
    alpha_index = len(list(agent.actor.parameters())) + len(list(agent.critic.parameters()))
    for moment in ("exp_avg", "exp_avg_sq"):
        name = f"optim.sac.{alpha_index}.{moment}"
        assert not torch.equal(first[name], second[name])
        torch.testing.assert_close(agent.state_dict()[name], (first[name] + second[name]) / 2)


def test_two_td3_learners_keep_the_policy_delay_on_each_replica():
    runner, record, metrics = _recording_k2_run("td3", policy_delay=3)
    n_updates = int(metrics["updates"])
    expected_flags = [float((i + 1) % 3 == 0) for i in range(n_updates)]
    for k in (0, 1):
        flags = [float(m[2]) for m in record["metrics"][k]]  # "actor_updates" entry
        assert flags == expected_flags, k
    assert runner.agent.num_updates == n_updates == 13
    assert runner.agent.actor_updates == 4
    assert metrics["actor_updates"] == pytest.approx(4 / 13)
    replica = runner.learners.replicas[1]
    assert (replica.num_updates, replica.actor_updates) == (13, 4)
    # the next iteration continues the phase: update 15 is an actor update on both replicas
    runner.iteration()
    assert runner.agent.actor_updates == runner.agent.num_updates // 3


def test_fusion_keeps_the_agents_normalizer_and_replicas_use_its_current_statistics():
    runner, record, _ = _recording_k2_run("sac")
    # The agent's statistics are exactly those of every observation the worker fed it,
    # in order: the first reset observations, then each step's next observations.
    expected = ObsNormalizer(3)
    transitions = runner.buffer.transitions()
    expected.update(transitions.obs[:2])
    for step in range(transitions.obs.shape[0] // 2):
        expected.update(transitions.next_obs[2 * step : 2 * step + 2])
    for key, value in expected.state_dict().items():
        assert torch.equal(runner.agent.normalizer.state_dict()[key], value), key
    # A replica normalises with the agent's statistics as they are now, not as they were
    # at the start of the epoch.
    config = make_config("sac", {**TINY, "normalize_obs": True})
    group = LearnerGroup(make_agent("sac", 3, 1, config), 2)
    group.sync_replicas()
    group.agent.normalizer.update(torch.randn(16, 3) * 4 + 2)
    obs = torch.randn(5, 3)
    replica_view = group.replicas[1].normalizer.normalize(obs)
    assert torch.equal(replica_view, group.agent.normalizer.normalize(obs))
    before = group.agent.normalizer.state_dict()
    for seed, replica in enumerate(group.replicas):
        replica.learn(random_batch(seed=seed))
    group.fuse()
    for replica in group.replicas:
        for key, value in before.items():
            assert torch.equal(replica.normalizer.state_dict()[key], value), key


def test_replicas_draw_their_own_noise():
    agent = make_agent("sac", 3, 1, make_config("sac", TINY), seed=4)
    group = LearnerGroup(agent, 3)
    group.sync_replicas()
    obs = torch.randn(8, 3)
    actions = [replica.act(obs) for replica in group.replicas]  # same weights, own generators
    for i in range(3):
        for j in range(i):
            assert not torch.equal(actions[i], actions[j]), (i, j)


def test_runner_rejects_an_env_on_another_device_or_with_other_dims():
    env = GymVecEnv("Pendulum-v1", 1)
    agent = make_agent("sac", 4, 1, make_config("sac", TINY))
    with pytest.raises(ConfigError, match="dims"):
        OffPolicyRunner(agent, env)


# --------------------------------------------------------------------------- learning (slow)


def evaluate(agent, episodes: int = 10, seed: int = 10_000) -> float:
    """Mean return of the deterministic policy over ``episodes`` Pendulum episodes."""
    env = GymVecEnv("Pendulum-v1", episodes, seed=seed)
    obs, _ = env.reset(seed=seed)
    total = torch.zeros(episodes)
    for _ in range(200):  # Pendulum-v1 episodes are 200 steps
        obs, reward, _, _, _ = env.step(agent.act(obs, deterministic=True))
        total += reward
    return total.mean().item()


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_pendulum_reaches_minus_250_within_20k_steps(algo):
    runner = pendulum_runner(
        algo,
        num_envs=1,
        seed=0,
        hidden_sizes=(256, 256),
        batch_size=256,
        actor_lr=1e-3,
        critic_lr=1e-3,
        learning_starts=1000,
        iteration_steps=1000,
    )
    start, score = time.perf_counter(), -math.inf
    while runner.env_steps < 20_000 and score < -250:
        runner.iteration()
        score = evaluate(runner.agent)
    wall = time.perf_counter() - start
    print(f"{algo}: {score:.1f} after {runner.env_steps} steps, {wall:.0f} s")
    assert score >= -250


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_compiled_agent_learns_like_the_eager_one(algo):
    """``compile()`` keeps state-dict keys and gives the eager agent's updates (slow: compiles)."""
    eager = make_agent(algo, 3, 1, make_config(algo, TINY), seed=0)
    compiled = make_agent(algo, 3, 1, make_config(algo, TINY), seed=0)
    compiled.compile()
    assert compiled.state_dict().keys() == eager.state_dict().keys()
    for seed in range(3):
        batch = random_batch(seed=seed)
        expected, got = eager.update(batch), compiled.update(batch)
        for name, value in expected.items():
            assert got[name] == pytest.approx(value, rel=1e-4, abs=1e-5), name
    obs = torch.randn(8, 3)
    torch.testing.assert_close(compiled.act(obs, True), eager.act(obs, True), rtol=1e-4, atol=1e-5)
