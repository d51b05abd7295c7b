"""gpudra_inventory: the inventory service (`python -m gpudra_inventory`).

Turns node-agents' NodeInventory snapshots into ResourceSlices (one pool per node) in the
`gpudra-slices` bucket, taints silent nodes, mirrors slices to the API in Kubernetes mode and
publishes the fleet's version drift. Replicas elect a leader over a NATS KV lease (`lease`):
only the leader writes, standbys stay warm and take over when it dies.
"""

from __future__ import annotations

from gpudra_inventory.settings import Settings

__all__ = ["Settings"]
