from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js.kv import KeyValue

from gpudra_bus import (
    DEADLETTER_STREAM,
    INVENTORY_STREAM,
    SLICES_BUCKET,
    Publisher,
    connect,
    subjects,
)
from gpudra_bus.kvlist import live_keys
from gpudra_inventory.lease import Lease, ensure_lease_bucket
from gpudra_inventory.pools_test import inventory
from gpudra_inventory.service import NODE_INVENTORY, InventoryService
from gpudra_inventory.settings import Settings
from gpudra_standalone.nats_server import NatsServer
from gpudrapb.v1 import inventory_pb2 as pb


@pytest.fixture
def nc(fresh_bus: Client) -> Client:
    """gpudra's streams and buckets on a private server (`gpudra_testing`'s `fresh_bus`)."""
    return fresh_bus


async def slices(kv: KeyValue) -> dict[str, dict[str, Any]]:
    """The bucket's slices (`live_keys`: nats-py's own listing can answer no keys, or hang);
    callers poll with `eventually`."""
    keys = await live_keys(kv)
    out = {}
    for key in keys:
        entry = await kv.get(key)
        if entry.value:
            out[key] = json.loads(entry.value)
    return out


async def eventually(check: Any, timeout: float = 10.0) -> Any:
    for _ in range(int(timeout / 0.05)):
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached")


@contextlib.asynccontextmanager
async def running(service: InventoryService) -> AsyncIterator[InventoryService]:
    """`service` loaded and running until the block ends, then stopped and awaited."""
    await service.load()
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    try:
        yield service
    finally:
        stop.set()
        await task


async def test_inventory_to_slices_taint_and_dead_letters(nc: Client) -> None:
    now = [1_000_000.0]
    kv = await nc.jetstream().key_value(SLICES_BUCKET)
    service = InventoryService(nc, kv, Settings(heartbeat_timeout=30.0), clock=lambda: now[0])
    async with running(service):
        publisher = Publisher(nc)
        inv = inventory("node-x")
        await publisher.publish(subjects.inventory("node-x"), inv, NODE_INVENTORY)
        # A payload that is not a NodeInventory, and one published for another node's subject.
        await nc.jetstream().publish(subjects.inventory("node-y"), b"garbage")
        await publisher.publish(subjects.inventory("node-z"), inv, NODE_INVENTORY)

        async def one_slice() -> Any:
            found = await slices(kv) if service.changes else {}
            return found if len(found) == 1 else None

        (only,) = (await eventually(one_slice)).values()
        assert only["spec"]["pool"]["generation"] == 1
        assert all("taints" not in d for d in only["spec"]["devices"])

        async def dead_letters() -> bool:
            info = await nc.jetstream().stream_info(DEADLETTER_STREAM)
            return info.state.messages == 2

        await eventually(dead_letters)

        # The node falls silent: its devices stay, tainted.
        now[0] = inv.observed_at.seconds + 3600.0

        async def tainted() -> Any:
            found = list((await slices(kv)).values())
            return (
                found[0]
                if len(found) == 1 and found[0]["spec"]["pool"]["generation"] == 2
                else None
            )

        s = await eventually(tainted)
        assert len(s["spec"]["devices"]) == 8
        assert all(
            d["taints"][0]["key"] == "gpu.nvidia.com/unhealthy"
            and d["taints"][0]["effect"] == "NoSchedule"
            for d in s["spec"]["devices"]
        )


async def test_standby_stays_warm_and_takes_over_with_higher_generations(nc: Client) -> None:
    ttl = 2.0  # short, yet renewals (every ttl/4) keep up on a busy machine
    kv = await nc.jetstream().key_value(SLICES_BUCKET)
    lease_kv = await ensure_lease_bucket(nc.jetstream(), ttl)
    services = {
        name: InventoryService(nc, kv, Settings(), lease=Lease(lease_kv, name, ttl))
        for name in ("a", "b")
    }
    stops = {name: asyncio.Event() for name in services}
    tasks = {}
    try:
        for name in ("a", "b"):  # `a` first, so it is the one that leads
            await services[name].load()
            tasks[name] = asyncio.create_task(services[name].run(stops[name]))
            await eventually(lambda s=services[name]: _true(s.ready))
        a, b = services["a"], services["b"]
        assert (a.role, b.role) == ("leader", "standby")
        assert a.status() == {
            "role": "leader",
            "holder": "a",
            "ready": True,
            "alive": True,
            "takeovers": 1,
            "pools": 0,
            "apiRepairs": 0,
            "apiRefused": 0,
            "poolsRemoved": 0,
        }
        assert {k: b.status()[k] for k in ("role", "holder", "takeovers")} == {
            "role": "standby",
            "holder": "b",
            "takeovers": 0,
        }
        await Publisher(nc).publish(
            subjects.inventory("node-x"), inventory("node-x"), NODE_INVENTORY
        )

        async def generation() -> int:
            found = await slices(kv)
            return min(s["spec"]["pool"]["generation"] for s in found.values()) if found else 0

        await eventually(lambda: _ge(generation(), 1))
        await eventually(lambda: _true("node-x" in b.book.pools))  # warm, but silent
        assert b.changes == 0
        assert b.takeovers == 0
        before = await generation()

        stops["a"].set()  # a graceful stop releases the lease: `b` takes over at once
        await tasks.pop("a")
        await eventually(lambda: _true(b.role == "leader"), timeout=5 * ttl)
        await eventually(lambda: _ge(generation(), before + 1))
        assert b.takeovers == 1
        assert b.ready
        assert {k: b.status()[k] for k in ("role", "takeovers", "pools")} == {
            "role": "leader",
            "takeovers": 1,
            "pools": 1,
        }
    finally:
        for name, task in tasks.items():
            stops[name].set()
            await task


