"""Specs a plugin before the per-request layout wrote (one file naming every device of a claim,
`k8s.<driver>-claim_<uid>.json`) are removed as exactly as the new ones: at unprepare, at a
rollback, by the start-up sweep, and before a claim's new specs are written (two specs defining
one device name make the CDI runtime resolve neither)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gpudra_kubelet_plugin.cdi import CdiDevice
from gpudra_kubelet_plugin.checkpoint import (
    PREPARE_COMPLETED,
    PREPARE_STARTED,
    ClaimRecord,
    PreparedDevice,
    State,
)
from gpudra_kubelet_plugin.conftest import (
    DRIVER,
    GPU0,
    KIND,
    NODE,
    Node,
    Running,
    make_claim,
    ref,
    serving,
)
from gpudra_kubelet_plugin.fakekubelet import cdi_ids_for_container
from gpudra_kubelet_plugin.fakeruntime import inject
from gpudra_kubelet_plugin.state import ClaimRef

DEVICES = ("gpu-0", "gpu-1-mig-1-0")


async def write_old_layout(node: Node, uid: str, state: State | None) -> None:
    """What the plugin before the split left for a claim with requests a (gpu-0) and b
    (gpu-1-mig-1-0): one spec of both devices, and, unless `state` is None, its checkpoint."""
    infos = [await node.table.device(name) for name in DEVICES]
    devices = [CdiDevice(f"{uid}-{info.name}", info) for info in infos]
    node.cdi.write(uid, node.cdi.build(uid, devices))
    if state is None:
        return
    answer = tuple(
        PreparedDevice((request,), NODE, name, (f"{KIND}={uid}-{name}",))
        for request, name in zip("ab", DEVICES, strict=True)
    )
    record = ClaimRecord(state, "default", "c", answer if state == PREPARE_COMPLETED else ())
    node.checkpoint().save({uid: record})


def claim(uid: str) -> dict[str, Any]:
    return make_claim("c", uid, [("a", DEVICES[0]), ("b", DEVICES[1])])


async def test_unprepare_removes_the_spec_of_a_claim_prepared_before_the_upgrade(
    node: Node,
) -> None:
    await write_old_layout(node, "uid-o", PREPARE_COMPLETED)
    plugin = await node.plugin()
    # The upgraded plugin: the claim is checkpointed, its spec kept.
    async with serving(node, plugin) as kubelet:
        assert node.cdi.claim_uids() == {"uid-o"}
        again = (await kubelet.prepare([ref(claim("uid-o"))])).claims["uid-o"]
        assert again.error == ""  # the stored answer; its IDs resolve in the old spec
        inject(node.settings.cdi_dir, cdi_ids_for_container(again))
        assert (await kubelet.unprepare([ref(claim("uid-o"))])).claims["uid-o"].error == ""
    assert list(node.settings.cdi_dir.iterdir()) == []
    assert node.checkpoint().load().claims == {}


@pytest.mark.parametrize(
    "state",
    [
        pytest.param(PREPARE_STARTED, id="left-half-prepared"),
        pytest.param(None, id="not-checkpointed"),
    ],
)
async def test_a_claim_with_an_old_spec_is_prepared_in_the_new_layout_only(
    node: Node, running: Running, state: State | None
) -> None:
    # Half prepared: the rollback removes the old spec. Not checkpointed (written after this
    # plugin's start sweep, e.g. by an older instance during a rolling update, whose checkpoint
    # write was lost): writing the claim's new specs removes it.
    _, kubelet = running
    await write_old_layout(node, "uid-h", state)
    node.claims.put(claim("uid-h"))
    answer = (await kubelet.prepare([ref(claim("uid-h"))])).claims["uid-h"]
    assert answer.error == ""
    assert [p.name for p in node.cdi.spec_paths("uid-h")] == [
        f"k8s.{DRIVER}-claim_uid-h_a.json",
        f"k8s.{DRIVER}-claim_uid-h_b.json",
    ]
    container = inject(node.settings.cdi_dir, cdi_ids_for_container(answer, "a"))
    assert container.visible_devices() == [GPU0]


async def test_start_removes_orphaned_specs_of_either_layout(node: Node) -> None:
    state = node.state()
    await state.start()
    node.claims.put(claim("uid-y"))
    await state.prepare(ClaimRef("uid-y", "default", "c"))
    node.checkpoint().save({})  # as if the checkpoint were moved away
    await write_old_layout(node, "uid-x", None)
    cdi_dir = node.settings.cdi_dir
    temp = cdi_dir / f".k8s.{DRIVER}-claim_uid-z_a.json.tmp"
    temp.write_text("{partial")
    others = [cdi_dir / "nvidia.yaml", cdi_dir / "k8s.other.example.com-claim_uid-y_a.json"]
    for path in others:
        path.write_text("{}")
    assert node.cdi.claim_uids() == {"uid-x", "uid-y"}
    after = node.state()
    await after.start()
    assert sorted(cdi_dir.iterdir()) == sorted(others)


async def test_start_warns_of_a_claim_whose_old_spec_still_reaches_every_container(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    # The stored answer stands until the kubelet unprepares the claim (its IDs resolve in the
    # old spec), and so does the old spec's claim-wide NVIDIA_VISIBLE_DEVICES: say so.
    caplog.set_level(logging.WARNING, logger="gpudra_kubelet_plugin.state")
    await write_old_layout(node, "uid-w", PREPARE_COMPLETED)
    await node.state().start()
    assert "claim default/c (uid-w) was prepared with one CDI spec" in caplog.text
    caplog.clear()
    node.cdi.remove("uid-w")
    node.cdi.write_claim(
        "uid-w",
        [
            CdiDevice(f"uid-w-{name}", await node.table.device(name), (request,))
            for request, name in zip("ab", DEVICES, strict=True)
        ],
    )
    await node.state().start()
    assert "one CDI spec" not in caplog.text
