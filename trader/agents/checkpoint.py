"""Checkpoints: ``<path>.safetensors`` (the agent's flat tensor state) + ``<path>.json``.

The safetensors file holds every tensor of ``Agent.state_dict()``: network weights,
optimiser moments and step counts, the observation normaliser; and, under
``rng.generator``, the state of the agent's random generator, so that training
continued from a checkpoint (``trader.train(..., init_from=...)``) draws the same
numbers an uninterrupted run would have drawn. The JSON sidecar holds
what a reader needs to rebuild the agent without guessing: algo, resolved config,
obs/act dims, seed, normalisation statistics (readable copy), the data window the
agent was trained and validated on, the library version, and free-form ``info``.

Both files are written whole or not at all (`trader.rundir.write_atomic`), tensors
first and the sidecar last, so a reader that finds the sidecar finds whole weights.
Loading never unpickles: tensors come from safetensors, metadata from JSON.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

import trader
from trader import rundir
from trader.agents.base import Agent
from trader.errors import CheckpointError

FORMAT_VERSION = rundir.CHECKPOINT_VERSION
RNG_KEY = "rng.generator"
"""Key of the agent generator's state (uint8) in the safetensors file; optional on load."""
_REQUIRED_KEYS = ("format_version", "algo", "config", "obs_dim", "act_dim", "library_version")


def checkpoint_paths(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """``(<path>.safetensors, <path>.json)``; a path given with either suffix is accepted."""
    base = Path(path)
    if base.suffix in (".safetensors", ".json"):
        base = base.with_suffix("")
    return base.with_name(base.name + ".safetensors"), base.with_name(base.name + ".json")


def write_tensors(path: str | os.PathLike[str], tensors: Mapping[str, torch.Tensor]) -> Path:
    """A safetensors file of ``tensors`` (CPU, contiguous), whole or not at all
    (`trader.rundir.write_atomic`), streamed to disk; a full disk or a read-only folder is
    the `OSError` it is (so one `trader.errors.UnwritableError` line), not safetensors' own error."""

    def write(tmp: Path) -> None:
        try:
            save_file(dict(tensors), str(tmp), metadata={"format": "podracer-trader"})
        except SafetensorError as err:
            found = re.search(r"os error (\d+)", str(err))
            if found is None:
                raise
            code = int(found.group(1))
            raise OSError(code, os.strerror(code)) from err

    return rundir.write_atomic(path, write)


def read_tensors(path: str | os.PathLike[str], device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """A safetensors file's tensors on ``device``; a missing or unreadable one is one
    `CheckpointError` naming it. Nothing is unpickled."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint weights not found: {path}")
    try:
        return load_file(str(path), device=str(torch.device(device)))
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"cannot read checkpoint weights {path}: {err}") from err


def save_checkpoint(
    agent: Agent,
    path: str | os.PathLike[str],
    *,
    data_window: Mapping[str, Any] | None = None,
    info: Mapping[str, Any] | None = None,
) -> tuple[Path, Path]:
    """Write the agent's state and sidecar atomically; return both paths.

    :param agent: any registered agent.
    :param path: checkpoint name without suffix (parent folders are created).
    :param data_window: JSON-able description of the data periods (e.g. train and
        validation start/end, or the gymnasium env id).
    :param info: JSON-able extras (training step, validation score, ...).
    """
    tensor_path, json_path = checkpoint_paths(path)
    tensor_path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {key: value.detach().cpu().contiguous() for key, value in agent.state_dict().items()}
    tensors[RNG_KEY] = agent.generator.get_state()
    sidecar = {
        "format_version": FORMAT_VERSION,
        "library_version": trader.__version__,
        **agent.metadata(),
        "data_window": dict(data_window) if data_window is not None else None,
        "info": dict(info) if info is not None else {},
    }
    write_tensors(tensor_path, tensors)
    rundir.write_json(json_path, sidecar, sort_keys=True)
    return tensor_path, json_path


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON sidecar of a checkpoint, checked for the keys a loader needs."""
    _, json_path = checkpoint_paths(path)
    if not json_path.is_file():
        raise CheckpointError(f"checkpoint sidecar not found: {json_path}")
    try:
        meta = json.loads(json_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise CheckpointError(f"checkpoint sidecar {json_path} is not valid JSON: {err}") from err
    missing = [key for key in _REQUIRED_KEYS if key not in meta]
    if missing:
        raise CheckpointError(f"checkpoint sidecar {json_path} lacks {', '.join(missing)}")
    if meta["format_version"] != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {json_path} has format_version {meta['format_version']}, this library reads {FORMAT_VERSION}"
        )
    return meta


def load_checkpoint(
    path: str | os.PathLike[str], device: torch.device | str = "cpu"
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``(flat tensor state on device, sidecar dict)``; safetensors only, nothing unpickled.

    The state includes `RNG_KEY` when the checkpoint has it (`restore_agent` handles it).
    """
    meta = read_metadata(path)
    tensor_path, _ = checkpoint_paths(path)
    return read_tensors(tensor_path, device), meta


def load_agent(path: str | os.PathLike[str], device: torch.device | str = "cpu") -> Agent:
    """Rebuild the agent (networks, optimisers, normaliser) exactly as it was saved."""
    from trader.agents import make_agent  # the registry imports the algorithm modules

    state, meta = load_checkpoint(path, device)
    agent = make_agent(
        meta["algo"],
        int(meta["obs_dim"]),
        int(meta["act_dim"]),
        dict(meta["config"]),
        device=device,
        seed=int(meta.get("seed", 0)),
    )
    restore_agent(agent, state)
    return agent


def restore_agent(agent: Agent, state: dict[str, torch.Tensor]) -> None:
    """Load a checkpoint's flat state into ``agent``, its generator state included."""
    state = dict(state)
    rng = state.pop(RNG_KEY, None)
    agent.load_state_dict(state)
    if rng is not None:
        agent.generator.set_state(rng.cpu())


def load_policy(path: str | os.PathLike[str], device: torch.device | str = "cpu") -> Agent:
    """An agent ready to act: loaded from ``path`` and switched to eval mode."""
    agent = load_agent(path, device)
    agent.train_mode(False)
    return agent
