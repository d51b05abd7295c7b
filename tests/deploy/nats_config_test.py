"""gpudra's NATS configuration, as the overlays render it.

Statically: one user per service, mapped from its client certificate, with no credentials in the
config, and publish/subscribe permissions that allow each service exactly its own subjects.
Live: the dev overlay's rendered configuration runs in a real nats-server (TLS with throwaway
certificates); each service connects with its own client certificate and performs its part of
the claim flow through gpudra_bus, and is refused everything else. Both overlays' configurations
pass `nats-server -t`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
import pytest
from nats.aio.client import Client

from deploy import manifests, tls_certs
from deploy.nats_subjects import allows
from gpudra_allocator.holdings import CLAIM_PREFIX, ClaimRecord
from gpudra_allocator.index import class_index
from gpudra_allocator.reservations import Reservations
from gpudra_allocator.tombstones import TombstoneCollector
from gpudra_bus import Publisher, flush_subscriptions, streams
from gpudra_claim_writer.classes import ClassMirror
from gpudra_claim_writer.vanished import Vanished
from gpudra_inventory.lease import Lease, ensure_lease_bucket
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.resources import DEVICE_CLASSES
from gpudra_testing import find_nats_server_binary
from gpudra_testing.kubeapi import FakeKubeApi
from gpudra_testing.statusz import free_port

SERVICES = ("node-agent", "inventory", "allocator", "claim-writer", "kubelet-plugin")
CONFIG = manifests.KUSTOMIZE / "base" / "nats" / "config"
# Generous: the machine is shared, and these bound waits for things that do happen.
_TIMEOUT_S = 10


def _strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def _users() -> dict[str, dict[str, Any]]:
    auth = json.loads(_strip_comments((CONFIG / "auth.conf").read_text(encoding="utf-8")))
    return {user["user"]: user for user in auth["authorization"]["users"]}


def _perms(service: str, direction: str) -> list[str]:
    allowed: list[str] = _users()[f"CN=gpudra-{service}"]["permissions"][direction]["allow"]
    return allowed


def test_one_certificate_mapped_user_per_service() -> None:
    users = _users()
    assert set(users) == {f"CN=gpudra-{s}" for s in SERVICES}
    for user in users.values():
        assert set(user) == {"user", "permissions"}, "no passwords, tokens or nkeys"
        assert set(user["permissions"]) == {"publish", "subscribe"}
        assert set(user["permissions"]["publish"]) == {"allow"}
    nats_conf = (CONFIG / "nats.conf").read_text(encoding="utf-8")
    assert "verify_and_map: true" in nats_conf


# (service, subject, may publish). Subjects follow gpudra_bus.subjects and gpudra_bus.streams.
PUBLISH = [
    ("node-agent", "gpudra.inventory.node-1", True),
    ("node-agent", "gpudra.health.node-1", True),
    ("node-agent", "gpudra.utilization.node-1", True),
    ("node-agent", "$JS.API.STREAM.CREATE.GPUDRA_INVENTORY", True),
    ("node-agent", "gpudra.inventory.node-1.extra", False),
    ("node-agent", "gpudra.claims.ns.claim", False),
    ("node-agent", "gpudra.drift", False),
    ("node-agent", "$KV.gpudra-slices.node-1", False),
    ("node-agent", "$JS.API.CONSUMER.CREATE.GPUDRA_INVENTORY", False),
    ("node-agent", "$JS.API.STREAM.MSG.GET.GPUDRA_INVENTORY", True),
    ("node-agent", "$JS.API.DIRECT.GET.GPUDRA_INVENTORY.gpudra.inventory.node-1", False),
    ("inventory", "$KV.gpudra-slices.node-1", True),
    ("inventory", "gpudra.drift", True),
    ("inventory", "$JS.API.CONSUMER.MSG.NEXT.GPUDRA_INVENTORY.inventory", True),
    ("inventory", "$JS.ACK.GPUDRA_INVENTORY.inventory.1.1.1.1.0", True),
    ("inventory", "gpudra.deadletter.inventory", True),
    ("inventory", "gpudra.inventory.node-1", False),
    ("inventory", "$KV.gpudra-reservations.dev", False),
    ("inventory", "gpudra.allocations.ns.claim", False),
    ("inventory", "$KV.gpudra-leases.inventory", True),
    ("inventory", "$JS.API.STREAM.CREATE.KV_gpudra-leases", True),
    ("inventory", "$KV.gpudra-leases.allocator", False),
    ("allocator", "gpudra.allocations.ns.claim", True),
    ("allocator", "$KV.gpudra-reservations.node-1.gpu-0", True),
    ("allocator", "$JS.API.DIRECT.GET.KV_gpudra-slices.$KV.gpudra-slices.node-1", True),
    ("allocator", "$JS.API.CONSUMER.MSG.NEXT.GPUDRA_CLAIMS.allocator", True),
    ("allocator", "$KV.gpudra-slices.node-1", False),
    ("allocator", "gpudra.claims.ns.claim", False),
    ("allocator", "$KV.gpudra-claims.ns.claim", False),
    ("claim-writer", "gpudra.claims.ns.claim", True),
    ("claim-writer", "$JS.API.CONSUMER.MSG.NEXT.GPUDRA_DECISIONS.claim-writer", True),
    ("claim-writer", "$KV.gpudra-claims.ns.claim", True),
    ("claim-writer", "$KV.gpudra-deviceclasses.gpu.nvidia.com", True),
    ("allocator", "$KV.gpudra-deviceclasses.gpu.nvidia.com", False),
    ("allocator", "$JS.API.CONSUMER.CREATE.KV_gpudra-deviceclasses", True),
    ("inventory", "$KV.gpudra-deviceclasses.gpu.nvidia.com", False),
    ("claim-writer", "gpudra.allocations.ns.claim", False),
    ("claim-writer", "$KV.gpudra-reservations.x", False),
    ("kubelet-plugin", "gpudra.prepared.node-1", True),
    ("kubelet-plugin", "$JS.API.DIRECT.GET.KV_gpudra-claims.$KV.gpudra-claims.ns.c", True),
    ("kubelet-plugin", "$KV.gpudra-claims.ns.claim", False),
    ("kubelet-plugin", "gpudra.claims.ns.claim", False),
    ("kubelet-plugin", "$JS.API.STREAM.CREATE.KV_gpudra-claims", False),
    ("kubelet-plugin", "$JS.API.STREAM.MSG.GET.GPUDRA_INVENTORY", True),
    ("kubelet-plugin", "$JS.API.DIRECT.GET.GPUDRA_INVENTORY.gpudra.inventory.node-1", False),
    ("kubelet-plugin", "$JS.API.CONSUMER.CREATE.GPUDRA_INVENTORY", False),
]


@pytest.mark.parametrize(
    ("service", "subject", "allowed"),
    [pytest.param(*case, id=f"{case[0]}:{case[1]}") for case in PUBLISH],
)
def test_publish_permissions(service: str, subject: str, allowed: bool) -> None:
    assert allows(_perms(service, "publish"), subject) is allowed


@pytest.mark.parametrize("service", SERVICES)
def test_nobody_may_delete_or_purge_or_use_wildcard_apis(service: str) -> None:
    publish = _perms(service, "publish")
    for pattern in publish:
        assert pattern not in (">", "$JS.API.>", "$JS.>", "gpudra.>", "$KV.>"), pattern
    for verb in ("STREAM.DELETE", "STREAM.PURGE", "ACCOUNT.PURGE", "STREAM.NAMES"):
        assert not allows(publish, f"$JS.API.{verb}.GPUDRA_CLAIMS"), verb
    names = [spec.name for spec in streams.STREAMS] + [f"KV_{b.name}" for b in streams.BUCKETS]
    assert not any(allows(publish, f"$JS.API.STREAM.DELETE.{name}") for name in names)
    # The purges: the allocator's tombstone collector, in its own reservations bucket; the
    # inventory's leader, the inventories of a node whose Node is deleted and agent silent.
    purged = {name for name in names if allows(publish, f"$JS.API.STREAM.PURGE.{name}")}
    may_purge = {
        "allocator": {f"KV_{streams.RESERVATIONS_BUCKET}"},
        "inventory": {streams.INVENTORY_STREAM},
    }
    assert purged == may_purge.get(service, set())
    subscribe = _perms(service, "subscribe")
    # Core subscriptions besides replies: the plugin's health feed of its node
    # (healthfeed.subscribe). The inventory learns device health from the NodeInventory stream,
    # which it consumes (pull, by publishing API requests), not from gpudra.health.
    extra = {"kubelet-plugin": ["gpudra.health.*"]}.get(service, [])
    assert sorted(subscribe) == sorted(["_INBOX.>", *extra])


LAYOUT_OWNERS = ("inventory", "allocator", "claim-writer")


@pytest.mark.parametrize("service", LAYOUT_OWNERS)
def test_layout_owners_may_ensure_every_stream_and_bucket(service: str) -> None:
    """These services call gpudra_bus.ensure_streams/ensure_buckets (all of them) at start: a
    stream or bucket added to gpudra_bus without a grant here would stop them in a cluster."""
    publish = _perms(service, "publish")
    names = [spec.name for spec in streams.STREAMS]
    names += [f"KV_{spec.name}" for spec in streams.BUCKETS]
    missing = [
        f"$JS.API.STREAM.{verb}.{name}"
        for name in names
        for verb in ("INFO", "CREATE", "UPDATE")
        if not allows(publish, f"$JS.API.STREAM.{verb}.{name}")
    ]
    assert missing == []


@pytest.mark.parametrize("service", SERVICES)
def test_stream_subjects_published_by_their_owner(service: str) -> None:
    """Each stream's subjects are published by exactly the services the design names."""
    owners = {
        streams.INVENTORY_STREAM: {"node-agent"},
        streams.CLAIMS_STREAM: {"claim-writer"},
        streams.DECISIONS_STREAM: {"allocator"},
        streams.DEADLETTER_STREAM: {"inventory", "allocator", "claim-writer"},
    }
    publish = _perms(service, "publish")
    for spec in streams.STREAMS:
        sample = ".".join("x" if t in ("*", ">") else t for t in spec.subjects[0].split("."))
        assert allows(publish, sample) is (service in owners[spec.name]), (spec.name, sample)


