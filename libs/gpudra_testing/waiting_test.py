from __future__ import annotations

import asyncio

import pytest

from gpudra_testing.waiting import until


async def test_until_returns_once_the_condition_holds() -> None:
    seen: list[int] = []
    asyncio.get_running_loop().call_later(0.05, seen.append, 1)
    await until(lambda: seen, "the callback")
    assert seen == [1]


async def test_until_names_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match="timed out after 0.05s waiting for nothing"):
        await until(lambda: False, "nothing", timeout=0.05)
