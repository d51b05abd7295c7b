from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpudra_kubelet_plugin.errors import CheckpointError
from gpudra_kubelet_plugin.filelock import file_lock


async def test_holders_exclude_each_other_and_a_cancelled_waiter_leaves_no_lock(
    tmp_path: Path,
) -> None:
    path = tmp_path / "dir" / "serialize.lock"
    order: list[str] = []

    async def hold(name: str, release: asyncio.Event) -> None:
        async with file_lock(path):
            order.append(f"{name} in")
            await release.wait()
            order.append(f"{name} out")

    first_release, second_release = asyncio.Event(), asyncio.Event()
    first = asyncio.create_task(hold("a", first_release))
    await asyncio.sleep(0.02)
    second = asyncio.create_task(hold("b", second_release))
    waiter = asyncio.create_task(hold("c", asyncio.Event()))
    await asyncio.sleep(0.02)
    assert order == ["a in"]  # b and c wait
    waiter.cancel()
    first_release.set()
    second_release.set()
    await asyncio.gather(first, second)
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert order == ["a in", "a out", "b in", "b out"]
    async with asyncio.timeout(1), file_lock(path):  # free again
        pass


async def test_unusable_lock_path(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(CheckpointError, match="cannot open lock file"):
        async with file_lock(tmp_path / "file" / "lock"):
            pass
