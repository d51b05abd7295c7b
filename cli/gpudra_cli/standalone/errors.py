"""The standalone system's errors: each is a `CliError`, one line a person can act on."""

from __future__ import annotations

from pathlib import Path

from gpudra_cli.errors import CliError


class StandaloneCliError(CliError):
    """Root of the standalone system's errors."""


class FleetError(StandaloneCliError):
    """A fleet name or fleet list that cannot be built."""


class ManifestError(StandaloneCliError):
    """A manifest file that cannot be read or holds no usable object."""


class NotRunningError(StandaloneCliError):
    """No running standalone system was found (no state file, or its NATS is gone)."""


class StartError(StandaloneCliError):
    """The standalone system did not start."""


def make_dir(path: Path, failure: str) -> None:
    """Create the folder `path` (and its parents), or raise `StartError` with `failure` and the
    reason (a file in the way, no permission) instead of an OSError's traceback."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartError(f"{failure}: {exc.strerror}") from exc
