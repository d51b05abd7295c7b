from __future__ import annotations

import asyncio

import pytest

from gpudra_node_agent.health import HealthServer


async def _get(port: int, request: bytes) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    return data.decode()


@pytest.mark.parametrize(
    ("request_line", "live", "ready", "status"),
    [
        pytest.param(b"GET /healthz HTTP/1.1\r\n\r\n", True, False, "200", id="live"),
        pytest.param(b"GET /healthz HTTP/1.1\r\n\r\n", False, True, "503", id="stuck-loop"),
        pytest.param(b"GET /readyz HTTP/1.1\r\n\r\n", True, True, "200", id="ready"),
        pytest.param(b"GET /readyz HTTP/1.1\r\n\r\n", True, False, "503", id="not-ready"),
        pytest.param(b"GET /metrics HTTP/1.1\r\n\r\n", True, True, "404", id="unknown-path"),
        pytest.param(b"POST /readyz HTTP/1.1\r\n\r\n", True, True, "405", id="wrong-method"),
        pytest.param(b"\r\n", True, True, "400", id="garbage"),
    ],
)
async def test_probe_answers(request_line: bytes, live: bool, ready: bool, status: str) -> None:
    server = await HealthServer("127.0.0.1", 0, lambda: live, lambda: ready).start()
    try:
        answer = await _get(server.port, request_line)
    finally:
        await server.stop()
    assert answer.split()[1] == status
