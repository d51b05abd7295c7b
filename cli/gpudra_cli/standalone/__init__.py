"""Standalone mode in the CLI: a simulated fleet, the embedded NATS and every gpudra service as
its own process on this machine, plus what the demo and the kubectl-like commands do with it
(apply manifests, read claims and slices, prepare through the kubelet plugins, reports)."""

from __future__ import annotations

from gpudra_cli.standalone.fleet import FLEETS, Fleet, Node, parse_fleet
from gpudra_cli.standalone.system import System

__all__ = ["FLEETS", "Fleet", "Node", "System", "parse_fleet"]
