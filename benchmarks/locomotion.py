"""Locomotion (Ant-v5, Humanoid-v5): our PPO and SAC against SB3's at equal wall-clock.

Each run trains one learner for ``--minutes`` of training wall-clock on this machine,
and every ``--eval-every`` seconds of it the deterministic policy plays
``--eval-episodes`` fresh episodes with fixed seeds (the same episodes for every
learner, scored by the `Evaluator` that validates `trader.train` runs); evaluation
and start-up are not counted in the clock. The curves (return against training
seconds, CPU seconds and env steps) go to a CSV in docs/img/, the figure (the seed
paper's figures 5 and 6: return against wall-clock and against env steps) to a PNG
beside it, and the table gives, per learner, the return reached at the end of the
budget: per seed, and the interquartile mean over seeds with a 95% percentile
bootstrap interval (as rliable reports; with 3 seeds the IQM trims nothing and is
the mean); a last column smooths the evaluation noise with each seed's mean of its
last three scores. A last line scores the policy that stands still (zero action) on
the same episodes: Ant keeps standing for the whole episode, Humanoid falls.

Learners, each with its own configuration (equal wall-clock, not equal work):

- ``ours-sac``: our SAC, `CHOSEN_SAC` of `SAC_CONFIGS` below (chosen for learning
  per second on a CPU core; ``ours-sac:NAME`` runs the others, the search is in
  benchmarks/RESULTS.md);
- ``sb3-sac``: Stable-Baselines3 SAC with rl-baselines3-zoo's MuJoCo settings for
  Ant (``learning_starts=10000``, everything else SB3's defaults: 256x256, batch 256,
  lr 3e-4, one update per env step, autotuned temperature);
- ``ours-ppo``: our PPO, `OURS_PPO` below;
- ``sb3-ppo``: SB3 PPO with the zoo's MuJoCo default (``normalize: true``, i.e.
  `VecNormalize` of observations and rewards, one env, SB3's PPO defaults).

``--jobs 2`` runs two learners at once, one per core, in the order given (ours and
SB3 of the same seed side by side, so both see the same machine load). Each finished
run is saved as JSON under ``--out`` (runs/benchmarks/locomotion/); a later call
with the same learners, seeds and minutes reuses saved runs (``--force``
reruns them) and writes the table, CSV and PNG from all of them.

    OMP_NUM_THREADS=1 python benchmarks/locomotion.py --learners ours-sac sb3-sac \\
        --seeds 0 1 2 --minutes 15 --jobs 2
    OMP_NUM_THREADS=1 python benchmarks/locomotion.py --quick      # 1 seed, 1 minute
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import torch

from market_envs.gym_vec import GymVecEnv
from trader import aggregate
from trader.agents import get_spec, make_agent, make_config
from trader.agents.evaluator import Evaluator, mean_return_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the checkout's root, for benchmarks.
from benchmarks.sac_time_to_score import machine  # noqa: E402  (the CPU model line every benchmark prints)

ROOT = Path(__file__).resolve().parent.parent
LEARNERS = ("ours-sac", "sb3-sac", "ours-ppo", "sb3-ppo")

SAC_CONFIGS: dict[str, dict[str, Any]] = {
    "w256-u0.25": {"hidden_sizes": (256, 256), "batch_size": 256, "updates_per_step": 0.25},
    "w128-u0.5": {"hidden_sizes": (128, 128), "batch_size": 256, "updates_per_step": 0.5},
    "w64-u1": {"hidden_sizes": (64, 64), "batch_size": 256, "updates_per_step": 1.0},
}
"""Our SAC configurations tried on MuJoCo (8 sub-environments, 10,000 random steps
first); ``ours-sac`` runs `CHOSEN_SAC`, ``ours-sac:NAME`` any of them."""

CHOSEN_SAC = "w256-u0.25"
SAC_COMMON = {"learning_starts": 10_000, "iteration_steps": 256}
SEARCH = tuple(f"ours-sac:{name}" for name in SAC_CONFIGS)

OURS_PPO: dict[str, Any] = {
    "num_envs": 8,
    "config": {
        "num_steps": 256,
        "hidden_sizes": (64, 64),
        "num_minibatches": 32,
        "update_epochs": 10,
        "learning_rate": 3e-4,
        "reward_scale": 0.1,
        "normalize_obs": True,
    },
}
"""Our PPO on MuJoCo: sub-environments and config overrides."""


def evaluator(env_id: str, episodes: int, seed: int = 10_000) -> Evaluator:
    """What `trader.train` validates gymnasium runs with: the first episode of
    ``episodes`` seeded envs, deterministic actions, score = mean return."""
    return Evaluator(GymVecEnv(env_id, episodes, seed=seed), mean_return_score, seed=seed)


class Ours:
    """Our agent + runner on a `GymVecEnv`; trains one runner iteration at a time."""

    def __init__(self, algo: str, env_id: str, seed: int, sac_config: str = CHOSEN_SAC) -> None:
        if algo == "ppo":
            num_envs, overrides = OURS_PPO["num_envs"], OURS_PPO["config"]
        else:
            num_envs, overrides = 8, {**SAC_CONFIGS[sac_config], **SAC_COMMON}
        env = GymVecEnv(env_id, num_envs, seed=seed)
        config = make_config(algo, overrides)
        self.agent = make_agent(algo, env.obs_dim, env.act_dim, config, seed=seed)
        self.runner = get_spec(algo).runner_cls(self.agent, env)
        self.env_steps = 0

    def train_until(self, deadline: float) -> None:
        while time.perf_counter() < deadline:
            self.env_steps += int(self.runner.iteration()["env_steps"])

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        return self.agent.act(obs, deterministic)


class SB3:
    """SB3 SAC or PPO with the zoo's MuJoCo settings (module docstring)."""

    def __init__(self, algo: str, env_id: str, seed: int) -> None:
        import gymnasium as gym
        from stable_baselines3 import PPO, SAC
        from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

        self.algo = algo
        env = DummyVecEnv([lambda: gym.make(env_id)])
        env.seed(seed)
        if algo == "sac":
            self.model = SAC("MlpPolicy", env, learning_starts=10_000, seed=seed, device="cpu", verbose=0)
        else:
            env = VecNormalize(env, gamma=0.99)
            self.model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0)
        self.env = env
        self.first = True

    @property
    def env_steps(self) -> int:
        return int(self.model.num_timesteps)

    def train_until(self, deadline: float) -> None:
        from stable_baselines3.common.callbacks import BaseCallback

        class StopAt(BaseCallback):
            def _on_step(self) -> bool:
                return time.perf_counter() < deadline

        if self.algo == "ppo":  # one rollout + update per call: stops between updates
            while time.perf_counter() < deadline:
                self._learn(self.model.n_steps, None)
        else:
            self._learn(10**9, StopAt())

    def _learn(self, steps: int, callback: Any) -> None:
        self.model.learn(steps, callback=callback, reset_num_timesteps=self.first)
        self.first = False

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        from stable_baselines3.common.vec_env import VecNormalize

        raw = obs.numpy()
        if isinstance(self.env, VecNormalize):
            raw = self.env.normalize_obs(raw)
        actions, _ = self.model.predict(raw, deterministic=deterministic)
        return torch.as_tensor(np.asarray(actions), dtype=torch.float32)


