"""The node-agent against a real nats-server, with the simulator standing in for NVML."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer

from gpudra_bus import Backoff, connect, disconnect, ensure_stream, subjects
from gpudra_bus.codec import SCHEMA_HEADER
from gpudra_bus.streams import INVENTORY_STREAM, STREAMS
from gpudra_node_agent.agent import HEALTH_EVENT, NODE_INVENTORY, UTILIZATION_SAMPLE, NodeAgent
from gpudra_node_agent.settings import Settings
from gpudra_nvml import Opened, open_simulator
from gpudra_testing import NatsServer
from gpudrapb.v1 import inventory_pb2 as pb

FAST = Backoff(initial=0.01, maximum=0.2)


@pytest.fixture
def tracer() -> Iterator[Tracer]:
    provider = TracerProvider()
    yield provider.get_tracer("node-agent-test")
    provider.shutdown()


def _settings(url: str, node: str) -> Settings:
    return Settings(
        node_name=node,
        nats_url=url,
        poll_interval=0.05,
        heartbeat_interval=0.5,
        utilization_interval=0.1,
        discovery_interval=60.0,
    )


@asynccontextmanager
async def _client(url: str) -> AsyncIterator[Client]:
    nc = await connect(url, name="test", backoff=FAST, deadline=10)
    try:
        await ensure_stream(nc.jetstream(), next(s for s in STREAMS if s.name == INVENTORY_STREAM))
        yield nc
    finally:
        await disconnect(nc, drain=False)


@asynccontextmanager
async def _running(
    settings: Settings,
    opened: Opened,
    tracer: Tracer,
    through: Callable[[Client], Any] = lambda nc: nc,
) -> AsyncIterator[NodeAgent]:
    """An agent turning in the background on its own connection (seen `through` a wrapper, if
    given); stopped and closed on exit."""
    async with _client(settings.nats_url) as nc:
        agent = NodeAgent(settings, opened, through(nc), tracer=tracer, publish_deadline=0.5)
        await agent.start()
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop), name="node-agent")
        try:
            yield agent
        finally:
            stop.set()
            await task
            await agent.close()


async def _inventory(
    nc: Client, node: str, ok: Callable[[pb.NodeInventory], bool], timeout: float = 10.0
) -> tuple[pb.NodeInventory, dict[str, str]]:
    """The stored inventory of `node` once it satisfies `ok` (polls the last-value stream)."""
    js = nc.jetstream()
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout
    last: pb.NodeInventory | None = None
    while loop.time() < until:
        try:
            msg = await js.get_last_msg(INVENTORY_STREAM, subjects.inventory(node))
        except nats.errors.Error:  # nothing stored yet
            await asyncio.sleep(0.05)
            continue
        last = NODE_INVENTORY.decode(msg.data or b"", msg.headers)
        if ok(last):
            return last, dict(msg.headers or {})
        await asyncio.sleep(0.05)
    raise AssertionError(f"no matching inventory for {node} within {timeout}s; last: {last}")


async def test_inventory_health_and_restart(nats_url: str, tracer: Tracer) -> None:
    node = f"node-{uuid.uuid4().hex[:8]}"
    settings = _settings(nats_url, node)
    async with _client(nats_url) as nc:
        health = await nc.subscribe(subjects.health(node))
        utilization = await nc.subscribe(subjects.utilization(node))
        opened = open_simulator("dgx-h100")
        assert opened.fake is not None
        async with _running(settings, opened, tracer):
            first, headers = await _inventory(nc, node, lambda inv: inv.generation >= 1)
            assert [d.name for d in first.devices] == [f"gpu-{i}" for i in range(8)]
            assert first.source.kind == pb.InventorySource.KIND_SIMULATOR
            assert first.node == node
            assert headers[SCHEMA_HEADER] == "gpudra.v1.NodeInventory;v=1"
            assert "traceparent" in headers

            sample_msg = await utilization.next_msg(timeout=5)
            sample = UTILIZATION_SAMPLE.decode(sample_msg.data, sample_msg.headers)
            assert len(sample.devices) == 8
            assert sample.devices[7].gpu_percent == 0  # the idle-but-allocated GPU

            opened.fake.inject_xid(4, 48)
            msg = await health.next_msg(timeout=5)
            event = HEALTH_EVENT.decode(msg.data, msg.headers)
            assert (
                event.device_name,
                event.condition.kind,
                event.condition.code,
                event.cleared,
            ) == (
                "gpu-4",
                pb.HealthCondition.KIND_XID,
                48,
                False,
            )
            assert "traceparent" in (msg.headers or {})
            tainted, _ = await _inventory(nc, node, lambda inv: any(d.health for d in inv.devices))
            assert tainted.generation == first.generation + 1
            assert [d.name for d in tainted.devices if d.health] == ["gpu-4"]

        # Restart: a new agent (and a healthy simulator) republishes at a higher generation.
        async with _running(settings, open_simulator("dgx-h100"), tracer):
            again, _ = await _inventory(nc, node, lambda inv: inv.generation > tainted.generation)
            assert not any(d.health for d in again.devices)
            assert len(again.devices) == 8


async def test_heartbeat_repeats_generation(nats_url: str, tracer: Tracer) -> None:
    node = f"node-{uuid.uuid4().hex[:8]}"
    async with _client(nats_url) as nc:
        sub = await nc.subscribe(subjects.inventory(node))
        async with _running(_settings(nats_url, node), open_simulator("l4-pcie"), tracer):
            msgs = [await sub.next_msg(timeout=5) for _ in range(3)]
        got = [NODE_INVENTORY.decode(m.data, m.headers) for m in msgs]
        assert {inv.generation for inv in got} == {1}  # nothing changed: heartbeats only
        stamps = [inv.observed_at.ToNanoseconds() for inv in got]
        assert stamps == sorted(set(stamps))  # each heartbeat is a fresh observation


async def test_survives_nats_outage(fresh_nats_server: NatsServer, tracer: Tracer) -> None:
    node = f"node-{uuid.uuid4().hex[:8]}"
    opened = open_simulator("h100-pcie-pairs")
    assert opened.fake is not None
    settings = _settings(fresh_nats_server.url, node)
    async with _running(settings, opened, tracer) as agent:
        async with _client(fresh_nats_server.url) as nc:
            first, _ = await _inventory(nc, node, lambda inv: inv.generation >= 1)
        fresh_nats_server.kill()
        opened.fake.lose_device(1)  # changes while NATS is away
        await asyncio.sleep(0.5)
        fresh_nats_server.restart()
        async with _client(fresh_nats_server.url) as nc:
            after, _ = await _inventory(
                nc, node, lambda inv: any(d.health for d in inv.devices), timeout=15
            )
        assert after.generation == first.generation + 1  # one change, however many retries
        lost = [d for d in after.devices if d.health]
        assert [d.name for d in lost] == ["gpu-1"]  # kept from the last discovery, marked lost
        kinds = {c.kind for c in lost[0].health}
        assert kinds == {
            pb.HealthCondition.KIND_XID,
            pb.HealthCondition.KIND_LOST,
        }  # XID 79, then lost
        # A publish whose ack timed out (a loaded machine) may be stored yet counted as failed:
        # the agent publishes it again, and counts it then.
        loop = asyncio.get_running_loop()
        until = loop.time() + 15
        while agent.published < 2 and loop.time() < until:
            await asyncio.sleep(0.05)
        assert agent.published >= 2


class _FlakyLastMsg:
    """A NATS client whose JetStream answers the first `failures` last-message reads with a
    timeout (a JetStream leader election, a loaded server); everything else is the real client
    `over` puts it in front of."""

    def __init__(self, failures: int) -> None:
        self._nc: Any = None
        self.failures = failures

    def over(self, nc: Client) -> _FlakyLastMsg:
        self._nc = nc
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._nc, name)

    def jetstream(self, **kwargs: Any) -> Any:
        js = self._nc.jetstream(**kwargs)
        outer = self

        class _Js:
            def __getattr__(self, name: str) -> Any:
                return getattr(js, name)

            async def get_last_msg(self, *args: Any, **kw: Any) -> Any:
                if outer.failures > 0:
                    outer.failures -= 1
                    raise nats.errors.TimeoutError
                return await js.get_last_msg(*args, **kw)

        return _Js()


async def test_generation_continues_when_the_stored_one_is_read_late(
    nats_url: str, tracer: Tracer
) -> None:
    node = f"node-{uuid.uuid4().hex[:8]}"
    settings = _settings(nats_url, node)
    async with _client(nats_url) as nc:
        stored = pb.NodeInventory(schema_version=1, node=node, generation=7)
        data, headers = NODE_INVENTORY.encode(stored)
        await nc.jetstream().publish(subjects.inventory(node), data, headers=headers)
        sub = await nc.subscribe(subjects.inventory(node))
        flaky = _FlakyLastMsg(failures=2)
        async with _running(settings, open_simulator("l4-pcie"), tracer, through=flaky.over):
            msg = await sub.next_msg(timeout=10)
        first = NODE_INVENTORY.decode(msg.data, msg.headers)
        # Not 1: a consumer that keeps the highest generation would ignore it (and what follows)
        # until the agent had made up the difference.
        assert first.generation == 8
        assert flaky.failures == 0


async def test_a_gpu_lost_across_an_agent_restart_stays_described_and_lost(
    nats_url: str, tracer: Tracer
) -> None:
    # A GPU falling off the bus can hang NVML long enough for the liveness probe to restart the
    # agent: the new agent must still describe it (from the inventory it stored in this boot),
    # marked lost, or its devices vanish untainted while pods still hold them.
    node = f"node-{uuid.uuid4().hex[:8]}"
    settings = _settings(nats_url, node)
    async with _client(nats_url) as nc:
        async with _running(settings, open_simulator("dgx-h100"), tracer):
            before, _ = await _inventory(nc, node, lambda inv: inv.generation >= 1)
        opened = open_simulator("dgx-h100")
        assert opened.fake is not None
        opened.fake.lose_device(3)
        async with _running(settings, opened, tracer):
            after, _ = await _inventory(nc, node, lambda inv: inv.generation > before.generation)
    assert [d.name for d in after.devices] == [d.name for d in before.devices]
    lost = [d for d in after.devices if d.health]
    assert [d.name for d in lost] == ["gpu-3"]
    assert pb.HealthCondition.KIND_LOST in {c.kind for c in lost[0].health}
    assert after.devices[3].uuid == before.devices[3].uuid
