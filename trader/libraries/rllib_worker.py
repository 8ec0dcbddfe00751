"""Train an RLlib baseline; runs inside RLlib's own virtual environment (``make rllib``).

Ray pins its own gymnasium version, so RLlib cannot share the project's environment.
`trader.libraries.rllib` starts this module with ``.venv-rllib/bin/python -m
trader.libraries.rllib_worker SPEC.json`` and the two sides exchange files only:

- in: ``SPEC.json`` (algo, seed, data set, env rules, budget, eval_every, hyperparameters, out folder);
- out, in the out folder: ``policy.safetensors`` + ``policy.json`` (the best
  validation snapshot's deterministic policy as a plain MLP: layer sizes, activation,
  weights; the worker checks that the MLP gives the RLlib module's actions before it
  writes it) and ``result.json`` (steps, seconds, validation history, selection).

The env is `GymStockTradingEnv` over the data set's training period under the run's
rules; snapshots are scored by `trader.agents.evaluator.market_evaluator` on the validation
period, as every other learner is. One line of progress per validation on stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from trader import rundir
from trader.adapters.mlp import build_mlp, squash


def _env_creator(env_config: dict[str, Any]) -> Any:
    from market_envs.data import load
    from market_envs.config import EnvConfig
    from market_envs.gym_adapter import GymStockTradingEnv
    from trader.rundir import config_from_dict

    data = load(env_config["dataset"]).period("train")
    return GymStockTradingEnv(data, config_from_dict(EnvConfig, env_config["rules"]))


def _config(spec: dict[str, Any]) -> Any:
    """RLlib's algorithm config: one local env runner, no remote workers, CPU."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.algorithms.sac import SACConfig

    cls = {"ppo": PPOConfig, "sac": SACConfig}[spec["algo"]]
    hidden = list(spec.get("hidden_sizes", [256, 256]))
    config = (
        cls()
        .environment("podracer-market", env_config={"dataset": spec["dataset"], "rules": spec["env_config"]})
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .learners(num_learners=0)
        .debugging(seed=int(spec["seed"]))
        .rl_module(model_config={"fcnet_hiddens": hidden, "fcnet_activation": "tanh", "vf_share_layers": False})
    )
    if spec.get("hyperparameters"):
        config = config.training(**spec["hyperparameters"])
    return config


SQUASH = {"ppo": "clip", "sac": "tanh"}
"""How the Gaussian's mean becomes the deterministic action in [-1, 1]: PPO's diagonal
Gaussian acts in the action space (clipped to it); SAC's squashed Gaussian acts
through tanh, as SAC's objective (and SB3's SAC) has it. RLlib 2.60's own
``TorchSquashedGaussian.to_deterministic`` returns the unsquashed mean; we do not
copy that."""


class _Deterministic:
    """The RLlib module's deterministic action (the Gaussian's mean, squashed) as ``act``."""

    def __init__(self, module: Any, act_dim: int, how: str) -> None:
        self.module, self.act_dim, self.how = module, act_dim, how

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        out = self.module.forward_inference({"obs": obs.float()})
        return squash(out["action_dist_inputs"][..., : self.act_dim], self.how)


def _actor_mlp(module: Any) -> tuple[list[int], list[torch.Tensor]]:
    """The actor's Linear layers, in order (RLlib's default PPO/SAC MLP: an actor
    encoder, then the policy head); weights and biases alternate."""
    linears = [m for name, m in module.named_modules() if isinstance(m, torch.nn.Linear) and _is_actor(name)]
    sizes = [linears[0].in_features] + [m.out_features for m in linears]
    tensors = [t.detach().clone() for m in linears for t in (m.weight, m.bias)]
    return sizes, tensors


def _is_actor(name: str) -> bool:
    return ("actor" in name or name.startswith("pi")) and "critic" not in name and "vf" not in name and "qf" not in name


def export_policy(module: Any, act_dim: int, obs_dim: int, how: str, folder: Path) -> None:
    """Write the actor as a plain MLP, after checking it reproduces the module's actions."""
    from safetensors.torch import save_file

    sizes, tensors = _actor_mlp(module)
    mlp = build_mlp(sizes, tensors)
    probe = torch.randn(64, obs_dim)
    expected = _Deterministic(module, act_dim, how).act(probe)
    with torch.no_grad():
        got = squash(mlp(probe)[..., :act_dim], how)
    if not torch.allclose(expected, got, atol=1e-5):
        raise RuntimeError(
            f"the exported MLP {sizes} does not reproduce RLlib's actions "
            f"(max difference {float((expected - got).abs().max()):.3g})"
        )
    weights = {f"t{k}": t.contiguous() for k, t in enumerate(tensors)}
    rundir.write_atomic(folder / "policy.safetensors", lambda tmp: save_file(weights, str(tmp)))
    rundir.write_json(folder / "policy.json", {"sizes": sizes, "activation": "tanh", "act_dim": act_dim, "squash": how})


def main(spec_path: str) -> int:
    import ray
    from ray.tune.registry import register_env

    from market_envs.config import EnvConfig
    from trader.rundir import config_from_dict
    from trader.backtesting.periods import load_dataset
    from trader.libraries.budget import Budget
    from trader.libraries.selection import Selection
    from trader.agents.evaluator import market_evaluator

    torch.set_num_threads(1)
    spec = rundir.read_json(spec_path)
    out = Path(spec["out"])
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    register_env("podracer-market", _env_creator)
    data = load_dataset(spec["dataset"])
    evaluator = market_evaluator(data.period("validation"), config_from_dict(EnvConfig, spec["env_config"]))
    algo = _config(spec).build_algo()
    act_dim, obs_dim, how = int(evaluator.env.act_dim), int(evaluator.env.obs_dim), SQUASH[spec["algo"]]
    budget = Budget(steps=spec.get("steps"), seconds=spec.get("seconds"))
    progress = lambda row: print(
        f"{row['step']:,.0f} steps, {row['seconds']:.0f} s, validation score {row['score']:.2f}", flush=True
    )  # noqa: E731
    selection = Selection(evaluator, budget, spec["eval_every"], progress)
    while True:
        result = algo.train()
        steps = int(
            result.get("num_env_steps_sampled_lifetime") or result["env_runners"]["num_env_steps_sampled_lifetime"]
        )
        over = selection.spent(steps)
        if over or selection.due(steps):
            module = algo.get_module()
            selection.validate(
                _Deterministic(module, act_dim, how),
                steps,
                save=lambda: export_policy(module, act_dim, obs_dim, how, out),
            )
        if over:
            break
    rundir.write_json(
        out / "result.json",
        {
            "steps": steps,
            "seconds": selection.seconds,
            "validation": selection.history,
            "selection": {
                "score": selection.best_score,
                "step": selection.best_step,
                "validation": selection.best_metrics,
            },
            "library_version": ray.__version__,
        },
    )
    algo.stop()
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