def run_one(
    learner: str, env_id: str, seed: int, minutes: float, eval_every: float, eval_episodes: int
) -> dict[str, Any]:
    """Train ``learner`` for ``minutes`` of training wall-clock; its evaluation curve."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    name, _, sac_config = learner.partition(":")
    library, algo = name.split("-")
    if library == "sb3":
        agent: Ours | SB3 = SB3(algo, env_id, seed)
    else:
        agent = Ours(algo, env_id, seed, sac_config or CHOSEN_SAC)
    budget = 60.0 * minutes
    wall, cpu = 0.0, 0.0
    scorer = evaluator(env_id, eval_episodes)
    curve = [(0.0, 0.0, 0, scorer.evaluate(agent)["score"])]
    while wall < budget - 1e-9:
        start, start_cpu = time.perf_counter(), time.process_time()
        agent.train_until(start + min(eval_every, budget - wall))
        wall += time.perf_counter() - start
        cpu += time.process_time() - start_cpu
        score = scorer.evaluate(agent)["score"]
        curve.append((round(wall, 2), round(cpu, 2), agent.env_steps, round(score, 1)))
        print(f"  {learner} seed {seed}: {wall:6.0f} s, {agent.env_steps:8,d} steps, return {score:8.1f}", flush=True)
    return {
        "learner": learner,
        "env": env_id,
        "seed": seed,
        "minutes": minutes,
        "eval_episodes": eval_episodes,
        "curve": curve,
    }


def table(runs: list[dict[str, Any]], learners: list[str]) -> str:
    """Markdown: per learner the final return per seed, IQM [95% CI], steps and CPU."""
    lines = [
        "| learner | return per seed | IQM [95% CI] | env steps (median) | CPU s (median) "
        "| last 3 scores: mean per seed, IQM |",
        "|---|---|---:|---:|---:|---|",
    ]
    for learner in learners:
        mine = sorted((r for r in runs if r["learner"] == learner), key=lambda r: r["seed"])
        if not mine:
            continue
        finals = [r["curve"][-1] for r in mine]
        returns = [row[3] for row in finals]
        estimate = aggregate.stratified_interval(aggregate.iqm, returns)
        iqm, low, high = estimate.value, estimate.low, estimate.high
        per_seed = ", ".join(f"{value:,.0f}" for value in returns)
        lines.append(
            f"| {learner} | {per_seed} | {iqm:,.0f} [{low:,.0f}, {high:,.0f}] | "
            f"{int(np.median([row[2] for row in finals])):,} | "
            f"{np.median([row[1] for row in finals]):,.0f} | {_last_three(mine)} |"
        )
    return "\n".join(lines)


def _last_three(runs: list[dict[str, Any]]) -> str:
    means = [float(np.mean([row[3] for row in run["curve"][-3:]])) for run in runs]
    return ", ".join(f"{value:,.0f}" for value in means) + f"; {aggregate.iqm(means):,.0f}"


def write_csv(runs: list[dict[str, Any]], path: Path) -> None:
    """One row per evaluation: learner, seed, wall_s, cpu_s, env_steps, return."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["learner", "seed", "wall_s", "cpu_s", "env_steps", "return"])
        for run in sorted(runs, key=lambda r: (r["learner"], r["seed"])):
            for wall, cpu, steps, score in run["curve"]:
                writer.writerow([run["learner"], run["seed"], wall, cpu, steps, score])


