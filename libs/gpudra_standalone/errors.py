"""gpudra_standalone's one root exception."""

from __future__ import annotations


class StandaloneError(Exception):
    """Standalone mode could not start or keep running a part it needs."""
