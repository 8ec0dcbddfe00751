"""`TournamentConfig`: everything a tournament run needs, resolved once and written
into ``RUN_DIR/tournament.toml``; `trader tournament --config FILE` reads the same keys.

The market is one value, `TournamentConfig.env`: a `trader.spec.MarketSpec` (data set, env
rules, bar windows) or a gymnasium id. tournament.toml writes it as an ``[env]`` table
(`MarketSpec.to_dict`), or the id as a string; a file of the older form (``env`` a recipe
name beside ``env_config``, ``periods`` and ``windows``) is read into the same value
(`market_keys`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tournament.cluster import TlsFiles, check_scheduler
from trader.agents import ALGOS, make_config
from trader.rundir import LEADERBOARD, config_from_dict, config_to_dict
from trader.errors import ConfigError
from trader.spec import MarketSpec, resolve_market

SEARCHES = ("pbt", "random")
"""The generator's modes (`TournamentConfig.search`)."""

STOP_KEYS = ("pods", "time_budget", "target_score")
"""A tournament's stops: whichever comes first ends it."""
CLUSTER_KEYS = ("workers", "scheduler", "gpus", "pods_per_gpu", "tls_ca", "tls_cert", "tls_key", "insecure")
"""The cluster a tournament's pods run on (`tournament.cluster.connect_for`)."""
RESUME_KEYS = STOP_KEYS + CLUSTER_KEYS
"""What a resumed tournament may take anew (`tournament.orchestrator.resume_config`): its stops and
its cluster. Every other key is the tournament's, kept from its tournament.toml."""
DEFAULT_ENV = "synthetic-edge-minute"
"""The data set of a tournament that names none."""
LOOSE_MARKET_KEYS = ("env_config", "periods", "windows")
"""The keys beside ``env`` that held the market before it was one `MarketSpec` (tournament.toml
of older runs, a ``--config`` file): read into ``env`` on load (`market_keys`), never written."""

DEFAULT_ALGO_CONFIGS: dict[str, dict[str, Any]] = {
    "sac": {"learning_starts": 4096, "updates_per_step": 1 / 64},
    "td3": {"learning_starts": 4096, "updates_per_step": 1 / 64},
}
"""Base configs of the off-policy pods, which train on many sub-environments: one
gradient update per step of the 64-env vector env (``updates_per_step = 1/64`` per
transition) instead of the algorithms' own one update per transition, which would
make a pod of 50,000 transitions 50,000 updates and an off-policy pod far slower than
a PPO pod of the same transitions (benchmarks/tournament_scaling.py prints the median
pod time per algorithm). A user's ``algo_configs`` entry replaces these keys."""


