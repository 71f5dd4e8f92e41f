"""The one exception type a user ever sees: what went wrong, where, and what to do about it."""

from __future__ import annotations


class MirrorflowError(Exception):
    """An error meant for the operator; the CLI prints it without a traceback and exits with `exit_code`.

    Raise it (or a subclass) for every failure a user can fix: bad config, a missing tool, a port in use,
    an unreachable cluster. Programming errors stay ordinary exceptions.
    """

    exit_code: int = 1

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(MirrorflowError):
    """Bad input from the operator (config file, CLI arguments): exit code 2, nothing applied."""

    exit_code = 2