# --- the rendered configuration in a real nats-server ---------------------------------------------


def _localize(files: dict[str, str], root: Path, pki: dict[str, Path]) -> tuple[Path, int]:
    """Write the rendered config files under `root` with local paths and ports."""
    port = free_port()
    replacements = {
        "/etc/nats/tls/": f"{pki['server']}/",
        "/data/jetstream": str(root / "jetstream"),
        "/var/run/nats/": f"{root}/",
        "listen: 0.0.0.0:4222": f"listen: 127.0.0.1:{port}",
        "http_port: 8222": f"http_port: {free_port()}",
        "listen: 0.0.0.0:6222": f"listen: 127.0.0.1:{free_port()}",
    }
    for name, text in files.items():
        for old, new in replacements.items():
            text = text.replace(old, new)
        (root / name).write_text(text, encoding="utf-8")
    return root / "nats.conf", port


def _rendered_config(objs: list[dict[str, Any]]) -> dict[str, str]:
    config = next(
        o
        for o in manifests.by_kind(objs, "ConfigMap")
        if o["metadata"]["name"].startswith("gpudra-nats-config-")
    )
    data: dict[str, str] = config["data"]
    return data


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if not tls_certs.openssl_available():
        pytest.skip("openssl is not on PATH: cannot make test certificates")
    return tls_certs.make_pki(tmp_path_factory.mktemp("pki"), [f"gpudra-{s}" for s in SERVICES])


