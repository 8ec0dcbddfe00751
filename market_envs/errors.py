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
    """A configuration value or combination that cannot work."""
