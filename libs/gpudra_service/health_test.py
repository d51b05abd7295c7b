from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping

import nats
import pytest

from gpudra_service.errors import SettingsError
from gpudra_service.health import HealthServer, alive_while_open


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


def _raises() -> dict[str, object]:
    raise RuntimeError("status broke")


def _split(response: str) -> tuple[str, dict[str, str], str]:
    head, _, body = response.partition("\r\n\r\n")
    status_line, *header_lines = head.split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return status_line.split()[1], headers, body


@pytest.mark.parametrize(
    ("request_line", "status", "code", "content_type", "body"),
    [
        pytest.param(
            b"GET /statusz HTTP/1.1",
            lambda: {"role": "leader", "epoch": 3},
            "200",
            "application/json",
            '{"epoch": 3, "role": "leader"}\n',
            id="json-sorted",
        ),
        pytest.param(
            b"HEAD /statusz?pretty HTTP/1.1",
            lambda: {"role": "standby", "holder": None, "pools": ["a"]},
            "200",
            "application/json",
            '{"holder": null, "pools": ["a"], "role": "standby"}\n',
            id="head-with-query",
        ),
        pytest.param(b"GET /statusz HTTP/1.1", None, "404", "text/plain", "not found\n", id="none"),
        pytest.param(
            b"PUT /statusz HTTP/1.1",
            lambda: {"role": "leader"},
            "405",
            "text/plain",
            "method not allowed\n",
            id="read-only",
        ),
        pytest.param(
            b"GET /statusz HTTP/1.1",
            _raises,
            "500",
            "text/plain",
            "internal server error\n",
            id="callable-raises",
        ),
        pytest.param(
            b"GET /statusz HTTP/1.1",
            lambda: {"role": object()},
            "500",
            "text/plain",
            "internal server error\n",
            id="not-json",
        ),
        pytest.param(
            b"GET /statusz HTTP/1.1",
            lambda: {"load": float("nan")},
            "500",
            "text/plain",
            "internal server error\n",
            id="nan-is-not-json",
        ),
        pytest.param(
            b"GET /readyz HTTP/1.1",
            lambda: {"role": "leader"},
            "200",
            "text/plain",
            "ok\n",
            id="probes-unchanged",
        ),
    ],
)
async def test_statusz(
    request_line: bytes,
    status: Callable[[], Mapping[str, object]] | None,
    code: str,
    content_type: str,
    body: str,
) -> None:
    server = await HealthServer("127.0.0.1", 0, ready=lambda: True, status=status).start()
    try:
        response = await _request(server.port, request_line + b"\r\nHost: x\r\n\r\n")
        got_code, headers, got_body = _split(response)
        assert (got_code, headers["Content-Type"], got_body) == (code, content_type, body)
        assert int(headers["Content-Length"]) == len(body.encode())
    finally:
        await server.stop()


async def test_statusz_is_read_at_each_request_and_failures_leave_the_probes_serving() -> None:
    state: dict[str, object] = {"role": "standby"}
    broken = False

    def status() -> dict[str, object]:
        if broken:
            raise RuntimeError("status broke")
        return state

    server = await HealthServer("127.0.0.1", 0, ready=lambda: True, status=status).start()
    try:
        assert _split(await _request(server.port, b"GET /statusz HTTP/1.1\r\n\r\n"))[2] == (
            '{"role": "standby"}\n'
        )
        state["role"] = "leader"
        assert json.loads(
            _split(await _request(server.port, b"GET /statusz HTTP/1.1\r\n\r\n"))[2]
        ) == {"role": "leader"}
        broken = True
        assert (await _request(server.port, b"GET /statusz HTTP/1.1\r\n\r\n")).startswith(
            "HTTP/1.1 500"
        )
        assert (await _request(server.port, b"GET /healthz HTTP/1.1\r\n\r\n")).startswith(
            "HTTP/1.1 200"
        )
    finally:
        await server.stop()


class _FakeClient:
    def __init__(self, closed: bool) -> None:
        self.is_closed = closed


@pytest.mark.parametrize(
    ("client", "also", "alive"),
    [
        pytest.param(None, True, True, id="still-connecting"),
        pytest.param(_FakeClient(False), True, True, id="open"),
        pytest.param(_FakeClient(True), True, False, id="closed-for-good"),
        pytest.param(_FakeClient(False), False, False, id="open-but-its-own-check-fails"),
    ],
)
def test_a_service_is_alive_while_its_nats_client_is_open(
    client: _FakeClient | None, also: bool, alive: bool
) -> None:
    assert alive_while_open(lambda: client, lambda: also)() is alive


async def test_a_closed_nats_client_fails_the_liveness_probe(nats_url: str) -> None:
    """nats-py never reopens a closed client: /healthz must say so, so the pod is restarted."""
    nc = await nats.connect(nats_url, name="health-test")
    live = alive_while_open(lambda: nc)
    server = await HealthServer("127.0.0.1", 0, ready=lambda: True, live=live).start()
    probe = b"GET /healthz HTTP/1.1\r\n\r\n"
    try:
        assert (await _request(server.port, probe)).startswith("HTTP/1.1 200")
        await nc.close()
        assert (await _request(server.port, probe)).startswith("HTTP/1.1 503")
    finally:
        await server.stop()