@pytest.mark.parametrize("overlay", manifests.OVERLAYS)
def test_rendered_config_is_accepted_by_nats_server(
    rendered: dict[str, list[dict[str, Any]]], pki: dict[str, Path], tmp_path: Path, overlay: str
) -> None:
    conf, _ = _localize(_rendered_config(rendered[overlay]), tmp_path, pki)
    proc = subprocess.run(
        [str(find_nats_server_binary()), "-t", "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"SERVER_NAME": f"gpudra-nats-{overlay}"},
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout


@pytest.fixture(scope="module")
def dev_server(
    rendered: dict[str, list[dict[str, Any]]],
    pki: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("nats")
    conf, port = _localize(_rendered_config(rendered["dev"]), root, pki)
    log = (root / "server.log").open("wb")
    proc = subprocess.Popen(
        [str(find_nats_server_binary()), "-c", str(conf)],
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={"SERVER_NAME": "gpudra-nats-0"},
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail("nats-server did not start: " + (root / "server.log").read_text())
                time.sleep(0.05)
        yield Server(port, root / "server.log")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@dataclass(frozen=True)
class Server:
    port: int
    log: Path


class Session:
    """One service's connection to the test server."""

    def __init__(self, nc: Client, server: Server, user: str) -> None:
        self.nc = nc
        self.server = server
        self.user = user
        self.js = nc.jetstream(timeout=_TIMEOUT_S)
        self._sentinels = 0

    async def denied(self, subject: str) -> bool:
        """Publish a core message to `subject`; whether the server refused it.

        The server's log is the witness: it records every publish violation with the user. A
        sentinel publish that every user is refused follows the probe on the same connection;
        the server handles one connection's messages in order, so once the sentinel's refusal is
        logged, the probe's verdict is in the log too.
        """
        self._sentinels += 1
        sentinel = f"gpudra-test.sentinel.{id(self)}.{self._sentinels}"
        line = f'user:{self.user}" - Publish Violation - Subject "{subject}"'
        sentinel_line = f'user:{self.user}" - Publish Violation - Subject "{sentinel}"'
        before = self._log().count(line)
        await self.nc.publish(subject, b"probe")
        await self.nc.publish(sentinel, b"sentinel")
        await self.nc.flush(timeout=_TIMEOUT_S)
        deadline = time.monotonic() + _TIMEOUT_S
        while sentinel_line not in self._log():
            assert time.monotonic() < deadline, "the server never logged the sentinel's refusal"
            await asyncio.sleep(0.01)
        return self._log().count(line) > before

    def _log(self) -> str:
        return self.server.log.read_text(encoding="utf-8", errors="replace")


def _refusals(server: Server) -> int:
    """Violations the server logged, other than the sentinels `Session.denied` provokes."""
    lines = server.log.read_text(encoding="utf-8", errors="replace").splitlines()
    return sum("Violation" in line and "gpudra-test.sentinel" not in line for line in lines)


def _tls(folder: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(folder / "ca.crt"))
    context.load_cert_chain(str(folder / "tls.crt"), str(folder / "tls.key"))
    return context


async def _connect(server: Server, folder: Path, user: str) -> Session:
    async def on_error(exc: Exception) -> None:
        """Permission errors are read from the server's log (see Session.denied)."""

    nc = await nats.connect(
        f"tls://127.0.0.1:{server.port}",
        tls=_tls(folder),
        tls_hostname="localhost",
        allow_reconnect=False,
        connect_timeout=5,
        max_reconnect_attempts=0,
        error_cb=on_error,
    )
    return Session(nc, server, user)


@pytest.fixture
async def sessions(dev_server: Server, pki: dict[str, Path]) -> AsyncIterator[dict[str, Session]]:
    opened = {s: await _connect(dev_server, pki[f"gpudra-{s}"], f"CN=gpudra-{s}") for s in SERVICES}
    try:
        yield opened
    finally:
        for session in opened.values():
            await session.nc.close()


async def test_claim_flow_with_per_service_users(sessions: dict[str, Session]) -> None:
    """Each service makes the NATS calls its main module makes at start and in its loop."""
    inventory_spec = next(s for s in streams.STREAMS if s.name == streams.INVENTORY_STREAM)
    agent, inventory = sessions["node-agent"], sessions["inventory"]
    allocator, writer, plugin = (
        sessions["allocator"],
        sessions["claim-writer"],
        sessions["kubelet-plugin"],
    )

    violations = _refusals(agent.server)

    # Start-up: the control plane ensures the whole layout, the node-agent its own stream.
    for service in (inventory, allocator, writer):
        await streams.ensure_streams(service.js)
        await streams.ensure_buckets(service.js)
    await streams.ensure_stream(agent.js, inventory_spec)

    # node-agent -> inventory stream -> inventory -> slices KV.
    await agent.js.publish("gpudra.inventory.node-1", b"inventory")
    last = await agent.js.get_last_msg(streams.INVENTORY_STREAM, "gpudra.inventory.node-1")
    assert last.data == b"inventory"  # the agent resumes its generation from here
    inbox = await inventory.js.pull_subscribe(
        "gpudra.inventory.*", durable="inventory", stream=streams.INVENTORY_STREAM
    )
    (msg,) = await inbox.fetch(1, timeout=_TIMEOUT_S)
    assert msg.data == b"inventory"
    await msg.ack()
    # The inventory's leader lease: its bucket ensured at start, its key created, renewed,
    # read (the create of a held key re-reads it) and released.
    lease_kv = await ensure_lease_bucket(inventory.js, 5.0)
    lease = Lease(lease_kv, "inventory-0", 5.0)
    assert await lease.attempt()
    assert await lease.attempt()
    assert not await Lease(lease_kv, "inventory-1", 5.0).attempt()
    assert await lease.current_holder() == "inventory-0"
    await lease.release()
    await inventory.js.delete_consumer(streams.INVENTORY_STREAM, "inventory")
    slices = await inventory.js.key_value(streams.SLICES_BUCKET)
    await slices.put("node-1", b"slice")
    await inventory.nc.publish("gpudra.drift", b"drift")

    # claim-writer -> claims work queue -> allocator -> reservations KV + decisions stream.
    await writer.js.publish("gpudra.claims.default.claim-a", b"claim")
    claims = await allocator.js.pull_subscribe(
        "gpudra.claims.>", durable="allocator", stream=streams.CLAIMS_STREAM
    )
    (msg,) = await claims.fetch(1, timeout=_TIMEOUT_S)
    await msg.ack()
    allocator_slices = await allocator.js.key_value(streams.SLICES_BUCKET)
    watcher = await allocator_slices.watchall()
    update = await watcher.updates(timeout=_TIMEOUT_S)  # type: ignore[no-untyped-call]
    assert update is not None
    assert update.value == b"slice"
    await watcher.stop()  # type: ignore[no-untyped-call]
    reservations = await allocator.js.key_value(streams.RESERVATIONS_BUCKET)
    revision = await reservations.create("node-1.gpu-0", b"default/claim-a")
    await reservations.update("node-1.gpu-0", b"default/claim-a", last=revision)
    await allocator.js.publish("gpudra.allocations.default.claim-a", b"decision")
    await allocator.js.publish("gpudra.deadletter.claims", b"malformed")

    # decisions -> claim-writer -> claims KV -> kubelet-plugin.
    decisions = await writer.js.pull_subscribe(
        "gpudra.allocations.>", durable="claim-writer", stream=streams.DECISIONS_STREAM
    )
    (msg,) = await decisions.fetch(1, timeout=_TIMEOUT_S)
    assert msg.data == b"decision"
    await msg.ack()
    claims_kv = await writer.js.key_value(streams.CLAIMS_BUCKET)
    await claims_kv.put("default.claim-a", b"{}")
    plugin_claims = await plugin.js.key_value(streams.CLAIMS_BUCKET)
    assert (await plugin_claims.get("default.claim-a")).value == b"{}"
    # The plugin seeds device health from the node's last inventory (healthfeed.seed).
    seed = await plugin.js.get_last_msg(streams.INVENTORY_STREAM, "gpudra.inventory.node-1")
    assert seed.data == b"inventory"
    health = await plugin.nc.subscribe("gpudra.health.node-1")
    await flush_subscriptions(plugin.nc, _TIMEOUT_S)  # live before the publish
    await agent.nc.publish("gpudra.health.node-1", b"xid")
    assert (await health.next_msg(timeout=_TIMEOUT_S)).data == b"xid"
    await health.unsubscribe()
    assert not await plugin.denied("gpudra.prepared.node-1")
    # Nothing above was refused, not even a call whose failure a client would swallow.
    assert _refusals(agent.server) == violations


async def _within(what: str, awaitable: Any) -> Any:
    """`awaitable`, or a failure naming `what` (a call the server refuses gets no answer)."""
    try:
        return await asyncio.wait_for(awaitable, _TIMEOUT_S)
    except TimeoutError:
        pytest.fail(f"{what}: no answer within {_TIMEOUT_S} s (refused by the server?)")


async def test_device_class_mirror_with_per_service_users(
    sessions: dict[str, Session], rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """Through the services' own code: the claim-writer's DeviceClass mirror (kubernetes mode)
    writes the `gpudra-deviceclasses` bucket, which the allocator watches from its start (a
    refused watch is a fatal error there: no allocator would run)."""
    writer, allocator = sessions["claim-writer"], sessions["allocator"]
    violations = _refusals(writer.server)
    for service in (writer, allocator):
        await streams.ensure_buckets(service.js)

    # claim-writer: the cluster's classes into the bucket; a key no class backs is removed.
    classes_kv = await writer.js.key_value(streams.DEVICE_CLASSES_BUCKET)
    await _within("put a stale class", classes_kv.put("gone.example.com", b"{}"))
    device_classes = manifests.by_kind(rendered["dev"], "DeviceClass")
    async with FakeKubeApi(validate_version=None) as kube_api:
        for device_class in device_classes:
            await kube_api.put(DEVICE_CLASSES, device_class)
        kubeconfig = kube_api.write_kubeconfig(tmp_path / "kubeconfig")
        store = await ApiStore.from_kubeconfig(str(kubeconfig))
        mirror = ClassMirror(store, classes_kv, backoff_max=0.5)
        task = asyncio.create_task(mirror.run())
        try:
            deadline = time.monotonic() + _TIMEOUT_S
            while not mirror.synced.is_set() or mirror.counts["deleted"] < 1:
                if time.monotonic() > deadline:
                    pytest.fail(f"the DeviceClass mirror did not finish: {dict(mirror.counts)}")
                await asyncio.sleep(0.05)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await store.close()
    assert mirror.counts["written"] == len(device_classes)

    # allocator: the class index it starts before consuming claims sees the mirrored classes.
    allocator_classes = class_index(await allocator.js.key_value(streams.DEVICE_CLASSES_BUCKET))
    await _within("watch the DeviceClass bucket", allocator_classes.start())
    try:
        names = {c["metadata"]["name"] for c in device_classes}
        assert set(allocator_classes.objects) == names
    finally:
        await allocator_classes.stop()
    assert _refusals(writer.server) == violations


async def test_allocator_reservations_and_tombstones_with_its_user(
    sessions: dict[str, Session],
) -> None:
    """Through the allocator's own code: its reservations mirror (a watch filtered to the pool
    keys) and its tombstone collector, which purges an old claim record from the reservations
    bucket by subject and sequence (a refused purge is retried for ever: the bucket only grows)."""
    allocator = sessions["allocator"]
    violations = _refusals(allocator.server)
    await streams.ensure_buckets(allocator.js)
    reservations_kv = await allocator.js.key_value(streams.RESERVATIONS_BUCKET)
    reservations = Reservations(reservations_kv)
    await _within("watch the reservations", reservations.start())
    await reservations.stop()
    tombstone = f"{CLAIM_PREFIX}uid-gone"
    await reservations_kv.put(tombstone, ClaimRecord(state="released", claim="ns/gone").encode())
    collector = TombstoneCollector(
        allocator.js, reservations_kv, grace=600.0, clock=lambda: time.time() + 3600.0
    )
    assert await _within("collect tombstones", collector.collect()) >= 1
    with pytest.raises(nats.js.errors.KeyNotFoundError):
        await reservations_kv.get(tombstone)
    assert _refusals(allocator.server) == violations


async def test_inventory_purges_a_gone_nodes_inventories_with_its_user(
    sessions: dict[str, Session],
) -> None:
    """The inventory's leader purges the inventories of a node whose Node is deleted and whose
    agent is silent, by subject and up to the last one it read (gpudra_inventory.gone): a
    refused purge would let every restart re-create the pool. Only that node's go."""
    agent, inventory = sessions["node-agent"], sessions["inventory"]
    violations = _refusals(inventory.server)
    await streams.ensure_streams(inventory.js)
    gone, kept = "gpudra.inventory.node-purged", "gpudra.inventory.node-kept"
    last = await agent.js.publish(gone, b"last")
    await agent.js.publish(kept, b"kept")
    purge = inventory.js.purge_stream(streams.INVENTORY_STREAM, seq=last.seq + 1, subject=gone)
    assert await _within("purge a node's inventories", purge)
    with pytest.raises(nats.js.errors.NotFoundError):
        await agent.js.get_last_msg(streams.INVENTORY_STREAM, gone)
    assert (await agent.js.get_last_msg(streams.INVENTORY_STREAM, kept)).data == b"kept"
    assert _refusals(inventory.server) == violations


async def test_claim_writer_reads_the_allocators_claim_records_with_its_user(
    sessions: dict[str, Session], tmp_path: Path
) -> None:
    """Through the claim-writer's own code (kubernetes mode): the look for claims deleted while
    it was down lists and reads the allocator's claim records (read only: it may not write
    them), and publishes the release of one whose claim is gone."""
    writer, allocator = sessions["claim-writer"], sessions["allocator"]
    violations = _refusals(writer.server)
    await streams.ensure_streams(writer.js)
    await streams.ensure_buckets(allocator.js)
    record = ClaimRecord(
        "allocated", claim="ns/gone", generation=1, token="t", node="n1", allocation={}
    )
    allocator_kv = await allocator.js.key_value(streams.RESERVATIONS_BUCKET)
    await _within(
        "write a claim record", allocator_kv.put(f"{CLAIM_PREFIX}uid-gone", record.encode())
    )
    async with FakeKubeApi(validate_version=None) as kube_api:
        store = await ApiStore.from_kubeconfig(str(kube_api.write_kubeconfig(tmp_path / "kc")))
        try:
            reservations = await writer.js.key_value(streams.RESERVATIONS_BUCKET)
            vanished = Vanished(store, Publisher(writer.nc), reservations)
            await _within("look for vanished claims", vanished.reconcile(set()))
        finally:
            await store.close()
    assert vanished.done
    assert vanished.released == 1
    assert _refusals(writer.server) == violations


@pytest.mark.parametrize(
    ("service", "subject"),
    [
        pytest.param("node-agent", "gpudra.claims.default.x", id="agent-claims"),
        pytest.param("node-agent", "$KV.gpudra-slices.node-1", id="agent-slices"),
        pytest.param("allocator", "$KV.gpudra-slices.node-1", id="allocator-slices"),
        pytest.param("allocator", "gpudra.claims.default.x", id="allocator-claims"),
        pytest.param("claim-writer", "gpudra.allocations.default.x", id="writer-decisions"),
        pytest.param("kubelet-plugin", "$KV.gpudra-claims.default.x", id="plugin-claims-kv"),
        pytest.param("inventory", "gpudra.inventory.node-1", id="inventory-inventory"),
        pytest.param("node-agent", "gpudra.health.node-1", id="allowed-control"),
    ],
)
async def test_server_refuses_other_services_subjects(
    sessions: dict[str, Session], service: str, subject: str
) -> None:
    expected = not allows(_perms(service, "publish"), subject)
    assert await sessions[service].denied(subject) is expected


async def test_denied_jetstream_api_call_gets_no_answer(sessions: dict[str, Session]) -> None:
    """kubelet-plugin may read the claims bucket but not create streams."""
    with pytest.raises(nats.errors.TimeoutError):
        await sessions["kubelet-plugin"].nc.request(
            "$JS.API.STREAM.CREATE.GPUDRA_CLAIMS", b"{}", timeout=0.5
        )


@pytest.mark.parametrize(
    ("identity", "reason"),
    [
        pytest.param(tls_certs.ROGUE, "signed by unknown authority", id="untrusted-ca"),
        pytest.param(tls_certs.STRANGER, "authentication error", id="unmapped-name"),
    ],
)
async def test_unknown_certificates_cannot_connect(
    dev_server: Server, pki: dict[str, Path], identity: str, reason: str
) -> None:
    before = dev_server.log.read_text(encoding="utf-8", errors="replace").count(reason)
    with pytest.raises((nats.errors.Error, OSError, ssl.SSLError)):
        await _connect(dev_server, pki[identity], identity)
    # The client can see the handshake fail before the server has written why: wait for it.
    deadline = time.monotonic() + 10.0
    while True:
        after = dev_server.log.read_text(encoding="utf-8", errors="replace").count(reason)
        if after > before or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert after == before + 1
