"""Kubernetes mode: which pools to write back to the API after the kubelet wiped their slices.

The kubelet deletes its node's slices at every start (all drivers), and a driver's slices of its
node a wiping delay (30 s) after the driver's last kubelet plugin there went away (`wipes.py` has
the details). `wipes.py` notices the deletions; `WipeRepair` judges them, knowing the pools.

Promises of `WipeRepair` (with `wipes`, a `SliceWatch`; main.py gives it unless
`api_repair_delay` is 0):
- The leader watches our driver's slices and, `api_repair_delay` seconds after the first slice of
  a node went (one window per node: the kubelet deletes them all at once; plus up to one turn of
  the loop, at most a second, and the writes), `due()` names that node's pool to be mirrored
  again if it still holds one of the missing slices and its Node exists, logging once per wipe
  "slices of node X were deleted by someone else (a kubelet restart?); writing them again"
  (counted in `apiRepairs`). The inventory's own deletions never come back this way: it deletes
  only slices no pool holds (a pool change, a prune) and those of a pool whose Node is gone, and
  both are checked when the window closes. A node wiped again within 5 minutes of a repair waits
  twice as long each time (up to 5 minutes): another writer deleting our slices is not fought in
  a loop. A write the API does not take is retried as every unmirrored pool is (next turns). A
  standby watches nothing: `due(False, ...)` stops the watch.

Why write them again at all, and what of the deregistration wipe: gpudra's kubelet-plugin and
node-agent are separate pods, and the devices' availability is the node-agent's to say (its
heartbeats govern the `gpu.nvidia.com/unhealthy` taint); the inventory cannot tell from a
DELETE which of the two wipes it was (both are field-selector deletes, with no reason). At a
kubelet start, writing back is exactly what Kubernetes' own drivers do once their plugin
registers again, and gpudra's plugin registers within seconds. After a deregistration, the
kubelet means the slices to stay gone while no plugin of the driver runs on the node (pods
would be scheduled there and wait in `DRA driver ... is not registered`); gpudra writes them
back all the same, as its resync always did, so a node whose kubelet-plugin is gone for good
(not merely rolling over, which the kubelet's 30 s delay covers) offers its GPUs until the
node-agent goes too. The sound signal to close that gap exists in the plugin: it knows when
the kubelet accepted its registration (`RegistrationServicer.registered`) and it already
publishes per-node notices on NATS (`events.py`, `gpudra.prepared.<node>`). Were it to publish
its registration state (registered, refused, stopping) on a per-node subject, the leader could
hold a wiped node's pool back (or write it with a NoSchedule taint) until the node's plugin says
it is registered again, and write it at once when it does, as the kubelet's own drivers behave.
That is a small protocol addition left for later; today the node-agent's heartbeat alone
governs taints.
"""

from __future__ import annotations

import logging

from gpudra_inventory.nodes import ClusterNodes
from gpudra_inventory.pools import PoolBook
from gpudra_inventory.wipes import SliceWatch

log = logging.getLogger(__name__)


class WipeRepair:
    def __init__(self, wipes: SliceWatch, nodes: ClusterNodes | None) -> None:
        self._wipes = wipes
        self._nodes = nodes

    def due(self, leading: bool, book: PoolBook) -> list[str]:
        """Follow our slices while `leading` (the leader, with the Nodes listed); the nodes whose
        window has passed (see `wipes.py`) and that still have a pool holding a missing slice and
        a Node (else the slices went by the inventory's own hand), in name order."""
        wipes = self._wipes
        wipes.follow(leading)
        if not leading:
            return []
        repairs = []
        for node in wipes.due():
            state = book.pools.get(node)
            if state is None or (self._nodes is not None and self._nodes.uid(node) is None):
                continue
            missing = wipes.missing(node, state.slices)
            if not missing:
                continue
            wipes.repaired(node)
            log.warning(
                "slices of node %s were deleted by someone else (a kubelet restart?); writing "
                "them again (%s)",
                node,
                ", ".join(missing),
            )
            repairs.append(node)
        return repairs

    async def close(self) -> None:
        """Stop following and wait until the watch has ended."""
        await self._wipes.close()
