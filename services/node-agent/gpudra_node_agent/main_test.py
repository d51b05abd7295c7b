from __future__ import annotations

import asyncio

import pytest

from gpudra_node_agent import main as agent_main
from gpudra_node_agent.settings import Settings


async def test_bad_settings_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert await agent_main.main(["--poll-interval", "abc"]) == 2
    assert "poll-interval: 'abc' is not a float" in capsys.readouterr().err


async def test_unknown_profile_exits_1_before_touching_nats() -> None:
    # Port 9 (discard) is never a NATS server: reaching it would hang, so exit 1 proves the order.
    argv = ["--simulator-profile", "dgx-nope", "--nats-url", "nats://127.0.0.1:9"]
    assert await asyncio.wait_for(agent_main.main(argv), timeout=10) == 1


async def test_serve_runs_and_stops(nats_url: str) -> None:
    settings = Settings(
        node_name="serve-test", nats_url=nats_url, simulator_profile="l4-pcie", poll_interval=0.05
    )
    stop = asyncio.Event()
    task = asyncio.create_task(agent_main.serve(settings, stop))
    await asyncio.sleep(0.5)
    assert not task.done()
    stop.set()
    await asyncio.wait_for(task, timeout=10)


def test_nats_options() -> None:
    assert agent_main.nats_options(Settings(nats_creds="/etc/nats/agent.creds")) == {
        "user_credentials": "/etc/nats/agent.creds"
    }
    assert agent_main.nats_options(Settings()) == {}
