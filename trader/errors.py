"""Errors a user can act on.

Every error the CLI turns into exit code 2 and a one-line message (no traceback)
derives from `UserError`. `UserError` and `ConfigError` are defined in
`market_envs.errors` (the lower layer) and re-exported here as the same classes (with
`UnwritableError` and `writing`, the one mapping of a full disk or a read-only place);
`market_envs.data.DataError` derives from `UserError` too.
"""

from market_envs.errors import DISK_ERRNOS, ConfigError, UnwritableError, UserError, writing


class CheckpointError(UserError):
    """A checkpoint that is missing, incomplete, or does not fit the data."""


__all__ = ["DISK_ERRNOS", "CheckpointError", "ConfigError", "UnwritableError", "UserError", "writing"]
