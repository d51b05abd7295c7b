"""`python -m gpudra_node_agent`."""

from __future__ import annotations

from gpudra_node_agent.main import run

run()
