"""The `trader` command line: a thin typer layer over the Python API.

Each command group lives in its own module and registers itself on `app`.
Errors derived from `trader.errors.UserError` (data errors included) end the
command with exit code 2 and a one-line message, never a traceback. ``TRADER_TINY_BUDGETS=1``
caps every command's budget for a smoke test (`podracer.cli.budget`).
"""

from __future__ import annotations

import sys

import typer

from podracer.cli import budget
from podracer.cli.root import app
from trader.errors import UserError


def _register_commands() -> None:
    """Import each command module; each adds its commands to `app`."""
    # One import per command module, e.g. `from podracer.cli import data  # noqa: F401`.
    from podracer.cli import data  # noqa: F401
    from podracer.cli import train  # noqa: F401
    from podracer.cli import backtest  # noqa: F401
    from podracer.cli import demo  # noqa: F401
    from podracer.cli import tournament  # noqa: F401
    from podracer.cli import dashboard  # noqa: F401
    from podracer.cli import baselines  # noqa: F401
    from podracer.cli import cluster  # noqa: F401
    from podracer.cli import walkforward  # noqa: F401
    from podracer.cli import act  # noqa: F401
    from podracer.cli import paper  # noqa: F401
    from podracer.cli import experiment  # noqa: F401


_register_commands()


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code (0 ok, 2 bad input, 1 unexpected failure)."""
    command = typer.main.get_command(app)
    try:
        if budget.active():  # read once, here: every command below runs at smoke-test budgets
            print(budget.notice(), file=sys.stderr)
            budget.shrink(command)
        code = command.main(args=argv, prog_name="trader", standalone_mode=False)
        if isinstance(code, int) and not isinstance(code, bool):  # click returns a command's typer.Exit code
            return code
    except UserError as err:
        print(f"error: {flag_named(err, command, sys.argv[1:] if argv is None else argv)}", file=sys.stderr)
        return 2
    except typer.Exit as stop:
        return stop.exit_code
    except SystemExit as stop:  # --help and friends
        return stop.code if isinstance(stop.code, int) else 0
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a command without a stop of its own (train, tournament, ... have theirs)
        print("interrupted: the command stopped before its end", file=sys.stderr)
        return 130
    except typer.TyperException as err:  # usage errors; typer ships its own click
        print(usage_error_line(err), file=sys.stderr)
        return err.exit_code
    return 0


def flag_named(err: UserError, command: typer.core.TyperGroup, argv: list[str]) -> str:
    """The message of ``err``, the config key it blames (`ConfigError.key`) named as the flag of the
    command run that sets it (``population`` as ``--population``): the Python API's errors name
    fields, the CLI's name flags. The command's own options are the one mapping (a field and
    the option that sets it share their name); a key no option of the command sets stays."""
    key, message = getattr(err, "key", None), str(err)
    if key is None or not message.startswith(key):
        return message
    run = command
    for word in argv:
        found = getattr(run, "commands", {}).get(word)
        if found is None:
            break
        run = found
    flags = {param.name: param.opts[0] for param in run.params if param.param_type_name == "option"}
    return message if key not in flags else flags[key] + message[len(key) :]


def usage_error_line(err: Exception) -> str:
    """One line for a usage error (an unknown option, a missing argument, a bad value), naming
    where the command's options are listed, instead of click's usage block."""
    context = getattr(err, "ctx", None)
    command = context.command_path if context is not None else "trader"
    message = (err.format_message() if hasattr(err, "format_message") else str(err)).rstrip(".")
    return f"error: {command}: {message} (see '{command} --help')"


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"warning: {message}\n"


def entry_point() -> None:
    """Console-script entry: exit with `main`'s code. Warnings (an unadjusted split,
    a dropped ticker) print as one line, without the source line Python adds."""
    import warnings

    warnings.formatwarning = _one_line_warning
    sys.exit(main())
