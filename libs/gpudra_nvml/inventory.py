"""A discovery as a NodeInventory message: the one place the agent and the CLI build it.

Devices a discovery could not reach (lost GPUs, and GPUs whose description failed with another
NVML error) are carried over from the previous inventory, so a GPU that falls off the bus stays
visible — with a LOST condition — and one query failing once does not make a GPU vanish.
"""

from __future__ import annotations

import time

from gpudra_nvml.adapter import Discovery
from gpudrapb.v1 import inventory_pb2 as pb

SCHEMA_VERSION = 1


def snapshot(
    discovery: Discovery,
    node: str,
    source: pb.InventorySource,
    previous: pb.NodeInventory | None = None,
    boot_id: str = "",
) -> pb.NodeInventory:
    """Devices sorted by (GPU index, GPU before its MIG devices, name); generation left at 0."""
    inventory = pb.NodeInventory(
        schema_version=SCHEMA_VERSION,
        node=node,
        source=source,
        versions=discovery.versions,
        boot_id=boot_id,
    )
    inventory.observed_at.FromNanoseconds(time.time_ns())
    devices = list(discovery.devices)
    if previous is not None and (discovery.lost or discovery.failed):
        lost = set(discovery.lost) | set(discovery.failed)
        devices += [d for d in previous.devices if d.index in lost]
        for d in previous.devices:
            if d.index in lost and d.type == pb.Device.TYPE_GPU and d.uuid:
                inventory.versions.vbios[d.uuid] = previous.versions.vbios.get(d.uuid, "")
    devices.sort(key=lambda d: (d.index, d.type != pb.Device.TYPE_GPU, d.name))
    inventory.devices.extend(devices)
    return inventory
