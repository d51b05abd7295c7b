from __future__ import annotations

import asyncio

import pytest

from gpudra_service.errors import SettingsError
from gpudra_service.health import HealthServer


async def _request(port: int, raw: bytes) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    return data.decode()


@pytest.mark.parametrize(
    ("request_line", "ready", "status"),
    [
        pytest.param(b"GET /healthz HTTP/1.1", False, "200", id="alive-while-not-ready"),
        pytest.param(b"GET /readyz HTTP/1.1", False, "503", id="not-ready"),
        pytest.param(b"GET /readyz?verbose HTTP/1.1", True, "200", id="ready-with-query"),
        pytest.param(b"GET /metrics HTTP/1.1", True, "404", id="unknown-path"),
        pytest.param(b"POST /readyz HTTP/1.1", True, "405", id="wrong-method"),
        pytest.param(b"garbage", True, "400", id="malformed"),
    ],
)
async def test_probe_answers(request_line: bytes, ready: bool, status: str) -> None:
    server = await HealthServer("127.0.0.1", 0, ready=lambda: ready).start()
    try:
        response = await _request(server.port, request_line + b"\r\nHost: x\r\n\r\n")
        assert response.split()[1] == status
    finally:
        await server.stop()


async def test_liveness_check_is_used() -> None:
    server = await HealthServer("127.0.0.1", 0, ready=lambda: True, live=lambda: False).start()
    try:
        response = await _request(server.port, b"GET /healthz HTTP/1.1\r\n\r\n")
        assert response.startswith("HTTP/1.1 503")
    finally:
        await server.stop()


async def test_taken_port_is_a_settings_error() -> None:
    first = await HealthServer("127.0.0.1", 0, ready=lambda: True).start()
    try:
        with pytest.raises(SettingsError, match=f"cannot serve probes on 127.0.0.1:{first.port}"):
            await HealthServer("127.0.0.1", first.port, ready=lambda: True).start()
    finally:
        await first.stop()
