"""RLlib baselines (PPO, SAC), trained in RLlib's own virtual environment.

Ray 2.60 pins gymnasium 1.2.2 while the project runs on a newer one, so RLlib lives
in ``.venv-rllib`` (built by ``make rllib``: Ray, the same torch, and this package).
`train_rllib` starts `trader.libraries.rllib_worker` there and reads back what it
writes into the baseline's folder; the policy comes back as a plain MLP
(``policy.safetensors`` + ``policy.json``) that `MLPPolicy` runs here without Ray.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any


from trader import rundir
from trader.libraries.budget import Budget
from trader.errors import UserError

ALGOS = ("ppo", "sac")
"""RLlib algorithms a baseline may use (continuous actions)."""

PYTHON_VARIABLE = "PODRACER_RLLIB_PYTHON"
"""Environment variable: the Python of an environment with RLlib and this package."""


def rllib_python() -> Path:
    """The Python that runs RLlib: ``$PODRACER_RLLIB_PYTHON`` or the checkout's ``.venv-rllib``."""
    given = os.environ.get(PYTHON_VARIABLE)
    path = Path(given) if given else Path(__file__).resolve().parents[2] / ".venv-rllib" / "bin" / "python"
    if not path.is_file():
        raise UserError(
            f"RLlib is not installed ({path} not found): run `make rllib` (it builds .venv-rllib; Ray pins its own "
            f"gymnasium, so it cannot share .venv) or set {PYTHON_VARIABLE} to a Python that has ray[rllib] and podracer-trader"
        )
    return path


def train_rllib(
    algo: str,
    seed: int,
    dataset: str,
    env_config: dict[str, Any],
    budget: Budget,
    folder: Path,
    eval_every: int,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Run the worker for one baseline into `folder`; its figures for the sidecar."""
    if algo not in ALGOS:
        raise UserError(f"RLlib baselines take {', '.join(ALGOS)}, not {algo!r}")
    python = rllib_python()
    spec = {
        "algo": algo,
        "seed": seed,
        "dataset": dataset,
        "env_config": env_config,
        "steps": budget.steps,
        "seconds": budget.seconds,
        "eval_every": eval_every,
        "out": str(folder.resolve()),
    }
    rundir.write_json(folder / "spec.json", spec)
    with open(folder / "worker.log", "w") as log:
        process = subprocess.Popen(
            [str(python), "-m", "trader.libraries.rllib_worker", str(folder / "spec.json")],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        for line in process.stdout:
            say(line.rstrip())
        code = process.wait()
    if code != 0 or not (folder / "result.json").is_file():
        tail = (folder / "worker.log").read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"the RLlib worker exited with code {code}: {tail[0]} (see {folder / 'worker.log'})")
    result = rundir.read_json(folder / "result.json")
    return {
        "library_version": result["library_version"],
        "trained_with": f"ray[rllib] {result['library_version']} in {python.parent.parent}",
        "label": f"RLlib {algo.upper()} (seed {seed})",
        "preset": "rllib",
        "hyperparameters": {"model": "RLlib defaults, fcnet_hiddens [256, 256], tanh"},
        "num_envs": 1,
        "vec_env": "GymStockTradingEnv, one local env runner",
        "steps": int(result["steps"]),
        "seconds": float(result["seconds"]),
        "samples_per_s": result["steps"] / max(result["seconds"], 1e-9),
        "models": [{"file": "policy.safetensors", "algo": algo, "start": None}],
        "selection": result["selection"],
        "validation": result["validation"],
    }
