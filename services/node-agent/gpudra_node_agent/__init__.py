"""gpudra node-agent: discovers this node's GPUs (NVML or a simulator profile) and publishes the
NodeInventory, health events and utilisation samples on NATS. Run with `python -m gpudra_node_agent`.
"""

from __future__ import annotations

from gpudra_node_agent.agent import HEALTH_EVENT, NODE_INVENTORY, UTILIZATION_SAMPLE, NodeAgent
from gpudra_node_agent.settings import Settings

__all__ = ["HEALTH_EVENT", "NODE_INVENTORY", "NodeAgent", "Settings", "UTILIZATION_SAMPLE"]
