from __future__ import annotations

import asyncio

import pytest

from gpudra_kubelet_plugin.errors import SettingsError
from gpudra_kubelet_plugin.probes import ProbeServer


async def http_get(port: int, request: str) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request.encode())
    await writer.drain()
    response = await reader.read()
    writer.close()
    await writer.wait_closed()
    return response.decode().split("\r\n", 1)[0]


@pytest.mark.parametrize(
    ("request_line", "ready", "status"),
    [
        pytest.param("GET /healthz HTTP/1.1\r\n", False, "HTTP/1.0 200 OK", id="live"),
        pytest.param(
            "GET /readyz HTTP/1.1\r\n", False, "HTTP/1.0 503 Service Unavailable", id="not-ready"
        ),
        pytest.param("GET /readyz?verbose HTTP/1.1\r\n", True, "HTTP/1.0 200 OK", id="ready"),
        pytest.param("GET /metrics HTTP/1.1\r\n", True, "HTTP/1.0 404 Not Found", id="unknown"),
        pytest.param(
            "POST /readyz HTTP/1.1\r\n", True, "HTTP/1.0 405 Method Not Allowed", id="method"
        ),
        pytest.param("garbage\r\n", True, "HTTP/1.0 400 Bad Request", id="garbled"),
    ],
)
async def test_probes(request_line: str, ready: bool, status: str) -> None:
    server = ProbeServer("127.0.0.1", 0, lambda: True, lambda: ready)
    await server.start()
    try:
        assert server.port != 0
        assert await http_get(server.port, request_line) == status
    finally:
        await server.stop()


async def test_a_taken_port_is_a_clear_error() -> None:
    first = ProbeServer("127.0.0.1", 0, lambda: True, lambda: True)
    await first.start()
    try:
        with pytest.raises(SettingsError, match="cannot serve probes on 127.0.0.1:"):
            await ProbeServer("127.0.0.1", first.port, lambda: True, lambda: True).start()
    finally:
        await first.stop()
