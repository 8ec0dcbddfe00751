"""What the per-stock network costs: PPO's learner and actor, flat MLP against per-stock.

Equal work: one PPO update (4 epochs x 8 minibatches) on a rollout of 32 steps x 512
envs, and 32 `explore` calls on 512 observations (the actor and critic forward
passes of collecting that rollout), on random observations of the market layout
with one feature per stock (the learning check's ``ret_tstat_30``). The env's own
step is left out (the same for both networks). Samples/s = rollout rows / (update +
collection forward passes).

    OMP_NUM_THREADS=1 python benchmarks/network_speed.py
    OMP_NUM_THREADS=1 python benchmarks/network_speed.py --stocks 30,100 --device cuda
    OMP_NUM_THREADS=1 python benchmarks/network_speed.py --offpolicy --stocks 100

``--offpolicy``: instead, milliseconds per SAC and TD3 gradient update (critic, actor
and target networks; batch 256) on random replay rows of the same layout: what sizes
their budget on the market (updates per 20 minutes).
"""

from __future__ import annotations

import argparse
import time

import torch

from trader.agents import make_agent
from trader.agents.replay import ReplayBatch
from trader.agents.rollout import RolloutBatch

NETWORKS = (("mlp", (64, 64)), ("per_stock", (32, 32)), ("per_stock", (16, 16)))
NUM_STEPS, NUM_ENVS = 32, 512


def measure(network: str, hidden: tuple[int, ...], stocks: int, device: str, repeats: int) -> tuple[float, float, int]:
    """(seconds per update, seconds per explore call), medians of ``repeats``, and the
    agent's parameter count."""
    obs_dim = 1 + 2 * stocks
    config = {
        "network": network,
        "hidden_sizes": hidden,
        "num_steps": NUM_STEPS,
        "update_epochs": 4,
        "num_minibatches": 8,
        "normalize_obs": False,
    }
    agent = make_agent("ppo", obs_dim, stocks, config, device=device)
    rows = NUM_STEPS * NUM_ENVS
    obs = torch.randn(rows, obs_dim, device=device)
    actions, logprob, values = agent.explore(obs)
    batch = RolloutBatch(obs, actions, logprob, values, torch.randn(rows, device=device), values + 1)
    agent.update(batch)  # warm-up
    step_obs = torch.randn(NUM_ENVS, obs_dim, device=device)
    updates, explores = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        agent.update(batch)
        updates.append(time.perf_counter() - start)
        start = time.perf_counter()
        for _ in range(NUM_STEPS):
            agent.explore(step_obs)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        explores.append((time.perf_counter() - start) / NUM_STEPS)
    params = sum(p.numel() for module in agent.modules().values() for p in module.parameters())
    return sorted(updates)[repeats // 2], sorted(explores)[repeats // 2], params


OFFPOLICY_NETWORKS = (("mlp", (256, 256)), ("per_stock", (64, 64)), ("per_stock", (16, 16)))
BATCH = 256


def measure_offpolicy(
    algo: str, network: str, hidden: tuple[int, ...], stocks: int, device: str, repeats: int
) -> float:
    """Median seconds of one gradient update of `algo` on a random batch of BATCH rows."""
    obs_dim = 1 + 2 * stocks
    agent = make_agent(
        algo,
        obs_dim,
        stocks,
        {"network": network, "hidden_sizes": hidden, "batch_size": BATCH, "normalize_obs": False},
        device=device,
    )
    batch = ReplayBatch(
        torch.randn(BATCH, obs_dim, device=device),
        torch.rand(BATCH, stocks, device=device) * 2 - 1,
        torch.randn(BATCH, device=device),
        torch.randn(BATCH, obs_dim, device=device),
        torch.zeros(BATCH, device=device),
    )
    agent.update(batch)  # warm-up
    times = []
    for _ in range(repeats * 5):
        start = time.perf_counter()
        agent.update(batch)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def offpolicy_table(stocks_list: list[int], device: str, repeats: int) -> None:
    print("| stocks | algo | network | hidden | update ms | updates per 20 min |")
    print("|---:|---|---|---|---:|---:|")
    for stocks in stocks_list:
        for algo in ("sac", "td3"):
            for network, hidden in OFFPOLICY_NETWORKS:
                seconds = measure_offpolicy(algo, network, hidden, stocks, device, repeats)
                print(
                    f"| {stocks} | {algo} | {network} | {hidden} | {seconds * 1e3:.1f} | {1200 / seconds:,.0f} |",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stocks", default="30,100")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--offpolicy", action="store_true", help="time SAC and TD3 updates instead of PPO")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.offpolicy:
        offpolicy_table([int(s) for s in args.stocks.split(",")], args.device, args.repeats)
        return
    print("| stocks | network | hidden | params | update ms | explore ms | samples/s | x flat |")
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    for stocks in (int(s) for s in args.stocks.split(",")):
        flat = None
        for network, hidden in NETWORKS:
            update, explore, params = measure(network, hidden, stocks, args.device, args.repeats)
            rate = NUM_STEPS * NUM_ENVS / (update + NUM_STEPS * explore)
            flat = flat or rate
            print(
                f"| {stocks} | {network} | {hidden} | {params:,} | {update * 1e3:.0f} | {explore * 1e3:.2f} | "
                f"{rate:,.0f} | {rate / flat:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