@dataclass(frozen=True)
class TournamentConfig:
    """A tournament: what trains, for how long, on which cluster.

    Stops at whichever comes first of ``pods``, ``time_budget`` and ``target_score``.
    """

    run_dir: str = "runs/tournament"
    """Where everything goes (see docs/contracts.md)."""
    env: MarketSpec | str = DEFAULT_ENV
    """The market every pod trains on and the final backtest trades: a `trader.spec.MarketSpec`
    (data set, env rules with their cost model, bar windows: a walk-forward fold's), or a
    gymnasium id ("Pendulum-v1", "Ant-v5"). A data set recipe (name or path) given as a string
    is resolved into a `MarketSpec` of the default rules and the recipe's split dates."""
    algos: tuple[str, ...] = ("ppo", "sac", "td3")
    """Algorithms in the pool."""
    algo_mix: tuple[float, ...] = ()
    """Relative share of each algorithm among new pods (empty: equal, the paper's 1:1:1), kept in a
    fixed rotation by pod number (`tournament.generator.algorithm_of`), not drawn at random."""
    algo_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Base config overrides per algorithm, e.g. ``{"ppo": {"num_steps": 64}}``, on top
    of `DEFAULT_ALGO_CONFIGS`."""
    population: int = 8
    """Leaderboard size: the pods kept and bred from."""
    pod_steps: int = 50_000
    """Environment transitions per pod."""
    num_envs: int = 64
    """Sub-environments of each pod's training env."""
    eval_every: int = 0
    """Transitions between a pod's validations (0: once, at its end)."""
    pods: int | None = 12
    """Pod budget: pods run in all (finished or failed); None for no limit."""
    time_budget: float | None = None
    """Wall-clock budget in seconds; None for none. Pods in flight then stop training, are
    validated and ranked, so the run overruns it by about one iteration and one validation."""
    target_score: float | None = None
    """Stop once the best validation score reaches this."""
    workers: int = 2
    """Local worker processes (one thread each) when neither scheduler nor gpus is set."""
    scheduler: str | None = None
    """Address of a running dask scheduler to join instead of a local cluster:
    ``tls://HOST:PORT``, or ``tcp://`` on loopback (see `tournament.cluster`)."""
    tls_ca: str | None = None
    """PEM file of the cluster's certificate authority (with a tls:// scheduler)."""
    tls_cert: str | None = None
    """PEM file of this client's certificate, signed by that authority."""
    tls_key: str | None = None
    """PEM file of this client's private key."""
    insecure: bool = False
    """Allow a plain tcp:// scheduler off loopback (unencrypted, unauthenticated: anyone
    who reaches it runs code on every worker); every run that uses it warns."""
    gpus: str | None = None
    """"all" or "0,1": a dask-cuda LocalCUDACluster, one worker per GPU."""
    pods_per_gpu: int = 1
    """Threads (concurrent pods) per GPU worker with ``gpus``."""
    in_flight_per_thread: int = 1
    """Pods kept submitted per worker thread present. 1 (the default): a worker that
    finishes a pod waits a few milliseconds for the next, which is bred from the
    leaderboard as it is then. 2 keeps one pod queued behind each running one, but
    that pod is bred a whole pod earlier, from an older leaderboard, and the first
    wave is all fresh pods, so lineages grow more slowly at the same wall-clock
    (benchmarks/RESULTS.md, "Tournament value")."""
    group_size: int = 1
    """Pods trained as one program in one task (`trader.group_training.train_group`): up to this
    many PPO pods that share a network shape, rollout length and minibatch count, each with its
    own seed, hyperparameters and run directory. 1: every pod alone. Above 1 the orchestrator
    keeps ``group_size`` x ``in_flight_per_thread`` pods in flight per worker thread, the generator
    never mutates the hyperparameters that define a group (PPO's ``num_minibatches``), and SAC and
    TD3 pods still train alone (`tournament.generator.groups`)."""
    device: str = "cpu"
    """Device of the pods ("cuda" is implied by ``gpus``)."""
    compile: bool | str = False
    """What pods ``torch.compile`` (`trader.train`'s ``compile``): False ("off"), nothing;
    "validation", the market validation pass only (many bars per compiled call; training
    stays eager): each worker process compiles it once per algorithm, on its first pod of
    it, and its later pods reuse it; True ("all"), also the env steps of training and the
    networks, which are new objects in every pod and so compiled again in every pod
    (slower than eager at short pods: benchmarks/RESULTS.md, "Pods per hour, compiled").
    Needs a C++ compiler on the CPU."""
    seed: int = 0
    """Tournament seed; each pod's seed derives from it and the pod's index."""
    top_fraction: float = 0.25
    """Truncation selection: parents come from this top fraction of their algorithm's
    entries on the leaderboard (at least one entry)."""
    fresh_probability: float = 0.2
    """Chance that a new pod starts fresh (base config, new weights) instead of
    inheriting from a parent; with no parent available it always does."""
    mutation_scale: float = 0.2
    """Std of the perturbation of each bounded hyperparameter, as a fraction of its
    range (in log space for log-scaled ones), see `trader.agents.base.Bound`."""
    ensemble_k: int = 3
    """The most pods in the final ensemble: the best-scoring pods whose validation record
    clears the membership bar (`tournament.selection`), at most this many."""
    ensemble_weighting: str = "equal"
    """How the ensemble weights its members: "equal", or "score" (in proportion to their
    validation scores)."""
    search: str = "pbt"
    """How new pods are made: "pbt" (exploit and explore: children of the leaderboard's
    best, perturbed, plus ``fresh_probability`` fresh pods) or "random" (random search:
    every pod fresh, each bounded hyperparameter drawn at random from its range; no
    weights are inherited). See `tournament.generator`."""
    keep_checkpoints: bool = False
    """Keep the weights of every pod; by default those of evicted pods that no
    leaderboard entry descends from and no pod in flight starts from are deleted
    (their run directories, metrics and sidecars stay)."""
    backtest: bool = True
    """Backtest the best pod and the ensemble on the test period at the end (market envs)."""
    warm_start: str | None = None
    """A finished tournament's run directory (a walk-forward's previous fold): pods
    that would breed but find no parent of their algorithm on this leaderboard continue
    one of that tournament's leaderboard entries instead (`tournament.generator`)."""

    def __post_init__(self) -> None:
        from trader.training_envs import compile_choice

        object.__setattr__(self, "env", resolve_market(self.env))  # a recipe's name: its MarketSpec

        compile_choice(self.compile)  # refuses an unknown value here, not in every pod
        object.__setattr__(self, "algos", tuple(self.algos))
        object.__setattr__(self, "algo_mix", tuple(float(w) for w in self.algo_mix))
        unknown = [a for a in self.algos if a not in ALGOS]
        if unknown or not self.algos:
            raise ConfigError(f"unknown algorithm(s) {unknown or '(none)'}; choose from {', '.join(ALGOS)}")
        if len(set(self.algos)) != len(self.algos):
            raise ConfigError(f"algos repeat an algorithm: {list(self.algos)}")
        if self.algo_mix and (
            len(self.algo_mix) != len(self.algos) or min(self.algo_mix) < 0 or sum(self.algo_mix) <= 0
        ):
            raise ConfigError(
                f"algo_mix needs one weight >= 0 per algorithm ({len(self.algos)}), some > 0; got {list(self.algo_mix)}"
            )
        for key in (
            "population",
            "pod_steps",
            "num_envs",
            "workers",
            "pods_per_gpu",
            "in_flight_per_thread",
            "group_size",
            "ensemble_k",
        ):
            if int(getattr(self, key)) < 1:
                raise ConfigError(f"{key} must be >= 1, got {getattr(self, key)}", key)
        if self.pods is not None and self.pods < 1:
            raise ConfigError(f"pods must be >= 1 or None, got {self.pods}", "pods")
        if self.time_budget is not None and not self.time_budget > 0:
            raise ConfigError(f"time_budget must be > 0 seconds, got {self.time_budget}", "time_budget")
        if self.pods is None and self.time_budget is None and self.target_score is None:
            raise ConfigError("give a stop: pods, time_budget or target_score")
        if self.eval_every < 0:
            raise ConfigError(f"eval_every must be >= 0, got {self.eval_every}", "eval_every")
        if not 0.0 < self.top_fraction <= 1.0:
            raise ConfigError(f"top_fraction must be in (0, 1], got {self.top_fraction}", "top_fraction")
        if not 0.0 <= self.fresh_probability <= 1.0:
            raise ConfigError(f"fresh_probability must be in [0, 1], got {self.fresh_probability}", "fresh_probability")
        if self.ensemble_weighting not in ("equal", "score"):
            raise ConfigError(
                f"ensemble_weighting must be 'equal' or 'score', got {self.ensemble_weighting!r}", "ensemble_weighting"
            )
        if self.search not in SEARCHES:
            raise ConfigError(f"search must be one of {', '.join(SEARCHES)}, got {self.search!r}", "search")
        if not self.mutation_scale > 0:
            raise ConfigError(f"mutation_scale must be > 0, got {self.mutation_scale}", "mutation_scale")
        if self.scheduler and self.gpus:
            raise ConfigError("give either scheduler or gpus, not both")
        if self.scheduler:
            check_scheduler(self.scheduler, self.insecure, TlsFiles(self.tls_ca, self.tls_cert, self.tls_key))
        elif any((self.tls_ca, self.tls_cert, self.tls_key)):
            raise ConfigError("tls_ca, tls_cert and tls_key need a tls:// scheduler")
        if self.warm_start is not None and not (Path(self.warm_start) / LEADERBOARD).is_file():
            raise ConfigError(f"warm_start {self.warm_start}: no finished tournament there (no leaderboard.json)")
        extra = sorted(set(self.algo_configs) - set(ALGOS))
        if extra:
            raise ConfigError(f"algo_configs names unknown algorithm(s) {extra}")
        for algo in self.algos:
            make_config(algo, self.base_config(algo))  # unknown keys and bad values fail here

    @property
    def mix(self) -> tuple[float, ...]:
        """Normalised share of each algorithm (sums to 1)."""
        weights = self.algo_mix or (1.0,) * len(self.algos)
        total = sum(weights)
        return tuple(w / total for w in weights)

    @property
    def pod_device(self) -> str:
        return "cuda" if self.gpus else self.device

    @property
    def market(self) -> MarketSpec | None:
        """The market (`env`), None for a gymnasium env."""
        return self.env if isinstance(self.env, MarketSpec) else None

    def base_config(self, algo: str) -> dict[str, Any]:
        """The config dict of a fresh pod of ``algo``."""
        return {**DEFAULT_ALGO_CONFIGS.get(algo, {}), **self.algo_configs.get(algo, {})}

    def to_dict(self) -> dict[str, Any]:
        """The keys of tournament.toml: the market as an ``[env]`` table (`MarketSpec.to_dict`)
        or a gymnasium id."""
        values = config_to_dict(self)
        values["env"] = self.env.to_dict() if isinstance(self.env, MarketSpec) else self.env
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TournamentConfig:
        """The config of tournament.toml's keys (`to_dict`'s, or a file of the older form:
        `market_keys`)."""
        return config_from_dict(cls, market_keys(values))


