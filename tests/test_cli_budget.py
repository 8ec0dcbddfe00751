"""``TRADER_TINY_BUDGETS=1`` (`podracer.cli.budget`): a command's budget options capped, the rest as given."""

from __future__ import annotations

from typing import Annotated

import pytest
import typer

from podracer.cli import budget, main
from trader.errors import UserError


def shrunk_app(seen: dict) -> typer.Typer:
    """Two commands named as the CLI's, with some of their budget options, recording what they get."""
    app = typer.Typer()

    @app.command("train")
    def train(
        run: str,
        steps: Annotated[int | None, typer.Option("--steps")] = None,
        seed: Annotated[int | None, typer.Option("--seed")] = None,
        eval_episodes: Annotated[int | None, typer.Option("--eval-episodes")] = None,
    ) -> None:
        seen.update(steps=steps, seed=seed, eval_episodes=eval_episodes)

    @app.command("paper")
    def paper(
        run: str,
        broker: Annotated[str, typer.Option("--broker")] = "replay",
        max_bars: Annotated[int | None, typer.Option("--max-bars")] = None,
    ) -> None:
        seen.update(broker=broker, max_bars=max_bars)

    return app


def invoke(args: list[str]) -> dict:
    seen: dict = {}
    command = typer.main.get_command(shrunk_app(seen))
    budget.shrink(command)
    command.main(args=args, prog_name="trader", standalone_mode=False)
    return seen


def test_a_budget_given_is_capped_and_one_left_out_takes_the_cap() -> None:
    cap = budget.TINY["train"]["--steps"]
    assert invoke(["train", "r", "--steps", "300000", "--seed", "7"])["steps"] == cap
    seen = invoke(["train", "r"])
    assert seen["steps"] == cap and seen["seed"] is None  # the seed is no budget
    assert seen["eval_episodes"] is None  # left out: a market refuses it, so it is capped only when given
    assert invoke(["train", "r", "--steps", "100"])["steps"] == 100  # below the cap: as given
    assert invoke(["train", "r", "--eval-episodes", "9"])["eval_episodes"] == budget.TINY["train"]["--eval-episodes"]


def test_a_budget_is_filled_only_where_the_command_takes_it() -> None:
    assert invoke(["paper", "r"])["max_bars"] == budget.TINY["paper"]["--max-bars"]
    assert invoke(["paper", "r", "--broker", "alpaca"])["max_bars"] is None  # a live broker: as given
    assert (
        invoke(["paper", "r", "--broker", "alpaca", "--max-bars", "99"])["max_bars"]
        == budget.TINY["paper"]["--max-bars"]
    )


def test_durations_are_compared_in_seconds() -> None:
    assert budget.capped("--time-budget", "30m", "60s") == "60s"
    assert budget.capped("--time-budget", "10s", "60s") == "10s"
    assert budget.capped("--tear-sheet", True, False) is False


def test_the_variable_is_one_or_nothing(monkeypatch, capsys) -> None:
    monkeypatch.setenv(budget.ENV, "yes")
    with pytest.raises(UserError, match=budget.ENV):
        budget.active()
    assert main(["--version"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {budget.ENV} must be 1 (smoke-test budgets) or 0, got 'yes'"
    monkeypatch.setenv(budget.ENV, "0")
    assert main(["--version"]) == 0 and capsys.readouterr().err == ""


def test_the_help_names_the_variable() -> None:
    from podracer.cli.root import app

    assert budget.ENV in (app.info.epilog or "")