async def _true(value: bool) -> bool:
    return value


async def _ge(value: Any, floor: int) -> bool:
    return bool(await value >= floor)


async def test_a_leader_cut_off_from_its_lease_stops_writing_before_the_standby_starts(
    nc: Client, fresh_nats_server: NatsServer
) -> None:
    ttl = 2.0  # short, yet renewals (every ttl/4) keep up on a busy machine
    kv = await nc.jetstream().key_value(SLICES_BUCKET)
    # The leader renews its lease over a connection of its own, which the test then cuts.
    lease_nc = await connect(fresh_nats_server.url, name="inventory-test-lease", deadline=10)
    a = InventoryService(
        nc,
        kv,
        Settings(),
        lease=Lease(await ensure_lease_bucket(lease_nc.jetstream(), ttl), "a", ttl),
    )
    b = InventoryService(
        nc, kv, Settings(), lease=Lease(await ensure_lease_bucket(nc.jetstream(), ttl), "b", ttl)
    )
    stop = asyncio.Event()
    tasks = []
    try:
        for service in (a, b):
            await service.load()
            tasks.append(asyncio.create_task(service.run(stop)))
            await eventually(lambda s=service: _true(s.ready))
        assert (a.role, b.role) == ("leader", "standby")
        publisher = Publisher(nc)
        inv = inventory("node-x")
        await publisher.publish(subjects.inventory("node-x"), inv, NODE_INVENTORY)
        await eventually(lambda: _true(a.changes >= 1))
        (before,) = (await eventually(lambda: slices(kv))).values()

        await lease_nc.close()
        loop = asyncio.get_running_loop()
        a_stopped: float | None = None
        b_started: float | None = None
        a_changes = -1
        # Bounded: a standby that never takes over fails the test instead of hanging it.
        deadline = loop.time() + 15 * ttl
        while b_started is None:
            assert loop.time() < deadline, f"b never took over (a leading: {a.leading()})"
            if a_stopped is None and not a.leading():
                a_stopped, a_changes = loop.time(), a.changes
            if b.leading():
                b_started = loop.time()
            await asyncio.sleep(0.005)
        assert a_stopped is not None, "both led at once"
        assert b_started - a_stopped >= ttl * 0.1

        # A change after the handover is written by the new leader only.
        smaller = pb.NodeInventory()
        smaller.CopyFrom(inv)
        del smaller.devices[4:]
        await publisher.publish(subjects.inventory("node-x"), smaller, NODE_INVENTORY)

        async def four_devices() -> bool:
            found = list((await slices(kv)).values())
            return len(found) == 1 and len(found[0]["spec"]["devices"]) == 4

        await eventually(four_devices)
        assert a.changes == a_changes, "the deposed leader wrote"
        assert b.changes >= 2  # the takeover's republish, then the change
        (s,) = (await eventually(lambda: slices(kv))).values()
        assert s["spec"]["pool"]["generation"] >= before["spec"]["pool"]["generation"] + 2
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def test_a_lost_consumer_is_re_created(nc: Client) -> None:
    kv = await nc.jetstream().key_value(SLICES_BUCKET)
    service = InventoryService(nc, kv, Settings())
    async with running(service):
        publisher = Publisher(nc)
        inv = inventory("node-x")
        await publisher.publish(subjects.inventory("node-x"), inv, NODE_INVENTORY)
        await eventually(lambda: _true(service.changes == 1))
        await nc.jetstream().delete_consumer(INVENTORY_STREAM, service.consumer)
        smaller = pb.NodeInventory()
        smaller.CopyFrom(inv)
        del smaller.devices[4:]
        await publisher.publish(subjects.inventory("node-x"), smaller, NODE_INVENTORY)
        await eventually(lambda: _true(service.changes == 2))
        (s,) = (await eventually(lambda: slices(kv))).values()
        assert len(s["spec"]["devices"]) == 4