def market_parts(values: dict[str, Any]) -> dict[str, Any]:
    """Take the market out of tournament keys (``values`` loses ``env`` and `LOOSE_MARKET_KEYS`):
    its parts as given, those present only: ``env`` (a data set recipe or a gymnasium id),
    ``rules`` (`EnvConfig` keys), ``windows`` (bar positions) or ``periods`` (``[first, last]``
    bounds), from an ``[env]`` table (`MarketSpec.to_dict`) or from the loose keys of older files.
    A `MarketSpec` given as ``env`` is returned as ``spec``."""
    loose = {key: values.pop(key) for key in LOOSE_MARKET_KEYS if key in values}
    env = values.pop("env", None)
    if isinstance(env, MarketSpec):
        if loose:
            raise ConfigError(f"a MarketSpec holds the market whole; drop {', '.join(loose)} beside it")
        return {"spec": env}
    if isinstance(env, dict):
        if loose:
            raise ConfigError(f"an [env] table holds the market whole; drop {', '.join(loose)} beside it")
        unknown = sorted(set(env) - {"dataset", "rules", "windows"})
        if unknown or "dataset" not in env:
            raise ConfigError(f"the [env] table takes dataset, rules and windows; got {', '.join(map(str, env))}")
        parts = {"env": env["dataset"], "rules": env.get("rules"), "windows": env.get("windows")}
    else:
        parts = {"env": env, "rules": loose.get("env_config"), "periods": loose.get("periods")}
        parts["windows"] = loose.get("windows")
    return {key: value for key, value in parts.items() if value is not None and value != {}}


def market_keys(values: dict[str, Any]) -> dict[str, Any]:
    """Tournament keys with the market as one value: ``env`` a `MarketSpec` (from an ``[env]``
    table, or from a recipe name and the loose keys of older files, `market_parts`) or a
    gymnasium id. Other keys are left as they are."""
    values = dict(values)
    parts = market_parts(values)
    if "spec" in parts:
        values["env"] = parts["spec"]
    elif parts:
        values["env"] = resolve_market(
            parts.get("env", DEFAULT_ENV),
            parts.get("rules"),
            periods=parts.get("periods"),
            windows=parts.get("windows"),
        )
    return values
