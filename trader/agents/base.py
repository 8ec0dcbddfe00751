"""The agent contract shared by PPO, SAC and TD3, and the thin layer they share.

An agent is built as ``AgentClass(obs_dim, act_dim, config, device, seed)`` and offers:

- ``act(obs, deterministic=False) -> actions``: obs [B, obs_dim] raw (the agent
  normalises), actions float32 [B, act_dim] in [-1, 1], on the agent's device.
- ``update(batch) -> dict[str, float]``: one learner update on a batch (PPO: a
  rollout; SAC/TD3: a replay sample). Metrics are reduced once per call (a single
  host copy at the end), never per minibatch.
- ``state_dict() -> dict[str, Tensor]``: a *flat* mapping of contiguous tensors:
  ``net.<module>.<param>``, ``optim.<name>.<index>.<key>`` (Adam moments and step),
  ``optim.<name>.group<i>.lr``, ``normalizer.{mean,var,count}`` and ``extra.<key>``.
  This is what a safetensors checkpoint stores; ``load_state_dict`` restores it.
- ``metadata() -> dict``: JSON-able facts (algo, config, dims) for the sidecar.

A subclass names its networks in ``modules()`` and its optimisers in
``optimizers()``; the flat state, parameter averaging (``trader.agents.parallel``)
and checkpoints are derived from those two. Any other learnable or counted tensor
(SAC's log-temperature if kept outside a module, TD3's update counter) goes through
``extra_state`` / ``load_extra_state``.

The training loop of an algorithm (worker + learner) is a ``Runner``: one
``iteration()`` collects environment steps and updates the agent. The registry in
``trader.agents`` maps an algo name to an ``AlgoSpec`` (config class, agent class,
runner class); ``trader.train`` only ever talks to these three.

Reproducibility: networks are initialised from ``seed`` inside a forked RNG (the
global RNG is left untouched), and all sampling uses ``self.generator``, a
``torch.Generator`` on the agent's device seeded from ``seed``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from market_envs.devices import resolve_device
from trader.agents.normalizer import ObsNormalizer
from trader.errors import CheckpointError, ConfigError
from trader.rundir import config_to_dict

NET_PREFIX = "net."
OPTIM_PREFIX = "optim."
NORMALIZER_PREFIX = "normalizer."
EXTRA_PREFIX = "extra."


# --------------------------------------------------------------------------- configs


# The config codec (config_to_dict, config_from_dict) lives in trader.rundir.


# --------------------------------------------------------------------------- seeding


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run a block (network construction) with the global CPU RNG seeded, then restore it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def make_generator(device: torch.device, seed: int) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``seed``."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


# --------------------------------------------------------------------------- state helpers


def optimizer_tensors(name: str, optimizer: torch.optim.Optimizer) -> dict[str, Tensor]:
    """Flatten an optimiser's state: per-parameter tensors plus each group's learning rate."""
    flat: dict[str, Tensor] = {}
    state = optimizer.state_dict()
    for index, param_state in state["state"].items():
        for key, value in param_state.items():
            tensor = value if isinstance(value, Tensor) else torch.tensor(value)
            flat[f"{OPTIM_PREFIX}{name}.{index}.{key}"] = tensor.detach().clone().contiguous()
    for group_index, group in enumerate(state["param_groups"]):
        flat[f"{OPTIM_PREFIX}{name}.group{group_index}.lr"] = torch.tensor(float(group["lr"]), dtype=torch.float64)
    return flat


def load_optimizer_tensors(name: str, optimizer: torch.optim.Optimizer, flat: Mapping[str, Tensor]) -> None:
    """Restore what ``optimizer_tensors`` saved (works on a fresh optimiser too)."""
    prefix = f"{OPTIM_PREFIX}{name}."
    state = optimizer.state_dict()
    per_param: dict[int, dict[str, Tensor]] = {}
    for key, value in flat.items():
        if not key.startswith(prefix):
            continue
        head, _, field = key[len(prefix) :].partition(".")
        if head.startswith("group"):
            group_index = int(head[len("group") :])
            if group_index >= len(state["param_groups"]):
                raise CheckpointError(f"optimiser '{name}' has no param group {group_index}")
            state["param_groups"][group_index]["lr"] = float(value)
        else:
            per_param.setdefault(int(head), {})[field] = value.clone()
    state["state"] = per_param
    try:
        optimizer.load_state_dict(state)
    except (ValueError, KeyError, RuntimeError) as err:
        raise CheckpointError(f"optimiser '{name}' state does not fit: {err}") from err


# --------------------------------------------------------------------------- the agent


class Agent(ABC):
    """Base class of every agent; see the module docstring for the contract.

    :param obs_dim: observation size.
    :param act_dim: action size; actions are in [-1, 1]^act_dim.
    :param config: the algorithm's frozen dataclass config (``config_cls``).
    :param device: where networks, normaliser and sampling live.
    :param seed: initialises the networks and the agent's generator.
    :param normalize_obs: keep a running observation normaliser (``ObsNormalizer``).
    :param obs_clip: clip of normalised observations.
    :param obs_groups: optional group id per observation column; columns of a group
        share normaliser statistics (the per-stock network, `trader.agents.networks`).
    """

    algo: ClassVar[str]
    """Registry name ("ppo", "sac", "td3")."""
    config_cls: ClassVar[type]
    """The frozen dataclass config class this agent takes."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        config: Any,
        device: torch.device | str = "cpu",
        seed: int = 0,
        *,
        normalize_obs: bool = True,
        obs_clip: float = 10.0,
        obs_groups: Tensor | None = None,
    ) -> None:
        if obs_dim <= 0 or act_dim <= 0:
            raise ConfigError(f"obs_dim and act_dim must be positive, got {obs_dim}, {act_dim}")
        if not isinstance(config, self.config_cls):
            raise ConfigError(f"{type(self).__name__} needs a {self.config_cls.__name__}, got {type(config).__name__}")
        self.obs_dim = int(obs_dim)
        self.act_dim = int(act_dim)
        self.config = config
        self.device = resolve_device(device)
        self.seed = int(seed)
        self.generator = make_generator(self.device, self.seed)
        self.normalizer = ObsNormalizer(
            self.obs_dim, self.device, clip=obs_clip, enabled=normalize_obs, groups=obs_groups
        )

    # -- what every algorithm implements
    @abstractmethod
    def act(self, obs: Tensor, deterministic: bool = False) -> Tensor:
        """Actions [B, act_dim] in [-1, 1] for raw observations [B, obs_dim]."""

    @abstractmethod
    def update(self, batch: Any) -> dict[str, float]:
        """One learner update; metrics reduced once, as Python floats."""

    @abstractmethod
    def modules(self) -> dict[str, nn.Module]:
        """The agent's networks by name (target networks included)."""

    @abstractmethod
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The agent's optimisers by name."""

    def extra_state(self) -> dict[str, Tensor]:
        """Other tensors that belong to the state (counters, free parameters)."""
        return {}

    def load_extra_state(self, state: Mapping[str, Tensor]) -> None:
        """Restore what ``extra_state`` returned (keys without the ``extra.`` prefix)."""
        if state:
            raise CheckpointError(f"{type(self).__name__} has no extra state, got {sorted(state)}")

    def adopt_parent(self, parent_config: Mapping[str, Any]) -> None:
        """After a parent's state is loaded into this agent (a tournament's child, see
        `trader.training.continue_from`), apply what the child's own config changes in that state;
        ``parent_config`` is the parent's config as its checkpoint records it. Nothing by
        default: learning rates are kept by the caller, the rest is read from the config."""

    # -- derived
    def state_dict(self) -> dict[str, Tensor]:
        """The flat tensor state: networks, optimisers, normaliser and extras (cloned)."""
        flat: dict[str, Tensor] = {}
        for name, module in self.modules().items():
            for key, tensor in module.state_dict().items():
                flat[f"{NET_PREFIX}{name}.{key}"] = tensor.detach().clone().contiguous()
        for name, optimizer in self.optimizers().items():
            flat.update(optimizer_tensors(name, optimizer))
        for key, tensor in self.normalizer.state_dict().items():
            flat[f"{NORMALIZER_PREFIX}{key}"] = tensor
        for key, tensor in self.extra_state().items():
            flat[f"{EXTRA_PREFIX}{key}"] = tensor.detach().clone().contiguous()
        return flat

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        """Restore a flat state from ``state_dict``; missing or unexpected keys raise."""
        for name, module in self.modules().items():
            prefix = f"{NET_PREFIX}{name}."
            sub = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
            try:
                module.load_state_dict(sub, strict=True)
            except RuntimeError as err:
                raise CheckpointError(f"network '{name}' does not fit the state: {err}") from err
        for name, optimizer in self.optimizers().items():
            load_optimizer_tensors(name, optimizer, state)
        self.normalizer.load_state_dict(_strip(state, NORMALIZER_PREFIX))
        self.load_extra_state(_strip(state, EXTRA_PREFIX))
        known = (f"{NET_PREFIX}{n}." for n in self.modules())
        prefixes = (*known, *(f"{OPTIM_PREFIX}{n}." for n in self.optimizers()))
        prefixes = (*prefixes, NORMALIZER_PREFIX, EXTRA_PREFIX)
        unexpected = [k for k in state if not k.startswith(prefixes)]
        if unexpected:
            raise CheckpointError(f"unexpected keys in agent state: {unexpected[:5]}")

    def metadata(self) -> dict[str, Any]:
        """JSON-able facts for a checkpoint sidecar."""
        return {
            "algo": self.algo,
            "config": config_to_dict(self.config),
            "obs_dim": self.obs_dim,
            "act_dim": self.act_dim,
            "seed": self.seed,
            "normalization": self.normalizer.summary(),
        }

    def train_mode(self, training: bool = True) -> None:
        """Switch every network to train or eval mode."""
        for module in self.modules().values():
            module.train(training)

    def compile(self) -> None:
        """Opt-in ``torch.compile`` of the hot forward passes; no-op unless overridden."""


