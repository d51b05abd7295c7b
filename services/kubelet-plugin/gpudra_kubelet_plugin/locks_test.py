from __future__ import annotations

import asyncio

import pytest

from gpudra_kubelet_plugin.locks import KeyedLock


@pytest.mark.parametrize(
    ("keys", "max_parallel"),
    [
        pytest.param(["a", "a", "a"], 1, id="same-key-serialized"),
        pytest.param(["a", "b", "c"], 3, id="different-keys-parallel"),
    ],
)
async def test_keyed_lock(keys: list[str], max_parallel: int) -> None:
    locks = KeyedLock()
    inside = 0
    most = 0

    async def work(key: str) -> None:
        nonlocal inside, most
        async with locks.hold(key):
            inside += 1
            most = max(most, inside)
            for _ in range(5):  # yield so that every other worker gets a chance to enter
                await asyncio.sleep(0)
            inside -= 1

    await asyncio.gather(*(work(k) for k in keys))
    assert most == max_parallel
    assert len(locks) == 0  # nothing accumulates
