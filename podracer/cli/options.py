"""Options that several commands share, declared once with one help text and one default each
(`SHARED`; tests/test_cli_options.py holds every command to them): the data set, the device, the
seed, the sub-environments, torch.compile, the cost model (``--costs``, ``--cost-set``), the
commission rate (``--commission``), the action that can hold (``--trade-rate``,
``--no-trade-band``, ``--weights-map``), the tournament's cluster (``--workers``, ``--gpus``,
``--scheduler`` and its TLS files), the market rules (``--preset``), a tournament's algorithms (``--algos``)
and leaderboard (``--population``), the baselines
(``--baselines``, ``--baseline-algos``), and
comma-separated lists (`names`, the one list parser).

The blocks of options that several commands take are turned into values here, once each:
`cost_flags` (``--commission``, ``--costs``, ``--cost-set``), `with_rule_flags` (the aim's options
and ``--initial-cash`` on the env rules), `market_only` (the market's options refused for a
gymnasium env), `cluster_flags` (the cluster) and `tournament_keys` (a tournament's budget, search
and cluster as `TournamentConfig` keys).

Every shared option defaults to "not given" (None, or False for a switch): the value it then
takes is the rules' own (a run's, a preset's, a learner's), which its help names, and a
command can tell a flag typed from one left out (``--config`` keys yield only to flags given).

Light to import (`market_envs.costs` needs no torch), so `trader --help` stays fast.
`resolve_costs` is the one place a command turns the options into a `NamedCosts`;
`cost_flags` checks ``--commission`` beside them; `trader.spec.market_spec` sets either on the
env rules, as objects.
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any

import typer

from market_envs.costs import COST_MODELS, NamedCosts, cost_model
from trader.errors import ConfigError, UserError
from trader.names import ALGOS, gpu_numbers, name_list

DatasetOption = Annotated[
    str | None,
    typer.Option(
        "--dataset",
        metavar="RECIPE",
        help="Data set recipe: a name (trader data list) or a recipe file's path. Default: the run's own, for a "
        "command on a run; else the command's (its description says which).",
    ),
]
DeviceOption = Annotated[
    str | None,
    typer.Option(
        "--device",
        help="Where the networks and envs run: cpu, cuda or cuda:N (default cpu).",
    ),
]
SeedOption = Annotated[
    int | None,
    typer.Option(
        "--seed",
        help="Seed of every random draw: agents, envs, a tournament's pods; fold k of a walk-forward "
        "runs with seed + k (default 0).",
    ),
]
NumEnvsOption = Annotated[
    int | None,
    typer.Option(
        "--num-envs",
        help="Sub-environments each learner steps at once. Default: the learner's own: 8 for one "
        "agent (trader train), 64 for each tournament pod, 1 for SB3 and FinRL.",
    ),
]
CompileOption = Annotated[
    bool | None,
    typer.Option(
        "--compile/--no-compile",
        help="torch.compile the networks and the market env's step: each process compiles once (seconds), then "
        "steps faster (benchmarks/RESULTS.md, validation pass). Default off.",
    ),
]
CommissionOption = Annotated[
    float | None,
    typer.Option(
        "--commission",
        metavar="RATE",
        help="Market envs: the commission rate per side, a fraction of the value traded (5e-4: 5 bp). Default: "
        "the rules' own: the run's (backtest), 5 bp under a preset (--preset, trader demo), the paper's 0.2% "
        "(experiment podracer), else the env's 0.1%. Refused with --costs (--cost-set buy_cost=... sets a "
        "model's rate).",
    ),
]
CostsOption = Annotated[
    str | None,
    typer.Option(
        "--costs",
        metavar="MODEL",
        help=f"Named cost model ({', '.join(COST_MODELS)}; docs/environment.md): commission, "
        "half-spread, impact, participation cap and borrow fee, in training and in the backtest.",
    ),
]
CostSetOption = Annotated[
    list[str],
    typer.Option(
        "--cost-set",
        metavar="KEY=VALUE",
        help="With --costs: override one key of the model (buy_cost, sell_cost or a CostModel key), "
        "e.g. --cost-set participation=0.05 (repeatable).",
    ),
]
WorkersOption = Annotated[
    int | None,
    typer.Option(
        "--workers",
        help="The tournament's local dask worker processes (default 2; a cluster of --scheduler or "
        "--gpus has its own).",
    ),
]
GpusOption = Annotated[
    str | None,
    typer.Option(
        "--gpus",
        help="The tournament's cluster: all or 0,1: one dask-cuda worker per GPU (the pods run on cuda).",
    ),
]
SchedulerOption = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        metavar="ADDRESS",
        help="The tournament's cluster: join the dask scheduler at ADDRESS: tls://HOST:PORT (tcp:// on loopback "
        "only, unless --insecure).",
    ),
]
TlsCaOption = Annotated[
    Path | None,
    typer.Option(
        "--tls-ca",
        help="With a tls:// scheduler: the cluster's CA certificate (PEM).",
    ),
]
TlsCertOption = Annotated[
    Path | None,
    typer.Option(
        "--tls-cert",
        help="With a tls:// scheduler: this client's certificate (PEM).",
    ),
]
TlsKeyOption = Annotated[
    Path | None,
    typer.Option(
        "--tls-key",
        help="With a tls:// scheduler: this client's private key (PEM).",
    ),
]
InsecureOption = Annotated[
    bool,
    typer.Option(
        "--insecure",
        help="Allow a plain tcp:// scheduler off loopback: anyone who reaches it runs code on every worker.",
    ),
]

PresetOption = Annotated[
    str | None,
    typer.Option(
        "--preset",
        metavar="RULES",
        help="Market rules and algo configs that learn the planted edges (podracer.presets): market (the whole book "
        "every bar) or market-costs (the same with the action that can hold: an aim traded toward at a rate, for "
        "costly markets); a command's --config keys go on top. Default: none (the rules' own); market-costs in "
        "trader experiment podracer.",
    ),
]
AlgosOption = Annotated[
    str | None,
    typer.Option(
        "--algos",
        metavar="ALGOS",
        help="A tournament's algorithms, comma-separated: ppo, sac, td3 (default all three; trader walkforward: "
        "with --learner tournament).",
    ),
]
BaselinesOption = Annotated[
    str | None,
    typer.Option(
        "--baselines",
        metavar="LIBRARIES",
        help="Baseline libraries, comma-separated: sb3 (SB3 on our batched env), sb3-dummy (GymStockTradingEnv in "
        "SB3's DummyVecEnv; not in trader experiment podracer), finrl (FinRL's ensemble strategy), rllib (in RLlib's "
        "own env where .venv-rllib exists; not in trader walkforward). Default: sb3 in trader baselines; sb3, finrl "
        "and rllib in trader experiment podracer; none in trader walkforward (given, trained per fold beside the "
        "learner).",
    ),
]
BaselineAlgosOption = Annotated[
    str | None,
    typer.Option(
        "--baseline-algos",
        metavar="ALGOS",
        help="The algorithms of the sb3 and sb3-dummy baselines, comma-separated: ppo, sac, td3, a2c, ddpg (rllib: "
        "ppo, sac); default ppo. finrl trains its own A2C, PPO and DDPG.",
    ),
]
SearchOption = Annotated[
    str | None,
    typer.Option(
        "--search",
        help="How a tournament makes new pods: pbt (children of the best, perturbed; the default) or "
        "random (random search: every pod fresh, hyperparameters drawn in their ranges).",
    ),
]
EnsembleWeightingOption = Annotated[
    str | None,
    typer.Option(
        "--ensemble-weighting",
        help="Weights of a tournament ensemble's members: equal (the default) or score (their validation scores).",
    ),
]
TargetScoreOption = Annotated[
    float | None,
    typer.Option(
        "--target-score",
        help="Stop a tournament at this validation score.",
    ),
]
GroupSizeOption = Annotated[
    int | None,
    typer.Option(
        "--group-size",
        help="Pods per group: up to P PPO pods of one network shape trained as one program in one task, each "
        "with its own seed, hyperparameters and run directory (default 1: every pod alone).",
    ),
]

PopulationOption = Annotated[
    int | None,
    typer.Option(
        "--population",
        help="A tournament's leaderboard size: the pods kept and bred from (default 8).",
    ),
]


def tournament_keys(
    *,
    algos: str | None,
    population: int | None,
    pod_steps: int | None,
    pods: int | None,
    time_budget: str | None,
    target_score: float | None,
    num_envs: int | None,
    search: str | None,
    ensemble_weighting: str | None,
    compile: bool | None,
    cluster: dict[str, Any],
) -> dict[str, Any]:
    """The tournament's options (`trader tournament`, `trader walkforward --learner tournament`) as
    `TournamentConfig` keys, those given only: ``--algos`` checked into a tuple, ``--time-budget`` in
    seconds, the cluster's keys (`cluster_flags`) as they are; ``pods`` None when a time or score
    stop is given without ``--pods`` (it replaces the default pod budget)."""
    from trader.durations import parse_duration

    keys = {
        "algos": name_list(algos, "--algos", choices=ALGOS, required=True, what="algorithm")
        if algos is not None
        else None,
        "population": population,
        "pod_steps": pod_steps,
        "pods": pods,
        "num_envs": num_envs,
        "target_score": target_score,
        "search": search,
        "ensemble_weighting": ensemble_weighting,
        "compile": compile,
        **cluster,
        "time_budget": parse_duration(time_budget, "--time-budget") if time_budget is not None else None,
    }
    keys = {key: value for key, value in keys.items() if value is not None}
    if (time_budget is not None or target_score is not None) and pods is None:
        keys["pods"] = None
    return keys


def market_only(gym: bool, **given: Any) -> None:
    """Refuse, for a gymnasium env (``gym``), the market options given (keyword: the option's
    name with ``_`` for ``-``; None, False or [] is not given): one `UserError` line naming the first."""
    for key, value in given.items():
        if gym and value is not None and value is not False and value != []:
            raise UserError(f"--{key.replace('_', '-')} applies to market data sets (--dataset), not to gymnasium envs")


def with_rule_flags(
    env_config: dict[str, Any] | None,
    *,
    trade_rate: str | float | None,
    no_trade_band: float | None,
    weights_map: str | None,
    initial_cash: float | None,
) -> dict[str, Any] | None:
    """Env rules (a dict of `EnvConfig` keys, or None) under the rule options every market command
    takes beside ``--preset`` and the costs: the aim's (`with_aim_rules`), then ``--initial-cash``
    (`with_initial_cash`); the rules as they are when none is given."""
    aimed = with_aim_rules(env_config, weights_map, trade_rate, no_trade_band)
    return with_initial_cash(aimed, initial_cash)


def cluster_flags(
    workers: int | None,
    scheduler: str | None,
    gpus: str | None,
    device: str | None,
    tls: tuple[Path | None, Path | None, Path | None],
    insecure: bool,
) -> dict[str, Any]:
    """The tournament's cluster options, checked (one `UserError` line for a combination in which one
    would do nothing), as `TournamentConfig` keys: those given only, the TLS files absolute."""
    if workers is not None and (scheduler is not None or gpus is not None):
        raise UserError(
            "--workers sets the local cluster's processes; with --scheduler or --gpus the cluster has its own"
        )
    if insecure and scheduler is None:
        raise UserError("--insecure applies with --scheduler tcp://HOST:PORT (a plain address off loopback)")
    if device is not None and gpus is not None:
        raise UserError("--gpus runs the pods on cuda; drop --device")
    if gpus is not None and gpus != "all":  # a list of GPU numbers, through the one list parser
        gpus = ",".join(str(gpu) for gpu in gpu_numbers(gpus))
    if any(f is not None for f in tls) and (scheduler or "").split("://")[0] not in ("tls", "wss"):
        raise UserError("--tls-ca, --tls-cert and --tls-key need a tls:// --scheduler")
    keys = {
        "workers": workers,
        "scheduler": scheduler,
        "gpus": gpus,
        "insecure": insecure or None,
        **{
            key: None if path is None else str(path.resolve())
            for key, path in zip(("tls_ca", "tls_cert", "tls_key"), tls)
        },
    }
    return {key: value for key, value in keys.items() if value is not None}


def resolve_costs(name: str | None, settings: list[str] | None = None) -> NamedCosts | None:
    """The cost model of ``--costs NAME`` with the ``--cost-set KEY=VALUE`` overrides; None without ``--costs``.

    An unknown name, a malformed or unknown key, or a bad value (a negative rate, a
    participation cap outside (0, 1]) is one `ConfigError`/`UserError` line (exit code 2)."""
    settings = list(settings or [])
    if name is None:
        if settings:
            raise UserError("--cost-set needs --costs MODEL (the model whose keys it overrides)")
        return None
    values = {}
    for pair in settings:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--cost-set expects KEY=VALUE, got {pair!r}")
        try:
            values[key.strip()] = tomllib.loads(f"v = {text.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            raise UserError(f"--cost-set {key.strip()}: {text!r} is not a number, a string or a list") from None
    model = cost_model(name)
    try:
        return model.with_overrides(values)
    except ConfigError as err:  # named in the user's words: the keys they typed, not EnvConfig's fields
        raise UserError(f"--cost-set: {in_cost_set_words(str(err))}") from None


def in_cost_set_words(message: str) -> str:
    """A cost model's error as ``--cost-set`` names its keys (``buy_cost``, ``participation``),
    without the config classes they live in (``EnvConfig.buy_cost``, ``EnvConfig.costs.participation``)."""
    message = re.sub(r"\bEnvConfig\.costs\b(?!\.) ?", "", message)
    return re.sub(r"\bEnvConfig(?:\.costs)?\.(?=\w)", "", message).lstrip(": ")


def cost_rate(value: float | None, option: str = "--commission") -> float | None:
    """``--commission RATE`` checked: a commission rate per side in [0, 1) (5e-4 is 5 bp); None when not given."""
    if value is not None and not 0 <= value < 1:
        raise UserError(f"{option} must be in [0, 1) (a rate per side: 5e-4 is 5 bp), got {value}")
    return value


def cost_flags(
    cost: float | None, costs: str | None, cost_set: list[str] | None
) -> tuple[float | None, NamedCosts | None]:
    """``--commission RATE`` and ``--costs MODEL`` (with ``--cost-set``), checked: one rate, or
    one named model, never both (a model's own rate is set with ``--cost-set buy_cost=...``)."""
    named = resolve_costs(costs, cost_set)
    if named is not None and cost is not None:
        raise UserError(
            "give --commission RATE or --costs MODEL, not both (--cost-set buy_cost=... sets a model's rate)"
        )
    return cost_rate(cost), named


TradeRateOption = Annotated[
    str | None,
    typer.Option(
        "--trade-rate",
        metavar="KAPPA|policy",
        help="Weights mode: the share of the way from the book to the policy's aim traded each bar, in [0, 1] "
        "(EnvConfig.trade_rate), or 'policy': the policy chooses each stock's rate, a second action per stock "
        "(EnvConfig.rate_action; docs/environment.md).",
    ),
]
NoTradeBandOption = Annotated[
    float | None,
    typer.Option(
        "--no-trade-band",
        metavar="WEIGHT",
        help="Weights mode: a stock whose aim is within this weight of its own is not traded; further away it "
        "trades to the band's edge (EnvConfig.no_trade_band, >= 0).",
    ),
]
WeightsMapOption = Annotated[
    str | None,
    typer.Option(
        "--weights-map",
        metavar="MAP",
        help="Weights mode: how an action becomes the aim: normalized (gross always at the limit) or linear "
        "(EnvConfig.weights_map).",
    ),
]


def trade_rate_rules(text: str | float) -> dict[str, Any]:
    """The `EnvConfig` keys of ``--trade-rate``: a number in [0, 1] is the fixed rate (and no policy
    rate), ``policy`` the policy's own rate per stock (`EnvConfig.rate_action`, the fixed rate 1);
    anything else is one `UserError` line (exit code 2)."""
    if isinstance(text, str) and text.strip().lower() == "policy":
        return {"trade_rate": 1.0, "rate_action": True}
    try:
        rate = float(text)
    except ValueError:
        rate = math.nan
    if not 0.0 <= rate <= 1.0:
        raise UserError(
            f"--trade-rate must be in [0, 1] (the share of the way to the aim traded each bar) or 'policy', got {text}"
        )
    return {"trade_rate": rate, "rate_action": False}


InitialCashOption = Annotated[
    float | None,
    typer.Option(
        "--initial-cash",
        help="The starting capital of every strategy (EnvConfig.initial_cash; default: the run's, or USD 1 million "
        "for a new run). A run trained at another capital keeps each reward the same share of it (reward_scale "
        "follows). A per-order minimum commission and square-root impact make different markets of different "
        "capitals.",
    ),
]


def checked_initial_cash(initial_cash: float | None) -> float | None:
    """``--initial-cash`` as given (None: not given); a capital that is not positive is one `UserError` line."""
    if initial_cash is not None and not initial_cash > 0:
        raise UserError(f"--initial-cash must be > 0, got {initial_cash}")
    return initial_cash


def with_initial_cash(env_config: dict[str, Any] | None, initial_cash: float | None) -> dict[str, Any] | None:
    """Env rules (a dict of `EnvConfig` keys, or None) with ``--initial-cash`` over them and the reward
    scale moved with it, each bar's reward the same share of the capital as the rules gave it
    (`podracer.presets.rules_at_capital`); a bad capital is refused by `checked_initial_cash`."""
    if checked_initial_cash(initial_cash) is None:
        return env_config
    from podracer.presets import rules_at_capital

    return rules_at_capital(env_config, initial_cash)


def with_aim_rules(
    env_config: dict[str, Any] | None,
    weights_map: str | None,
    trade_rate: str | float | None,
    no_trade_band: float | None,
) -> dict[str, Any] | None:
    """Env rules (a dict of `EnvConfig` keys, or None) with ``--weights-map``, ``--trade-rate`` (a
    number or ``policy``, `trade_rate_rules`) and ``--no-trade-band`` over them; a bad value, or any
    of them for rules in shares mode, is one `UserError` line naming the flag (exit code 2)."""
    given = {"weights_map": weights_map, "trade_rate": trade_rate, "no_trade_band": no_trade_band}
    given = {key: value for key, value in given.items() if value is not None}
    if not given:
        return env_config
    if trade_rate is not None:
        given.update(trade_rate_rules(trade_rate))
    if no_trade_band is not None and not no_trade_band >= 0.0:
        raise UserError(f"--no-trade-band must be a weight >= 0, got {no_trade_band}")
    from market_envs.config import WEIGHTS_MAPS

    if weights_map is not None and weights_map not in WEIGHTS_MAPS:
        raise UserError(f"--weights-map must be one of {', '.join(WEIGHTS_MAPS)}, got {weights_map!r}")
    merged = {**(env_config or {}), **given}
    if merged.get("weights_map") == "normalized":
        merged.pop("linear_scale", None)  # a preset's size of the linear aim: no meaning without it
    if merged.get("action_mode", "shares") != "weights":
        flags = ", ".join("--" + key.replace("_", "-") for key in given if key != "rate_action")
        raise UserError(
            f"{flags}: the aim, trade rate and band move a book of target weights; these rules trade "
            "in shares (add --preset market for weights mode)"
        )
    return merged


SHARED = (
    DatasetOption,
    DeviceOption,
    SeedOption,
    NumEnvsOption,
    CompileOption,
    CommissionOption,
    CostsOption,
    CostSetOption,
    TradeRateOption,
    NoTradeBandOption,
    WeightsMapOption,
    InitialCashOption,
    WorkersOption,
    GpusOption,
    SchedulerOption,
    TlsCaOption,
    TlsCertOption,
    TlsKeyOption,
    InsecureOption,
    SearchOption,
    EnsembleWeightingOption,
    TargetScoreOption,
    PopulationOption,
    GroupSizeOption,
    PresetOption,
    AlgosOption,
    BaselinesOption,
    BaselineAlgosOption,
)
"""The shared options: a command that takes one of these names takes it as declared here (the
same help, and the default None, or False for ``--insecure``, [] for ``--cost-set``)."""