async def test_a_replica_whose_lease_task_died_is_not_alive(nc: Client) -> None:
    kv = await nc.jetstream().key_value(SLICES_BUCKET)
    lease = Lease(await ensure_lease_bucket(nc.jetstream(), 3.0), "only", 3.0)
    service = InventoryService(nc, kv, Settings(), lease=lease)
    assert service.alive
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    try:
        await eventually(lambda: _true(service.ready and service.role == "leader"))
        assert service.alive
        (lease_task,) = (t for t in asyncio.all_tasks() if t.get_name() == "inventory-lease")
        lease_task.cancel()
        await eventually(lambda: _true(not service.alive))
        # Without renewals the lease lapses: the replica stops leading (and so stops writing).
        await eventually(lambda: _true(service.role == "standby"))
    finally:
        stop.set()
        await task


async def test_a_corrupt_inventory_as_large_as_nats_allows_is_dead_lettered(nc: Client) -> None:
    # The dead letter carries the reason in headers the original lacked: stored unchanged it would
    # be over the server's max_payload, and the server closes the connection of whoever sends it.
    kv = await nc.jetstream().key_value(SLICES_BUCKET)
    service = InventoryService(nc, kv, Settings(heartbeat_timeout=30.0))
    async with running(service):
        big = b"\xff" * (nc.max_payload - 16)
        await nc.jetstream().publish(subjects.inventory("node-y"), big)
        await Publisher(nc).publish(
            subjects.inventory("node-x"), inventory("node-x"), NODE_INVENTORY
        )

        async def dead_lettered() -> bool:
            info = await nc.jetstream().stream_info(DEADLETTER_STREAM)
            return info.state.messages == 1

        await eventually(dead_lettered)
        assert set(await eventually(lambda: slices(kv))) == {"node-x-gpu.nvidia.com-0"}
        parked = await nc.jetstream().get_last_msg(
            DEADLETTER_STREAM, subjects.deadletter(subjects.Kind.INVENTORY)
        )
        assert parked.headers is not None
        assert parked.headers["Gpudra-Original-Subject"] == subjects.inventory("node-y")
        assert parked.headers["Gpudra-Truncated-From"] == str(len(big))
        assert parked.data is not None
        assert big.startswith(parked.data)
        assert nc.is_connected


async def only_node_y_is_tainted(
    service: InventoryService, publisher: Publisher, timeout: float, settle: float = 0.0
) -> None:
    """node-x's agent heartbeats (every `timeout` / 8) while node-y's stays silent: node-y gets
    tainted, and `settle` seconds later node-x still has its first, untainted pool."""

    async def node_x_agent() -> None:
        while True:
            await publisher.publish(
                subjects.inventory("node-x"), inventory("node-x"), NODE_INVENTORY
            )
            await asyncio.sleep(timeout / 8)

    async def node_y_tainted() -> bool:
        pool = service.book.pools.get("node-y")
        return pool is not None and pool.unreachable

    agent = asyncio.create_task(node_x_agent())
    try:
        await eventually(node_y_tainted, timeout=timeout + 10.0)
        await asyncio.sleep(settle)
    finally:
        agent.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await agent
    assert not service.book.pools["node-x"].unreachable
    assert service.book.pools["node-x"].generation == 1


async def test_a_nats_outage_does_not_taint_the_nodes_it_silenced(
    nc: Client, fresh_nats_server: NatsServer
) -> None:
    # While NATS is down no node-agent can publish: that silence is the bus's, not the nodes'.
    # Once it is back, the nodes get a whole heartbeat timeout to be heard again; one that stays
    # silent is tainted after that.
    timeout = 4.0
    kv = await nc.jetstream().key_value(SLICES_BUCKET)
    service = InventoryService(nc, kv, Settings(heartbeat_timeout=timeout))
    async with running(service):
        publisher = Publisher(nc)
        for node in ("node-x", "node-y"):
            await publisher.publish(subjects.inventory(node), inventory(node), NODE_INVENTORY)

        async def both() -> bool:
            return len(await slices(kv)) == 2

        await eventually(both)
        fresh_nats_server.kill()
        await asyncio.sleep(timeout + 2.0)
        fresh_nats_server.restart()

        await only_node_y_is_tainted(service, publisher, timeout)  # node-x reconnects
        assert service.book.pools["node-y"].generation == 2


@pytest.mark.parametrize("skew", [120.0, -120.0], ids=["ahead", "behind"])
async def test_a_clock_skewed_from_the_servers_taints_only_the_silent_node(
    nc: Client, skew: float
) -> None:
    # This pod's node clock disagrees with the NATS server's by more than the heartbeat timeout.
    # Ahead, every node would look silent (a fleet-wide taint); behind, no dead node would.
    timeout = 4.0
    kv = await nc.jetstream().key_value(SLICES_BUCKET)
    service = InventoryService(
        nc, kv, Settings(heartbeat_timeout=timeout), clock=lambda: time.time() + skew
    )
    async with running(service):
        publisher = Publisher(nc)
        await publisher.publish(subjects.inventory("node-y"), inventory("node-y"), NODE_INVENTORY)

        await only_node_y_is_tainted(service, publisher, timeout, settle=timeout / 2)