def _strip(state: Mapping[str, Tensor], prefix: str) -> dict[str, Tensor]:
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


# --------------------------------------------------------------------------- runner + registry


class Runner(ABC):
    """Worker + learner loop of one algorithm on one batched env.

    Built as ``RunnerClass(agent, env)``; each ``iteration()`` steps the env (the
    worker), updates the agent (the learner) and returns metrics as floats, reduced
    once. It must include ``"env_steps"``: environment transitions collected in this
    iteration (sub-environments x steps), and when episodes finished,
    ``"episode_return"`` (their mean return) and ``"episodes"`` (how many).
    """

    def __init__(self, agent: Agent, env: Any) -> None:
        if env.obs_dim != agent.obs_dim or env.act_dim != agent.act_dim:
            raise ConfigError(
                f"env dims (obs {env.obs_dim}, act {env.act_dim}) do not match the agent's "
                f"(obs {agent.obs_dim}, act {agent.act_dim})"
            )
        self.agent = agent
        self.env = env

    @abstractmethod
    def iteration(self) -> dict[str, float]:
        """Collect, update, return metrics (see class docstring)."""

    def state_dict(self) -> dict[str, Tensor]:
        """What the runner holds between iterations that a resumed run should get back (an
        off-policy replay buffer; the agent's own state is the agent's): {} where nothing is."""
        return {}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        """Take back a `state_dict` of a runner of the same algorithm and layout."""
        if state:
            raise ConfigError(f"{type(self).__name__} keeps no state between iterations, got {sorted(state)}")


