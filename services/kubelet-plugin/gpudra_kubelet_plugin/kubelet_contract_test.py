"""What the real kubelet does with the plugin's answers, checked over the plugin's real sockets.

Each test names the kubelet (or container runtime) behaviour it stands for: the plugin's answer
is only right if the kubelet and the CDI runtime use it as gpudra means them to.
"""

from __future__ import annotations

from gpudra_kubelet_plugin.conftest import DRIVER, KIND, NODE, Node, Running, make_claim, ref
from kubeletpb.dra.v1 import api_pb2 as v1


def cdi_ids_for_container(answer: v1.NodePrepareResourceResponse, request: str) -> list[str]:
    """The CDI IDs the kubelet hands a container whose `resources.claims[]` entry names
    `request` (the kubelet's `ClaimInfo.cdiDevicesAsList`: an exact match on the device's
    request names; a device without request names serves every request)."""
    return [
        cdi_id
        for device in answer.devices
        if not request or not device.request_names or request in device.request_names
        for cdi_id in device.cdi_device_ids
    ]


async def test_a_subrequests_device_is_named_by_its_parent_request(
    node: Node, running: Running
) -> None:
    # A prioritized-list claim's result names "<request>/<subrequest>"; a container can only
    # name the request ("gpu"), and the kubelet matches request names exactly, so the answer
    # must name the parent request (kubeletplugin's stripSubrequestNames does the same).
    _, kubelet = running
    results = [
        {"request": "gpu/small", "driver": DRIVER, "pool": NODE, "device": "gpu-1-mig-1-0"},
        {"request": "whole", "driver": DRIVER, "pool": NODE, "device": "gpu-0"},
    ]
    claim = make_claim("prio", "uid-p", results)
    node.claims.put(claim)
    answer = (await kubelet.prepare([ref(claim)])).claims["uid-p"]
    assert answer.error == ""
    assert [list(d.request_names) for d in answer.devices] == [["gpu"], ["whole"]]
    assert cdi_ids_for_container(answer, "gpu") == [f"{KIND}=uid-p-gpu-1-mig-1-0"]
    beta = (await kubelet.prepare_v1beta1([ref(claim)])).claims["uid-p"]
    assert [list(d.request_names) for d in beta.devices] == [["gpu"], ["whole"]]
