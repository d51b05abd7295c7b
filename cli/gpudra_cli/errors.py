"""The CLI's one exception: a message a person can act on, and the exit code to leave with."""

from __future__ import annotations


class CliError(Exception):
    """Printed as one line on stderr; the process exits with `exit_code`."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
