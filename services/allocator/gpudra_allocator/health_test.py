from __future__ import annotations

import asyncio

import pytest

from gpudra_allocator.health import HealthServer


async def get(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    return data


@pytest.mark.parametrize(
    ("request_line", "ready", "status"),
    [
        pytest.param(b"GET /healthz HTTP/1.1", False, b"200", id="alive-while-not-ready"),
        pytest.param(b"GET /readyz HTTP/1.1", False, b"503", id="not-ready"),
        pytest.param(b"GET /readyz HTTP/1.1", True, b"200", id="ready"),
        pytest.param(b"GET /metrics HTTP/1.1", True, b"404", id="unknown-path"),
        pytest.param(b"POST /readyz HTTP/1.1", True, b"400", id="wrong-method"),
        pytest.param(b"garbage", True, b"400", id="malformed"),
    ],
)
async def test_health(request_line: bytes, ready: bool, status: bytes) -> None:
    server = await HealthServer("127.0.0.1", 0, lambda: ready).start()
    try:
        response = await get(server.port, request_line + b"\r\nHost: x\r\n\r\n")
    finally:
        await server.stop()
    assert response.split(b" ")[1] == status
