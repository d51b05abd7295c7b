"""Dynamic MIG across the node-agent, the slices and the allocator: a MIG device the kubelet
plugin made for claim A under its placement name must not be free for claim B once the
node-agent rediscovers it and publishes it as gpu-<i>-mig-<gi>-<ci> (the placement left the free
list, so without its placement-named twin A's allocation consumed no counters any more and B got
A's device, under both policies)."""

from __future__ import annotations

import pytest

from gpudra_alloc.builtin import builtin_class_documents
from gpudra_alloc.contract import solve
from gpudra_nvml import open_simulator, snapshot
from gpudra_slices import build_slices

NODE = "a100-mig-0"


@pytest.mark.parametrize("policy", ["first-fit", "topology"])
def test_a_device_made_for_a_claim_is_not_free_under_its_instance_ids(policy: str) -> None:
    opened = open_simulator("a100-mig")
    assert opened.fake is not None
    gpu2 = next(d for d in opened.adapter.discover().devices if d.name == "gpu-2")
    # Claim A holds the placement gpu-2-mig-3g-40gb-4; the plugin made it at prepare.
    opened.fake.create_mig_device(2, "3g.40gb", 4)
    slices = build_slices(snapshot(opened.adapter.discover(), NODE, opened.source))
    claim_b = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "b", "namespace": "default", "uid": "uid-b"},
        "spec": {"devices": {"requests": [{"name": "mig", "exactly": {
            "deviceClassName": "mig.nvidia.com",
            "selectors": [{"cel": {"expression":
                f'device.attributes["gpu.nvidia.com"].parentUUID == "{gpu2.uuid}" && '
                'device.attributes["gpu.nvidia.com"].placementStart >= 4'}}],
        }}]}},
    }  # fmt: skip
    answer = solve(
        {
            "policy": policy,
            "node": {"name": NODE, "labels": {}},
            "classes": builtin_class_documents(),
            "slices": slices,
            "claims": [claim_b],
            "allocatedDevices": [
                {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-2-mig-3g-40gb-4"}
            ],
        }
    )
    assert answer["outcome"] == "unschedulable", answer  # slices 4-7 are claim A's
