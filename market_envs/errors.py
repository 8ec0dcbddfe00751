"""Errors a user can act on, shared by every layer.

They live here, in the lowest layer, so that `market_envs` depends on nothing above
it; `trader.errors` re-exports them (the same classes) and adds the trader's own.
Every error the CLI turns into exit code 2 and a one-line message (no traceback)
derives from `UserError`. `market_envs.data.DataError` is one of them.
"""


class UserError(ValueError):
    """Bad input from the user: a config key, a file, a period, a checkpoint.

    The message names what is wrong and where (file, ticker, timestamp, key).
    """


class ConfigError(UserError):
    """A configuration value or combination that cannot work.

    :param key: the config field to blame, when the message starts with its name ("population
        must be >= 1"): the CLI names the flag that sets it instead ("--population must be >= 1";
        `trader.app.cli.main`), the Python API keeps the field's name.
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key
