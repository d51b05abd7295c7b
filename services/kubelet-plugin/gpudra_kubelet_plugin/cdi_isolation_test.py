"""A container gets the GPUs of the requests it names, and no other, as a CDI runtime resolves
the spec files the plugin wrote (see `fakeruntime`): the claims are prepared through the real
gRPC server, the CDI IDs are those the kubelet hands each container (see `fakekubelet`)."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra_kubelet_plugin.conftest import (
    DRIVER,
    GPU0,
    GPU1,
    KIND,
    MIG_STATIC,
    Node,
    Running,
    make_claim,
    ref,
    sharing_config,
)
from gpudra_kubelet_plugin.fakekubelet import FakeKubelet, cdi_ids_for_container
from gpudra_kubelet_plugin.fakeruntime import inject
from kubeletpb.dra.v1 import api_pb2 as v1

CONTROL = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
GPU0_NODES = ["/dev/nvidia0"]
MIG_NODES = ["/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"]


async def prepared(
    node: Node, kubelet: FakeKubelet, claim: dict[str, Any]
) -> v1.NodePrepareResourceResponse:
    """`claim`, put in the node's store and prepared by the kubelet: the plugin's answer for it,
    which must carry no error."""
    node.claims.put(claim)
    answer = (await kubelet.prepare([ref(claim)])).claims[claim["metadata"]["uid"]]
    assert answer.error == ""
    return answer


@pytest.mark.parametrize(
    ("request_name", "uuids", "nodes"),
    [
        pytest.param("a", [GPU0], GPU0_NODES, id="request-a"),
        pytest.param("b", [MIG_STATIC], MIG_NODES, id="request-b"),
    ],
)
async def test_a_container_naming_one_request_gets_only_that_requests_gpus(
    node: Node, running: Running, request_name: str, uuids: list[str], nodes: list[str]
) -> None:
    # `resources.claims: [{name: c, request: a}]`: the kubelet hands the container the CDI IDs
    # of request a's devices only; CDI applies a spec's top-level edits whenever any device of
    # that spec is injected. Had NVIDIA_VISIBLE_DEVICES named request b's GPU too, the NVIDIA
    # runtime in legacy/auto mode would mount it into this container.
    _, kubelet = running
    claim = make_claim("c", "uid-2r", [("a", "gpu-0"), ("b", "gpu-1-mig-1-0")])
    answer = await prepared(node, kubelet, claim)
    container = inject(node.settings.cdi_dir, cdi_ids_for_container(answer, request_name))
    assert container.visible_devices() == uuids
    assert sorted(container.device_nodes) == sorted(CONTROL + nodes)


async def test_a_container_naming_the_whole_claim_gets_every_request(
    node: Node, running: Running
) -> None:
    # `resources.claims: [{name: c}]`: every device of the claim. CDI lets the last spec that
    # sets NVIDIA_VISIBLE_DEVICES win, so it may name one request's GPUs only; the device
    # nodes of all of them are injected all the same, and no UUID is another container's.
    _, kubelet = running
    claim = make_claim("c", "uid-2w", [("a", "gpu-0"), ("b", "gpu-1-mig-1-0")])
    answer = await prepared(node, kubelet, claim)
    ids = cdi_ids_for_container(answer)
    assert ids == [f"{KIND}=uid-2w-gpu-0", f"{KIND}=uid-2w-gpu-1-mig-1-0"]
    container = inject(node.settings.cdi_dir, ids)
    assert sorted(container.device_nodes) == sorted(CONTROL + GPU0_NODES + MIG_NODES)
    visible = container.visible_devices()
    assert visible
    assert set(visible) <= {GPU0, MIG_STATIC}


async def test_a_containers_sharing_environment_names_only_its_gpus(
    node: Node, running: Running
) -> None:
    # MPS limits name devices by UUID: a container naming request a must not learn b's UUID.
    _, kubelet = running
    mps = sharing_config(
        {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "1Gi"}}
    )
    claim = make_claim("c", "uid-2m", [("a", "gpu-0"), ("b", "gpu-1")], [mps])
    answer = await prepared(node, kubelet, claim)
    container = inject(node.settings.cdi_dir, cdi_ids_for_container(answer, "a"))
    assert container.visible_devices() == [GPU0]
    assert container.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{GPU0}=1024M"


async def test_a_device_serving_two_requests_reaches_containers_naming_either(
    node: Node, running: Running
) -> None:
    # One device may serve several requests of a claim; it is one CDI device (one name, in one
    # spec: a name that two specs define resolves in neither), in a spec of its own.
    _, kubelet = running
    claim = make_claim("c", "uid-2s", [("a", "gpu-0"), ("b", "gpu-0"), ("b", "gpu-1")])
    answer = await prepared(node, kubelet, claim)
    assert sorted(p.name for p in node.cdi.spec_paths("uid-2s")) == [
        f"k8s.{DRIVER}-claim_uid-2s_a_b.json",
        f"k8s.{DRIVER}-claim_uid-2s_b.json",
    ]
    only_a = inject(node.settings.cdi_dir, cdi_ids_for_container(answer, "a"))
    assert only_a.visible_devices() == [GPU0]
    assert sorted(only_a.device_nodes) == sorted(CONTROL + GPU0_NODES)
    only_b = inject(node.settings.cdi_dir, cdi_ids_for_container(answer, "b"))
    assert sorted(only_b.device_nodes) == sorted(CONTROL + GPU0_NODES + ["/dev/nvidia1"])
    assert set(only_b.visible_devices()) <= {GPU0, GPU1}
    assert (await kubelet.unprepare([ref(claim)])).claims["uid-2s"].error == ""
    assert list(node.settings.cdi_dir.iterdir()) == []


async def test_a_repeated_prepare_leaves_every_spec_of_the_claim_as_it_was(
    node: Node, running: Running
) -> None:
    _, kubelet = running
    claim = make_claim("c", "uid-2i", [("a", "gpu-0"), ("b", "gpu-1-mig-1-0")])
    node.claims.put(claim)
    first = await kubelet.prepare([ref(claim)])
    files = {p: p.read_bytes() for p in node.cdi.spec_paths("uid-2i")}
    assert len(files) == 2
    node.claims.delete("default", "c")  # a repeated prepare must not need the store
    assert await kubelet.prepare([ref(claim)]) == first
    assert {p: p.read_bytes() for p in node.cdi.spec_paths("uid-2i")} == files


async def test_a_request_without_sharing_gets_no_sharing_environment(
    node: Node, running: Running
) -> None:
    # The MPS config names request a only: b's GPU is used exclusively, and its container must
    # not be told MPS limits (an empty device list, or a's GPU) meant for a's.
    _, kubelet = running
    mps = sharing_config(
        {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": 50,
                "defaultPinnedDeviceMemoryLimit": "1Gi",
            },
        },
        requests=["a"],
    )
    claim = make_claim("c", "uid-2x", [("a", "gpu-0"), ("b", "gpu-1")], [mps])
    answer = await prepared(node, kubelet, claim)
    only_a = inject(node.settings.cdi_dir, cdi_ids_for_container(answer, "a"))
    assert only_a.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{GPU0}=1024M"
    assert only_a.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    only_b = inject(node.settings.cdi_dir, cdi_ids_for_container(answer, "b"))
    assert only_b.visible_devices() == [GPU1]
    assert [k for k in only_b.env if k.startswith("CUDA_MPS_")] == []
