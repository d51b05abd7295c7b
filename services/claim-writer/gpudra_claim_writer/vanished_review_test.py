"""Kubernetes mode, the whole service against the HTTP-level fake API and a real nats-server: a
claim deleted while no claim-writer ran (kube-controller-manager deallocates it and removes its
finalizer, so it simply is not there at the restart) must still be released to the allocator,
or the devices it held stay held for good."""

from __future__ import annotations

import json
from pathlib import Path

from nats.aio.client import Client

from gpudra_bus import RESERVATIONS_BUCKET, Publisher, subjects
from gpudra_bus.subjects import Kind as SubjectKind
from gpudra_claim_writer.conftest import ALLOCATION, Heard, kube_settings, new_claim, serving
from gpudra_claim_writer.vanished import Vanished
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.resources import RESOURCE_CLAIMS
from gpudra_standalone.nats_server import NatsServer
from gpudra_testing.kubeapi import FakeKubeApi
from gpudrapb.v1 import claims_pb2


def record(state: str, claim: str) -> bytes:
    """An allocator's claim record (`c.<uid>`), as the allocator writes it."""
    doc: dict[str, object] = {"state": state, "claim": claim}
    if state == "allocated":
        doc.update(generation=1, token="a-0-1", node="n1", allocation=ALLOCATION, allocator="a-0")
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


async def test_a_claim_deleted_while_the_claim_writer_was_down_is_released(
    nc: Client, fresh_nats_server: NatsServer, tmp_path: Path
) -> None:
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as fake:
        api = await ApiStore.from_kubeconfig(str(fake.write_kubeconfig(tmp_path / "kc")))
        try:
            kept = await api.create(RESOURCE_CLAIMS, new_claim("kept"))
            again = await api.create(RESOURCE_CLAIMS, new_claim("again"))  # under a new UID now
            kv = await nc.jetstream().key_value(RESERVATIONS_BUCKET)
            await kv.put(f"c.{kept['metadata']['uid']}", record("allocated", "default/kept"))
            await kv.put("c.uid-gone", record("allocated", "default/gone"))
            await kv.put("c.uid-again-before", record("allocated", "default/again"))
            await kv.put("c.uid-released", record("released", "default/long-gone"))
            heard = await Heard.on(nc, subjects.all_of(SubjectKind.CLAIMS))
            settings = kube_settings(
                fresh_nats_server.url, fake, tmp_path, record_events=False, mirror_classes=False
            )

            def deleted() -> dict[str, str]:
                return {
                    e.claim.uid: heard.ids[i]
                    for i, e in enumerate(heard.events)
                    if e.kind == claims_pb2.ClaimEvent.KIND_DELETED
                }

            async with serving(settings):
                await heard.take_until(lambda: len(deleted()) >= 2)
                await heard.take_until(
                    lambda: {e.claim.name for e in heard.events} >= {"kept", "again"}
                )
            await heard.stop()  # the service has stopped: all it ever published is here
        finally:
            await api.close()
    assert deleted() == {
        "uid-gone": "uid-gone/deleted",
        "uid-again-before": "uid-again-before/deleted",
    }
    gone = [e for e in heard.events if e.claim.uid == "uid-gone"]
    assert [(e.claim.namespace, e.claim.name, e.claim_json) for e in gone] == [
        ("default", "gone", b"")  # a tombstone: gone for good
    ]
    assert again["metadata"]["uid"] not in deleted()


async def test_only_records_of_vanished_watched_claims_are_released(
    nc: Client, api: tuple[FakeKubeApi, ApiStore]
) -> None:
    """A claim created after the intake's list (not among the UIDs it saw) is read and kept; a
    record of another namespace (the claim-writer watches `default` only) and a record it cannot
    read are left alone; a gone claim's is released, once per pass."""
    _, store = api
    late = await store.create(RESOURCE_CLAIMS, new_claim("late"))
    kv = await nc.jetstream().key_value(RESERVATIONS_BUCKET)
    await kv.put(f"c.{late['metadata']['uid']}", record("allocated", "default/late"))
    await kv.put("c.uid-elsewhere", record("allocated", "team-b/gone"))
    await kv.put("c.uid-unreadable", b"not json")
    await kv.put("c.uid-gone", record("allocated", "default/gone"))
    heard = await Heard.on(nc, subjects.all_of(SubjectKind.CLAIMS))
    vanished = Vanished(store, Publisher(nc), kv, namespace="default")
    await vanished.reconcile(seen=set())
    await heard.stop()  # a pass publishes before it returns: all it published is here
    assert vanished.done
    assert vanished.released == 1
    assert [(e.kind, e.claim.uid) for e in heard.events] == [
        (claims_pb2.ClaimEvent.KIND_DELETED, "uid-gone")
    ]
