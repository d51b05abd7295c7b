from __future__ import annotations

import uuid

import nats
from nats.js.api import KeyValueConfig

from gpudra_bus.kvlist import live_keys


async def test_live_keys_by_prefix_and_after_deletions(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        kv = await nc.jetstream().create_key_value(
            KeyValueConfig(bucket=f"t{uuid.uuid4().hex[:8]}")
        )
        assert await live_keys(kv) == []
        for key in ("c.b", "c.a", "p.x", "gone"):
            await kv.put(key, b"1")
        await kv.delete("gone")
        assert await live_keys(kv) == ["c.a", "c.b", "p.x"]
        assert await live_keys(kv, "c.") == ["c.a", "c.b"]
        assert await live_keys(kv, "z.") == []
        for key in ("c.b", "c.a", "p.x"):
            await kv.delete(key)
        # Only deletion markers left: asked `tries` times, then empty.
        assert await live_keys(kv, tries=3, pause=0.0) == []
    finally:
        await nc.drain()
