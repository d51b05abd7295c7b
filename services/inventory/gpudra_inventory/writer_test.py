from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.js.kv import KeyValue

from gpudra_bus import SLICES_BUCKET, connect, ensure_buckets
from gpudra_bus.kvlist import live_keys
from gpudra_inventory.errors import NotLeaderError
from gpudra_inventory.writer import SliceWriter
from gpudra_standalone.nats_server import NatsServer


@pytest_asyncio.fixture
async def kv(fresh_nats_server: NatsServer) -> AsyncIterator[KeyValue]:
    client: Client = await connect(fresh_nats_server.url, name="writer-test", deadline=10)
    buckets = await ensure_buckets(client.jetstream())
    yield buckets[SLICES_BUCKET]
    await client.drain()


def piece(node: str, index: int, generation: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}-gpu.nvidia.com-{index}"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": node, "pool": {"generation": generation}},
    }


async def stored_revisions(kv: KeyValue) -> dict[str, tuple[int, int]]:
    """Slice name -> (revision, pool generation), listed with `live_keys` (nats-py's own listing
    can answer no keys, or hang)."""
    keys = await live_keys(kv)
    out = {}
    for key in keys:
        entry = await kv.get(key)
        generation = json.loads(entry.value or b"{}")["spec"]["pool"]["generation"]
        out[key] = (entry.revision or 0, generation)
    return out


async def stored(kv: KeyValue) -> dict[str, int]:
    """Slice name -> pool generation."""
    return {key: generation for key, (_, generation) in (await stored_revisions(kv)).items()}


async def test_sync_writes_the_pool_and_deletes_stale_slices(
    kv: KeyValue, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpudra_inventory.writer")
    writer = SliceWriter(kv)
    assert await writer.sync("n1", [piece("n1", 0, 1), piece("n1", 1, 1)]) == []
    assert await writer.sync("n1", [piece("n1", 0, 2)]) == ["n1-gpu.nvidia.com-1"]
    assert await stored(kv) == {"n1-gpu.nvidia.com-0": 2}
    # A slice that comes back after its deletion is created over the delete marker.
    assert await writer.sync("n1", [piece("n1", 0, 3), piece("n1", 1, 3)]) == []
    assert await stored(kv) == {"n1-gpu.nvidia.com-0": 3, "n1-gpu.nvidia.com-1": 3}
    # A second writer that read the bucket continues where the first stopped.
    successor = SliceWriter(kv)
    assert len(await successor.read()) == 2
    assert await successor.sync("n1", [piece("n1", 0, 4)]) == ["n1-gpu.nvidia.com-1"]
    # Delete markers count as keys: a complete listing is not read twice.
    assert len(await SliceWriter(kv).read()) == 1
    assert "reading again" not in caplog.text


@pytest.mark.parametrize(
    "foreign",
    [
        pytest.param("update", id="key-rewritten"),
        pytest.param("create", id="key-created"),
        pytest.param("delete", id="key-deleted"),
    ],
)
async def test_a_write_by_another_process_stops_the_writer(kv: KeyValue, foreign: str) -> None:
    writer = SliceWriter(kv)
    await writer.sync("n1", [piece("n1", 0, 1), piece("n1", 1, 1)])
    other = SliceWriter(kv)
    await other.read()
    if foreign == "update":
        await other.sync("n1", [piece("n1", 0, 9), piece("n1", 1, 9)])
        pool = [piece("n1", 0, 2), piece("n1", 1, 2)]
    elif foreign == "create":
        await other.sync("n1", [piece("n1", 0, 9), piece("n1", 1, 9), piece("n1", 2, 9)])
        pool = [piece("n1", 2, 2)]
    else:
        await other.sync("n1", [piece("n1", 0, 9)])
        pool = [piece("n1", 1, 2)]
    with pytest.raises(NotLeaderError, match="another process"):
        await writer.sync("n1", pool)
    # Having re-read the bucket, the writer may write again.
    await writer.read()
    await writer.sync("n1", [piece("n1", 0, 10)])
    assert (await stored(kv))["n1-gpu.nvidia.com-0"] == 10


async def test_nothing_is_written_once_the_lease_lapsed(kv: KeyValue) -> None:
    allowed = [True]
    writer = SliceWriter(kv, lambda: allowed[0])
    await writer.sync("n1", [piece("n1", 0, 1)])
    allowed[0] = False
    with pytest.raises(NotLeaderError, match="not the leader"):
        await writer.sync("n1", [piece("n1", 0, 2)])
    assert await stored(kv) == {"n1-gpu.nvidia.com-0": 1}


async def test_read_skips_what_is_not_a_slice(kv: KeyValue) -> None:
    await kv.put("junk", b"not json")
    await kv.put("n1-gpu.nvidia.com-0", json.dumps(piece("n1", 0, 4)).encode())
    writer = SliceWriter(kv)
    assert [s["metadata"]["name"] for s in await writer.read()] == ["n1-gpu.nvidia.com-0"]
    assert set(writer.revisions) == {"junk", "n1-gpu.nvidia.com-0"}
    assert writer.nodes == {"n1": {"n1-gpu.nvidia.com-0"}}
    # The unreadable key is replaced at its revision, like any other.
    await writer.sync(
        "n1", [piece("n1", 0, 5), {**piece("n1", 1, 5), "metadata": {"name": "junk"}}]
    )
    assert await stored(kv) == {"n1-gpu.nvidia.com-0": 5, "junk": 5}


async def test_remove_deletes_the_whole_pool_at_its_revisions(kv: KeyValue) -> None:
    """A pool removed (its Node deleted) leaves no key; a write by another process since this
    writer read stops the removal; the pool may come back as a new one."""
    writer = SliceWriter(kv)
    await writer.sync("n1", [piece("n1", 0, 3), piece("n1", 1, 3)])
    await writer.sync("n2", [piece("n2", 0, 1)])
    assert await writer.remove("n1") == ["n1-gpu.nvidia.com-0", "n1-gpu.nvidia.com-1"]
    assert await stored(kv) == {"n2-gpu.nvidia.com-0": 1}
    assert "n1" not in writer.nodes
    assert await writer.sync("n1", [piece("n1", 0, 1)]) == []
    assert await stored(kv) == {"n1-gpu.nvidia.com-0": 1, "n2-gpu.nvidia.com-0": 1}
    await kv.put("n2-gpu.nvidia.com-0", json.dumps(piece("n2", 0, 9)).encode())
    with pytest.raises(NotLeaderError):
        await writer.remove("n2")
    assert await stored(kv) == {"n1-gpu.nvidia.com-0": 1, "n2-gpu.nvidia.com-0": 9}
