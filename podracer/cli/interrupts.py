"""What a long command (`trader walkforward`, `trader experiment`) says when a signal or a
place that cannot be written stops it: one line naming where it stopped and what it keeps
(each command words that), ending with the command that continues it: the same command,
rebuilt from the options it was given (`same_command`).

Torch-free, for the CLI's fast start; the signals themselves are caught by
`trader.stopping.stop_on_signals` (a training run inside stops at its iteration's end).
"""

from __future__ import annotations

import shlex
import signal
from typing import Any


def same_command(context: Any) -> str:
    """The command being run, as a shell line: its path (``trader walkforward``), its
    arguments, and every option given a value other than its default.

    :param context: the command's ``typer.Context`` (a command takes it as a parameter)."""
    words = context.command_path.split()
    for param in context.command.params:
        value = context.params.get(param.name)
        if param.param_type_name == "argument":
            words.append(str(value))
            continue
        if value is None or value == param.default or (getattr(param, "multiple", False) and not value):
            continue
        if getattr(param, "is_flag", False):
            if value:
                words.append(param.opts[0])
            elif param.secondary_opts:
                words.append(param.secondary_opts[0])
            continue
        for item in value if getattr(param, "multiple", False) else [value]:
            words += [param.opts[0], str(item)]
    return shlex.join(words)


def signal_name(number: int) -> str:
    """``SIGINT`` for 2, ``SIGTERM`` for 15, ..."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
