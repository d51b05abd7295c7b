from __future__ import annotations

import uuid

import nats
from nats.js.api import KeyValueConfig

from gpudra_testing.kvkeys import bucket_keys


async def test_bucket_keys_lists_live_keys_by_prefix(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    kv = await nc.jetstream().create_key_value(KeyValueConfig(bucket=f"t{uuid.uuid4().hex[:8]}"))
    assert await bucket_keys(kv) == []
    for key in ("c.b", "c.a", "p.x", "gone"):
        await kv.put(key, b"1")
    await kv.delete("gone")
    assert await bucket_keys(kv) == ["c.a", "c.b", "p.x"]
    assert await bucket_keys(kv, "c.") == ["c.a", "c.b"]
    assert await bucket_keys(kv, "z.") == []
    await nc.drain()
