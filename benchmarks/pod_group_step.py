"""What a pod group buys a PPO gradient step: P lone pods one after another, against P rows
stacked as one program (issue 77).

Equal work: P PPO minibatch updates (a minibatch of ``--minibatch`` rollout rows per pod, the
actor's mean and the critic as flat MLPs of ``--hidden`` units over the observation of
``--dataset``'s market env, the clipped surrogate, the clipped value loss, gradient clipping,
Adam). Three ways of running them:

- **lone**: today's pod, P times: `PPOAgent` and its own minibatch step
  (`trader.agents.ppo.minibatch_step`, fused Adam), one pod after another, as a tournament's
  worker trains its pods;
- **stacked**: the P networks as one module of `StackedLinear` layers (one ``baddbmm`` a layer
  for all the pods, `trader.agents.population`), the loss written over [P, B] and one
  `RowAdam` step with each row's own learning rate;
- **vmap**: the same P networks through ``torch.func`` (``stack_module_state``,
  ``functional_call`` and ``vmap`` of ``grad``, PyTorch's recipe for model ensembles), with
  the same `RowAdam`.

A second table times the env's side: one step of the market env with E sub-environments
(one lone pod's env) against one step with P x E (a group's env, P pods' rows in one batch).

A third table times one validation pass (the deterministic pass over the validation period that
scores a pod, `trader.agents.evaluator`'s chunked `Rollout` of a `PolicyProgram`): P pods' policies
decided as one program over an env of P rows, against one pod's pass alone.

A last line times the first layer's product alone (a minibatch through ``obs_dim`` x the first
width) in float32 and in bfloat16: what an update with less arithmetic might buy where the update is
compute-bound.

Printed: milliseconds for the P updates (median of ``--repeats``), per pod, and the speed-up of
each stacked form over the lone pods. The issue asks which form is faster; a pod group's CPU
target (2x pods/h) needs its update to cost much less than P lone ones.

    OMP_NUM_THREADS=1 python benchmarks/pod_group_step.py
    OMP_NUM_THREADS=1 python benchmarks/pod_group_step.py --pods 1,4,16,64 --device cuda
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import fields

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, stack_module_state, vmap

from trader.agents import make_agent
from trader.agents.population import RowAdam, clip_row_grad_norms, stack_sequentials
from trader.agents.ppo import PPOAgent, gaussian_log_prob, minibatch_step
from trader.agents.rollout import RolloutBatch

CLIP, MAX_GRAD_NORM, VF_COEF = 0.2, 0.5, 0.5


def market_dims(dataset: str) -> tuple[int, int]:
    """(obs_dim, act_dim) of the dataset's market env with the default rules."""
    from market_envs import StockTradingVecEnv
    from trader.environments import load_market

    env = StockTradingVecEnv(load_market(dataset, None, None), num_envs=1)
    return env.obs_dim, env.act_dim


def random_batch(rows: int, obs_dim: int, act_dim: int, device: str, seed: int) -> RolloutBatch:
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape: int) -> Tensor:
        return torch.randn(shape, generator=g, device=device)

    return RolloutBatch(
        obs=randn(rows, obs_dim),
        actions=randn(rows, act_dim),
        logprobs=randn(rows) - act_dim,
        values=randn(rows),
        advantages=randn(rows),
        returns=randn(rows),
    )


def agents(pods: int, obs_dim: int, act_dim: int, hidden: tuple[int, ...], device: str) -> list[PPOAgent]:
    config = {"hidden_sizes": hidden, "normalize_obs": False}
    return [make_agent("ppo", obs_dim, act_dim, config, device=device, seed=seed) for seed in range(pods)]


def row_losses(mean: Tensor, values: Tensor, log_std: Tensor, batch: RolloutBatch) -> Tensor:
    """PPO's loss of each row [P] from the rows' action means [P, B, A] and values [P, B]."""
    advantages = batch.advantages
    advantages = (advantages - advantages.mean(-1, keepdim=True)) / (advantages.std(-1, keepdim=True) + 1e-8)
    new_logprob = gaussian_log_prob(batch.actions, mean, log_std.unsqueeze(-2))
    ratio = torch.exp(new_logprob - batch.logprobs)
    policy = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - CLIP, 1 + CLIP)).mean(-1)
    clipped = batch.values + (values - batch.values).clamp(-CLIP, CLIP)
    errors = 0.5 * torch.maximum((values - batch.returns).pow(2), (clipped - batch.returns).pow(2))
    return policy + VF_COEF * errors.mean(-1)