@dataclass(frozen=True)
class Bound:
    """The range a tournament may move one hyperparameter in (see `tournament.generator`).

    Each algorithm module declares ``MUTATION_BOUNDS = {field name: Bound(...)}``
    beside its config: the fields worth searching and how far. Fields it leaves out
    (network sizes above all: a child inherits its parent's weights) never change.
    """

    low: float
    """Smallest value."""
    high: float
    """Largest value."""
    scale: Literal["linear", "log"] = "linear"
    """Perturb in this space: "log" for rates that span decades (learning rates)."""
    integer: bool = False
    """Round to an integer (batch sizes, epochs)."""

    def __post_init__(self) -> None:
        if not self.low < self.high:
            raise ConfigError(f"Bound: low ({self.low}) must be < high ({self.high})")
        if self.scale not in ("linear", "log"):
            raise ConfigError(f"Bound.scale must be 'linear' or 'log', got {self.scale!r}")
        if self.scale == "log" and self.low <= 0:
            raise ConfigError(f"Bound: a log-scaled bound needs low > 0, got {self.low}")


@dataclass(frozen=True)
class AlgoSpec:
    """What the registry knows about an algorithm."""

    name: str
    """Registry name, e.g. "ppo"."""
    config_cls: type
    """Frozen dataclass config class."""
    agent_cls: type[Agent]
    """Agent class, built as ``agent_cls(obs_dim, act_dim, config, device, seed)``."""
    runner_cls: Callable[[Agent, Any], Runner]
    """Worker + learner loop, built as ``runner_cls(agent, env)``."""
    mutation_bounds: Mapping[str, Bound] = field(default_factory=dict)
    """Hyperparameters a tournament may perturb, and their ranges (`Bound`)."""