def plot(runs: list[dict[str, Any]], env_id: str, path: Path) -> None:
    """Return against training wall-clock and against env steps: IQM and each seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    learners = sorted({r["learner"] for r in runs})
    for colour, learner in zip(plt.cm.tab10.colors, learners):
        mine = [r for r in runs if r["learner"] == learner]
        for axis, column in ((axes[0], 0), (axes[1], 2)):
            for run in mine:
                x = [row[column] for row in run["curve"]]
                y = [row[3] for row in run["curve"]]
                axis.plot(x, y, color=colour, alpha=0.35, linewidth=1)
            grid, iqm = _iqm_curve(mine, column)
            axis.plot(grid, iqm, color=colour, linewidth=2.2, label=f"{learner} (IQM)")
    axes[0].set_xlabel("training wall-clock (s)")
    axes[1].set_xlabel("env steps")
    for axis in axes:
        axis.set_ylabel("episode return")
        axis.grid(alpha=0.3)
    axes[0].legend(loc="upper left", fontsize=8)
    figure.suptitle(f"{env_id}: thin lines one seed each, thick the IQM over seeds")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _iqm_curve(runs: list[dict[str, Any]], column: int) -> tuple[np.ndarray, list[float]]:
    """IQM over runs of the latest return at or before each point of a common grid."""
    end = min(run["curve"][-1][column] for run in runs)
    grid = np.linspace(0.0, end, 60)
    values = []
    for point in grid:
        latest = [_latest(run["curve"], column, point) for run in runs]
        values.append(aggregate.iqm(latest))
    return grid, values


def _latest(curve: list[list[float]], column: int, point: float) -> float:
    return [row[3] for row in curve if row[column] <= point][-1]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Ant-v5", help="gymnasium MuJoCo id (Ant-v5)")
    parser.add_argument("--learners", nargs="+", default=list(LEARNERS), choices=LEARNERS + SEARCH)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--minutes", type=float, default=15.0, help="training wall-clock per run")
    parser.add_argument("--eval-every", type=float, default=60.0, help="training seconds between scores")
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (one per core)")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "runs" / "benchmarks" / "locomotion", help="where each run is saved as JSON"
    )
    parser.add_argument("--force", action="store_true", help="rerun runs saved under --out")
    parser.add_argument("--quick", action="store_true", help="1 seed, 1 minute, eval every 20 s")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.minutes, args.eval_every = [0], 1.0, 20.0
    return args


def run_file(args: argparse.Namespace, learner: str, seed: int) -> Path:
    return args.out / args.env / f"{learner}-{args.minutes:g}min-s{seed}.json"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    jobs = [(learner, seed) for seed in args.seeds for learner in args.learners]
    todo = [job for job in jobs if args.force or not run_file(args, *job).exists()]
    print(
        f"{args.env}: {len(todo)} of {len(jobs)} runs to do, {args.minutes:g} min each, "
        f"{args.jobs} at a time; {machine()}",
        flush=True,
    )
    with ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn")) as pool:
        futures = {
            job: pool.submit(run_one, job[0], args.env, job[1], args.minutes, args.eval_every, args.eval_episodes)
            for job in todo
        }
        for (learner, seed), future in futures.items():
            path = run_file(args, learner, seed)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(future.result()), encoding="utf-8")
    runs = [json.loads(run_file(args, *job).read_text(encoding="utf-8")) for job in jobs]
    stem = f"locomotion_{args.env}_{args.minutes:g}min"
    write_csv(runs, ROOT / "docs" / "img" / f"{stem}.csv")
    plot(runs, args.env, ROOT / "docs" / "img" / f"{stem}.png")
    print()
    print(
        f"{args.env}, {args.minutes:g} min of training wall-clock per run, "
        f"{args.eval_episodes} evaluation episodes; {machine()}"
    )
    print(table(runs, args.learners))
    print(f"standing still (zero action) on the same episodes: {standing_score(args.env, args.eval_episodes):,.0f}")
    if len(args.learners) == 2:
        print(paired(runs, *args.learners))
    return 0


def paired(runs: list[dict[str, Any]], first: str, second: str) -> str:
    """``first`` against ``second`` seed by seed (each seed's mean of its last three scores): the
    seeds where ``first`` is ahead and the one-sided exact Wilcoxon signed-rank p-value."""
    from scipy.stats import wilcoxon

    def smoothed(learner: str) -> dict[int, float]:
        return {r["seed"]: float(np.mean([row[3] for row in r["curve"][-3:]])) for r in runs if r["learner"] == learner}

    a, b = smoothed(first), smoothed(second)
    seeds = sorted(set(a) & set(b))
    differences = [a[seed] - b[seed] for seed in seeds]
    ahead = sum(d > 0 for d in differences)
    p = wilcoxon(differences, alternative="greater", method="exact").pvalue if seeds else float("nan")
    return (
        f"paired over {len(seeds)} seeds (last three scores): {first} ahead on {ahead}, one-sided Wilcoxon p = {p:.3f}"
    )


class Standing:
    """The policy that sends zero torque: Ant stands for the whole episode, Humanoid falls."""

    def __init__(self, act_dim: int) -> None:
        self.act_dim = act_dim

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        return torch.zeros(obs.shape[0], self.act_dim)


def standing_score(env_id: str, episodes: int) -> float:
    """The zero-action policy's score on the learners' evaluation episodes: the bar a learner passes."""
    scorer = evaluator(env_id, episodes)
    return float(scorer.evaluate(Standing(scorer.env.act_dim))["score"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