def stacked_batch(batches: list[RolloutBatch]) -> RolloutBatch:
    names = [f.name for f in fields(RolloutBatch)]
    return RolloutBatch(**{name: torch.stack([getattr(b, name) for b in batches]) for name in names})


def lone_step(pods: list[PPOAgent], batches: list[RolloutBatch]) -> Callable[[], None]:
    steps = [minibatch_step(batch) for batch in batches]
    indices = torch.arange(batches[0].size, device=pods[0].device)

    def run() -> None:
        for agent, step in zip(pods, steps, strict=True):
            step(agent, indices)

    return run


def stacked_step(pods: list[PPOAgent], batches: list[RolloutBatch]) -> Callable[[], None]:
    actor = stack_sequentials([a.actor.mean for a in pods])
    critic = stack_sequentials([a.critic for a in pods])
    log_std = nn.Parameter(torch.stack([a.actor.log_std.detach() for a in pods]))
    params = [*actor.parameters(), *critic.parameters(), log_std]
    adam = RowAdam(params, torch.full((len(pods),), 3e-4), eps=1e-5)
    limit = torch.full((len(pods),), MAX_GRAD_NORM, device=log_std.device)
    batch = stacked_batch(batches)

    def run() -> None:
        adam.zero_grad()
        row_losses(actor(batch.obs), critic(batch.obs).squeeze(-1), log_std, batch).sum().backward()
        clip_row_grad_norms(params, limit)
        adam.apply()

    return run


def vmap_step(pods: list[PPOAgent], batches: list[RolloutBatch]) -> Callable[[], None]:
    actor_params, _ = stack_module_state([a.actor.mean for a in pods])
    critic_params, _ = stack_module_state([a.critic for a in pods])
    actor_base, critic_base = pods[0].actor.mean, pods[0].critic
    log_std = torch.stack([a.actor.log_std.detach() for a in pods]).requires_grad_()
    state = {"actor": actor_params, "critic": critic_params, "log_std": log_std}
    leaves = [*actor_params.values(), *critic_params.values(), log_std]
    adam = RowAdam(leaves, torch.full((len(pods),), 3e-4), eps=1e-5)
    limit = torch.full((len(pods),), MAX_GRAD_NORM, device=log_std.device)
    batch = stacked_batch(batches)

    def one_loss(params: dict, obs, actions, logprobs, values, advantages, returns) -> Tensor:
        row = RolloutBatch(obs, actions, logprobs, values, advantages, returns)
        mean = functional_call(actor_base, params["actor"], (obs,))
        value = functional_call(critic_base, params["critic"], (obs,)).squeeze(-1)
        return row_losses(mean, value, params["log_std"], row)

    gradient = vmap(grad(one_loss))

    def run() -> None:
        grads = gradient(state, *(getattr(batch, f.name) for f in fields(RolloutBatch)))
        flat = [*grads["actor"].values(), *grads["critic"].values(), grads["log_std"]]
        for leaf, g in zip(leaves, flat, strict=True):
            leaf.grad = g
        clip_row_grad_norms(leaves, limit)
        adam.apply()

    return run


def env_step_ms(dataset: str, rows: int, repeats: int, device: str) -> float:
    """Milliseconds of one step of ``dataset``'s market env with ``rows`` sub-environments (median)."""
    from market_envs import StockTradingVecEnv
    from trader.environments import load_market

    env = StockTradingVecEnv(load_market(dataset, None, None), num_envs=rows, device=device)
    env.reset(seed=0)
    actions = torch.rand(rows, env.act_dim, device=device) * 2 - 1
    return median_ms(lambda: env.step(actions), repeats, device)


def validation_ms(dataset: str, pods: int, hidden: tuple[int, ...], repeats: int, device: str) -> float:
    """Milliseconds of one validation pass of ``pods`` untrained PPO policies as one program (median)."""
    from market_envs import EnvConfig, StockTradingVecEnv
    from market_envs.rollout import Rollout
    from trader.agents.program import agents_program
    from trader.environments import load_market

    data = load_market(dataset, None, None).period("validation")
    env = StockTradingVecEnv(data, pods, device, EnvConfig(random_start=False, episode_length=None))
    built = agents_program(agents(pods, env.obs_dim, env.act_dim, hidden, device))
    assert built is not None
    program, params = built
    rollout = Rollout(env, program, record=("reward", "value"))

    def run() -> None:
        with torch.inference_mode():
            obs, _ = env.reset(seed=0)
            rollout.run(params, obs)

    return median_ms(run, repeats, device)


