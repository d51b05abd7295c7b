"""The node-agent's exceptions: bad configuration is permanent and stops the agent at start."""

from __future__ import annotations


class NodeAgentError(Exception):
    """Root of the node-agent's own errors."""


class SettingsError(NodeAgentError):
    """A flag or environment variable has a value the agent cannot use."""
