"""Options that several commands share, declared once: the cost model (``--costs``, ``--cost-set``) and
the action that can hold (``--trade-rate``, ``--no-trade-band``, ``--weights-map``).

Light to import (`market_envs.costs` needs no torch), so `trader --help` stays fast.
`resolve_costs` is the one place a command turns the options into a `NamedCosts`.
"""

from __future__ import annotations

import tomllib
from typing import Annotated, Any

import typer

from market_envs.costs import COST_MODELS, NamedCosts, cost_model
from trader.errors import UserError

CostsOption = Annotated[str | None, typer.Option(
    "--costs", metavar="MODEL",
    help=f"Named cost model ({', '.join(COST_MODELS)}; README, 'The environment's rules'): commission, "
         "half-spread, impact, participation cap and borrow fee, in training and in the backtest.",
)]  # fmt: skip
CostSetOption = Annotated[list[str], typer.Option(
    "--cost-set", metavar="KEY=VALUE",
    help="With --costs: override one key of the model (buy_cost, sell_cost or a CostModel key), "
         "e.g. --cost-set participation=0.05 (repeatable).",
)]  # fmt: skip


TradeRateOption = Annotated[float | None, typer.Option(
    "--trade-rate", metavar="KAPPA",
    help="Weights mode: the share of the way from the book to the policy's aim traded each bar, in [0, 1] "
         "(EnvConfig.trade_rate; README, 'The environment's rules').",
)]  # fmt: skip
NoTradeBandOption = Annotated[float | None, typer.Option(
    "--no-trade-band", metavar="WEIGHT",
    help="Weights mode: a stock whose aim is within this weight of its own is not traded; further away it "
         "trades to the band's edge (EnvConfig.no_trade_band, >= 0).",
)]  # fmt: skip
WeightsMapOption = Annotated[str | None, typer.Option(
    "--weights-map", metavar="MAP",
    help="Weights mode: how an action becomes the aim: normalized (gross always at the limit) or linear "
         "(EnvConfig.weights_map).",
)]  # fmt: skip


def with_aim_rules(env_config: dict[str, Any] | None, weights_map: str | None, trade_rate: float | None,
                   no_trade_band: float | None) -> dict[str, Any] | None:  # fmt: skip
    """Env rules (a dict of `EnvConfig` keys, or None) with ``--weights-map``, ``--trade-rate`` and
    ``--no-trade-band`` over them; a bad value, or any of them for rules in shares mode, is one
    `UserError` line naming the flag (exit code 2)."""
    given = {"weights_map": weights_map, "trade_rate": trade_rate, "no_trade_band": no_trade_band}
    given = {key: value for key, value in given.items() if value is not None}
    if not given:
        return env_config
    if trade_rate is not None and not 0.0 <= trade_rate <= 1.0:
        raise UserError(f"--trade-rate must be in [0, 1] (the share of the way to the aim traded each bar), got {trade_rate}")
    if no_trade_band is not None and not no_trade_band >= 0.0:
        raise UserError(f"--no-trade-band must be a weight >= 0, got {no_trade_band}")
    from market_envs.env import WEIGHTS_MAPS

    if weights_map is not None and weights_map not in WEIGHTS_MAPS:
        raise UserError(f"--weights-map must be one of {', '.join(WEIGHTS_MAPS)}, got {weights_map!r}")
    merged = {**(env_config or {}), **given}
    if merged.get("action_mode", "shares") != "weights":
        flags = ", ".join("--" + key.replace("_", "-") for key in given)
        raise UserError(f"{flags}: the aim, trade rate and band move a book of target weights; these rules trade "
                        "in shares (add --preset market for weights mode)")  # fmt: skip
    return merged


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
    return cost_model(name).with_overrides(values)
