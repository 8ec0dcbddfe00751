"""Smoke-test budgets: ``TRADER_TINY_BUDGETS=1`` runs any `trader` command as written, in seconds.

A command of the README or of the dashboard's hints trains for minutes or hours. The tests run
each one as printed (tests/test_suggested_commands.py), so the budget is shrunk here rather than
in the command's text: with the environment variable set to 1, `podracer.cli.main` reads it once,
prints one line saying so, and caps the budget options of each command at the sizes of `TINY`
(transitions, pods, wall-clock budgets, seeds, bars). An option given above its cap is lowered to
it; an option left out takes the cap where `FILLED` says that the command's own default is a
budget (where leaving it out means something else, e.g. ``--pods`` beside ``--time-budget``, it is
left out). Nothing else changes: the data set, the learners, the rules, a walk-forward's folds
(each trains its capped budget) and the run directory are the command's. The runs it makes learn nothing worth reading; it is for checking that a command
runs and writes what it should.

Light to import (no torch), like the rest of the CLI's start.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

from trader.durations import parse_duration
from trader.errors import UserError

ENV = "TRADER_TINY_BUDGETS"
"""The environment variable: ``1`` caps the budgets, unset (or ``0``) leaves them alone."""

TINY: dict[str, dict[str, Any]] = {
    "train": {"--steps": 512, "--num-envs": 8, "--eval-every": 0, "--eval-episodes": 1},
    "tournament": {"--pods": 2, "--pod-steps": 256, "--num-envs": 4, "--time-budget": "60s"},
    "walkforward": {
        "--pods": 1,
        "--pod-steps": 128,
        "--num-envs": 4,
        "--steps": 256,
        "--eval-every": 0,
        "--baseline-steps": 128,
        "--time-budget": "60s",
    },
    "baselines": {"--steps": 256, "--time-budget": "3s", "--seeds": 1, "--windows": 2, "--tear-sheet": False},
    "backtest": {"--tear-sheet": False},
    "paper": {"--max-bars": 5},
    "demo": {"--minutes": 0.5, "--pods": 2, "--pod-steps": 256, "--tear-sheet": False},
    "podracer": {"--minutes": 1.0, "--pods": 1, "--pod-steps": 256, "--tickers": 4},
}
"""Each command's budget options (flag: the largest value a smoke run takes; a switch: its value)."""


def _tournament_learner(given: Mapping[str, Any]) -> set[str]:
    if given.get("learner") == "tournament":
        return {"--pods", "--pod-steps", "--num-envs"}
    return {"--steps", "--eval-every", "--num-envs"}


FILLED: dict[str, Callable[[Mapping[str, Any]], set[str]]] = {
    "train": lambda given: {"--steps", "--num-envs", "--eval-every"},
    "tournament": lambda given: {"--pod-steps", "--num-envs"} | (set() if given.get("resume") else {"--pods"}),
    "walkforward": _tournament_learner,
    "baselines": lambda given: (
        {"--seeds"}
        | ({"--tear-sheet"} if given.get("backtest") else set())
        | ({"--steps"} if given.get("time_budget") is None else set())
    ),
    "backtest": lambda given: {"--tear-sheet"},
    "paper": lambda given: {"--max-bars"} if given.get("broker") == "replay" else set(),
    "demo": lambda given: {"--minutes", "--pod-steps", "--tear-sheet"},
    "podracer": lambda given: {"--minutes", "--pod-steps", "--tickers"},
}
"""The budget options a command takes at their cap when left out, from the values given."""

HELP = (
    f"{ENV}=1 caps every command's budget (transitions, pods, time budgets, seeds, bars) at smoke-test "
    "sizes, so that a command runs as written in seconds; a line says so when it is set."
)


def active() -> bool:
    """Whether `ENV` asks for smoke-test budgets (``1``); any other value than 1, 0 or empty is refused."""
    value = os.environ.get(ENV, "").strip()
    if value not in ("", "0", "1"):
        raise UserError(f"{ENV} must be 1 (smoke-test budgets) or 0, got {value!r}")
    return value == "1"


def capped(name: str, value: Any, cap: Any) -> Any:
    """``value`` of option ``name`` at most ``cap`` (a switch: ``cap`` itself; a duration: compared in seconds)."""
    if isinstance(cap, bool) or value is None:
        return cap
    if isinstance(cap, str):
        return value if parse_duration(value, name) <= parse_duration(cap, name) else cap
    return min(value, cap)


def shrink(command: Any) -> None:
    """Wrap the callback of ``command`` (a click command, typer's own click's) and of every command
    under it so that its budget options are capped."""
    for sub in getattr(command, "commands", {}).values():
        shrink(sub)
    caps = TINY.get(command.name or "")
    if caps is None or command.callback is None:
        return
    names = {
        flag: param.name
        for param in command.params
        if param.param_type_name == "option"
        for flag in param.opts
        if flag in caps
    }
    run, filled = command.callback, FILLED[command.name]

    @functools.wraps(run)
    def small(**given: Any) -> Any:
        fill = filled(given)
        for flag, key in names.items():
            if given.get(key) is not None or flag in fill:
                given[key] = capped(flag, given.get(key), caps[flag])
        return run(**given)

    command.callback = small


def notice() -> str:
    return f"{ENV}=1: budgets capped at smoke-test sizes (a run that learns nothing; unset it for a real run)"
