from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gpudra_node_agent import main as agent_main
from gpudra_node_agent.settings import Settings
from gpudra_testing.statusz import free_port


async def test_bad_settings_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert await agent_main.main(["--poll-interval", "abc"]) == 2
    assert "--poll-interval: invalid value 'abc'" in capsys.readouterr().err


async def test_unknown_profile_exits_1_before_touching_nats() -> None:
    # Port 9 (discard) is never a NATS server: reaching it would hang, so exit 1 proves the order.
    argv = ["--simulator-profile", "dgx-nope", "--nats-url", "nats://127.0.0.1:9"]
    assert await asyncio.wait_for(agent_main.main(argv), timeout=10) == 1


async def test_bad_node_name_exits_2_before_touching_nvml_or_nats(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Port 9 (discard) is never a NATS server: reaching it would hang, so exit 2 proves the order.
    argv = ["--node-name", "GPU_Node", "--simulator-profile", "l4-pcie"]
    argv += ["--nats-url", "nats://127.0.0.1:9"]
    assert await asyncio.wait_for(agent_main.main(argv), timeout=10) == 2
    assert "node name" in capsys.readouterr().err


async def _status(port: int, path: str) -> str:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return "down"
    writer.write(f"GET {path} HTTP/1.0\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    return data.decode().split()[1]


async def test_serve_becomes_ready_and_stops(nats_url: str) -> None:
    port = free_port()
    settings = Settings(
        node_name="serve-test",
        nats_url=nats_url,
        simulator_profile="l4-pcie",
        poll_interval=0.05,
        health_host="127.0.0.1",
        health_port=port,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(agent_main.serve(settings, stop))
    for _ in range(100):
        if await _status(port, "/readyz") == "200":
            break
        await asyncio.sleep(0.05)
    assert await _status(port, "/readyz") == "200"
    assert await _status(port, "/healthz") == "200"
    stop.set()
    await asyncio.wait_for(task, timeout=10)
    assert await _status(port, "/healthz") == "down"


def test_process_exits_cleanly_on_sigterm(nats_url: str) -> None:
    root = Path(__file__).resolve().parents[3]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            str(root / p) for p in ("libs", "proto/gen", "services/node-agent")
        ),
        "GPUDRA_NODE_AGENT_SIMULATOR_PROFILE": "a100-mig",
        "GPUDRA_NATS_URL": nats_url,
        "NODE_NAME": "sigterm-test",
        "GPUDRA_HEALTH_PORT": "0",
    }
    proc = subprocess.Popen(
        [sys.executable, "-W", "ignore", "-m", "gpudra_node_agent"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "node-agent for sigterm-test started" in line:
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # SIGTERM once the agent says it runs (its handlers are installed by then): a fixed sleep
        # raced the interpreter's start on a loaded machine and killed it before the handlers.
        assert started.wait(timeout=60), "".join(lines)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        reader.join(timeout=15)
    finally:
        proc.kill()
    err = "".join(lines)
    assert proc.returncode == 0, err
    assert "SIMULATED" in err


async def test_stop_while_waiting_for_nats() -> None:
    # Nothing listens on port 9: connect() would wait forever; the stop event must win.
    settings = Settings(
        node_name="no-nats",
        nats_url="nats://127.0.0.1:9",
        simulator_profile="l4-pcie",
        health_port=0,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(agent_main.serve(settings, stop))
    await asyncio.sleep(0.3)
    assert not task.done()
    stop.set()
    await asyncio.wait_for(task, timeout=5)
