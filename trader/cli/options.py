"""Options that several commands share, declared once: the cost model (``--costs``, ``--cost-set``).

Light to import (`market_envs.costs` needs no torch), so `trader --help` stays fast.
`resolve_costs` is the one place a command turns the options into a `NamedCosts`.
"""

from __future__ import annotations

import tomllib
from typing import Annotated

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
