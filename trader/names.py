"""Names and defaults that commands declare their options with, kept light.

`trader --help` builds every command's options before any command runs, so what the
options show (the algorithm names, the backtest's baseline names, the demo's
defaults) must be importable without torch, scipy or the data providers. This module
imports nothing but `trader.errors`; the heavy packages import these names from here, so each has one
home:

- `ALGOS`: the algorithms the registry builds (`trader.agents.SPEC_MODULES`);
- `BASELINES`: the backtest's built-in strategies (`trader.backtesting.engine`);
- `DEMO_RECIPE`, `DEMO_COST`, `DEMO_POD_STEPS`: what `trader demo` runs by default
  (`podracer.demo`); `PRESET_COST`: the rate of ``--preset market`` without ``--commission``;
- `name_list`: the one parser of a comma-separated list (``--algos ppo,sac``), and `gpu_numbers`
  on it (``--gpus 0,1``);
- `counted`: a count with its noun in agreement ("1 trial", "25 trials"), for every line that prints one.

`tests/test_cli_startup.py` checks that the lists equal what the registries know.
"""

from __future__ import annotations

from collections.abc import Sequence

from trader.errors import UserError


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, the noun plural unless the count is one: "1 trial", "1,250 trials";
    ``plural`` where adding an s is wrong ("strategies")."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


ALGOS = ("ppo", "sac", "td3")
"""The algorithms, in the order the CLI lists them; one registry entry each."""

BASELINES = (
    "benchmark",
    "equal_weight",
    "equal_weight_daily",
    "oracle",
    "oracle_costs",
    "momentum",
    "momentum_long",
    "reversal",
    "inverse_vol",
)
"""Names of the built-in baseline strategies ("oracle" and "oracle_costs", the planted rule traded
through the trade rate or no-trade band that suits the cost model: data sets with a planted edge only;
the last four, the classical factor portfolios: `trader.backtesting.yardsticks`)."""

DEMO_RECIPE = "synthetic-edge-daily"
"""The demo's data set: a market with a planted edge that survives the demo's costs."""

DEMO_COST = 0.0005
"""Costs per side, in training, selection and the backtest: 5 bp, what the default
recipe's edge is built to survive."""

PRESET_COST = 0.0005
"""The commission rate per side of ``--preset market`` when no ``--commission`` is given (5 bp;
`trader train`, `trader tournament`, `trader walkforward`)."""

DEMO_POD_STEPS = 16_384
"""Transitions per pod: short enough that a 3-minute tournament on a 2-core machine
finishes several pods and breeds children from the first ones, so the demo shows the
tournament's selection at work rather than a single generation (benchmarks/RESULTS.md,
"make demo", has the pods finished at this length and at twice it)."""


def name_list(
    text: str | None,
    option: str,
    *,
    choices: Sequence[str] | None = None,
    required: bool = False,
    lower: bool = False,
    what: str = "name",
) -> tuple[str, ...]:
    """The names in a comma-separated option's value, stripped, empty ones dropped; () for None.

    ``lower`` folds them to lower case; with ``choices``, a name outside them is one line that
    names `option` (``--algos: unknown algorithm(s) ['dqn']; choose from ppo, sac, td3``); with
    ``required``, so is a list without a name."""
    found = () if text is None else tuple(part.strip() for part in text.split(",") if part.strip())
    if lower:
        found = tuple(name.lower() for name in found)
    unknown = [name for name in found if choices is not None and name not in choices]
    if unknown or (required and not found):
        listed = f"; choose from {', '.join(choices)}" if choices is not None else ""
        raise UserError(
            f"{option}: unknown {what}(s) {unknown}{listed}"
            if unknown
            else f"{option} needs at least one {what}{listed}"
        )
    return found


def gpu_numbers(text: str) -> tuple[int, ...]:
    """The GPU numbers of ``--gpus 0,1`` (``TournamentConfig.gpus``; "all" is the caller's to
    handle), read by `name_list`; anything but numbers is one `UserError` line."""
    parts = name_list(text, "--gpus", required=True, what="GPU number")
    if not all(part.isdigit() for part in parts):
        raise UserError(f"--gpus takes 'all' or GPU numbers like 0,1; got {text!r}")
    return tuple(int(part) for part in parts)
