"""The node-agent's exceptions: bad configuration is permanent and stops the agent at start."""

from __future__ import annotations


class NodeAgentError(Exception):
    """Root of the node-agent's own errors."""


# Settings errors come from the shared loader (gpudra_service); re-exported as the agent's own.
from gpudra_service.errors import SettingsError  # noqa: E402

__all__ = ["NodeAgentError", "SettingsError"]
