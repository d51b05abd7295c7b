"""The plain ResourceClaim and allocation that tests and benchmarks of several packages write.

`claim` asks for one `gpu.nvidia.com` device; `ALLOCATION` is that device (gpu-0 on node n1) as
an allocation result, with the node selector the claim-writer puts into every allocation. Both
are valid against the v1.34 schema the fake API checks writes with.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ALLOCATION", "claim"]

# One GPU on node n1, with the node selector the write-back puts into every allocation.
ALLOCATION: dict[str, Any] = {
    "devices": {
        "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]
    },
    "nodeSelector": {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
        ]
    },
}


def claim(name: str = "c1", namespace: str = "default") -> dict[str, Any]:
    """A new ResourceClaim `namespace/name` asking for one `gpu.nvidia.com` device."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        },
    }