def median_ms(run: Callable[[], None], repeats: int, device: str) -> float:
    run()  # warm-up
    times = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", default="1,4,16", help="group sizes P, comma-separated")
    parser.add_argument("--dataset", default="synthetic-edge-daily", help="the market whose observation is used")
    parser.add_argument(
        "--dims", default=None, help="obs_dim,act_dim instead of the dataset's (e.g. 3,1: Pendulum's sizes)"
    )
    parser.add_argument("--minibatch", type=int, default=64, help="rollout rows per pod per update")
    parser.add_argument("--hidden", default="64,64", help="hidden widths of actor and critic")
    parser.add_argument("--envs", type=int, default=16, help="sub-environments per pod (the env table)")
    parser.add_argument("--repeats", type=int, default=50, help="timed repeats (the median is printed)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    hidden = tuple(int(h) for h in args.hidden.split(","))
    obs_dim, act_dim = market_dims(args.dataset) if args.dims is None else map(int, args.dims.split(","))
    print(
        f"# {platform.node()}, torch {torch.__version__}, {args.device}, {os.cpu_count()} cores; "
        f"obs {obs_dim}, actions {act_dim}, hidden {hidden}, minibatch {args.minibatch}, {args.repeats} repeats"
    )
    print(
        "| pods P | lone ms | stacked ms | vmap ms | lone ms/pod | stacked ms/pod | stacked speed-up | vmap speed-up |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for pods in (int(p) for p in args.pods.split(",")):
        batches = [random_batch(args.minibatch, obs_dim, act_dim, args.device, seed) for seed in range(pods)]
        timings = {
            name: median_ms(
                build(agents(pods, obs_dim, act_dim, hidden, args.device), batches), args.repeats, args.device
            )
            for name, build in (("lone", lone_step), ("stacked", stacked_step), ("vmap", vmap_step))
        }
        lone, stacked, vmapped = timings["lone"], timings["stacked"], timings["vmap"]
        print(
            f"| {pods} | {lone:.2f} | {stacked:.2f} | {vmapped:.2f} | {lone / pods:.3f} | {stacked / pods:.3f} | "
            f"{lone / stacked:.1f}x | {lone / vmapped:.1f}x |"
        )
    if args.dims is None:
        print()
        print("| pods P | validation pass ms | one pod's pass ms | P pods / one pod |")
        print("|---|---|---|---|")
        repeats = max(3, args.repeats // 10)
        one = validation_ms(args.dataset, 1, hidden, repeats, args.device)
        for pods in (int(p) for p in args.pods.split(",")):
            group = validation_ms(args.dataset, pods, hidden, repeats, args.device)
            print(f"| {pods} | {group:.1f} | {one:.1f} | {group / one:.2f}x |")
    x = torch.randn(args.minibatch, obs_dim, device=args.device)
    w = torch.randn(hidden[0], obs_dim, device=args.device)
    xb, wb = x.bfloat16(), w.bfloat16()
    single = median_ms(lambda: x @ w.t(), args.repeats, args.device)
    half = median_ms(lambda: xb @ wb.t(), args.repeats, args.device)
    print()
    print(
        f"first layer {args.minibatch}x{obs_dim} @ {obs_dim}x{hidden[0]}: float32 {single:.3f} ms, "
        f"bfloat16 {half:.3f} ms ({single / half:.1f}x)"
    )
    if args.dims is None:
        print()
        print(f"| pods P | env rows | ms per step | ms per step of {args.envs} rows alone | speed-up per pod |")
        print("|---|---|---|---|---|")
        alone = env_step_ms(args.dataset, args.envs, args.repeats, args.device)
        for pods in (int(p) for p in args.pods.split(",")):
            together = env_step_ms(args.dataset, pods * args.envs, args.repeats, args.device)
            print(f"| {pods} | {pods * args.envs} | {together:.3f} | {alone:.3f} | {pods * alone / together:.1f}x |")
    return 0 if math.isfinite(lone) else 1


if __name__ == "__main__":
    raise SystemExit(main())
