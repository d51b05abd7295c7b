"""`serve` and `main` use the shared settings: NATS TLS files, stream replicas and the probe port
reach what they configure, and bad settings exit 2 with one line."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from typing import Any

import pytest

from gpudra_allocator.errors import SettingsError
from gpudra_allocator.main import main, serve
from gpudra_allocator.settings import Settings
from gpudra_bus import BusError
from gpudra_standalone.nats_server import NatsServer


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        pytest.param(
            {"nats_tls_ca": "/nonexistent/ca.crt"}, SettingsError, "NATS TLS files", id="tls-files"
        ),
        # A single server cannot hold 3 replicas: the setting reached stream creation.
        pytest.param({"stream_replicas": 3}, BusError, "(?i)replicas", id="stream-replicas"),
    ],
)
async def test_serve_passes_common_settings_on(
    fresh_nats_server: NatsServer, changes: dict[str, Any], error: type[Exception], message: str
) -> None:
    settings = Settings(nats_url=fresh_nats_server.url, health_host="127.0.0.1", health_port=0)
    with pytest.raises(error, match=message):
        # Ignoring the setting would start serving: the timeout turns that into a failure.
        await asyncio.wait_for(serve(dataclasses.replace(settings, **changes), asyncio.Event()), 10)


async def test_a_taken_probe_port_is_a_settings_error(fresh_nats_server: NatsServer) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        settings = Settings(
            nats_url=fresh_nats_server.url,
            health_host="127.0.0.1",
            health_port=taken.getsockname()[1],
        )
        with pytest.raises(SettingsError, match="cannot serve probes on 127.0.0.1:"):
            await asyncio.wait_for(serve(settings, asyncio.Event()), 10)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--policy", "best"], "policy must be one of", id="load"),
        pytest.param(
            ["--nats-url", "nats://127.0.0.1:1", "--device-classes", "/nonexistent/classes.yaml"],
            "device classes /nonexistent/classes.yaml",
            id="device-classes",
        ),
        pytest.param(
            ["--nats-url", "nats://127.0.0.1:1", "--nats-tls-ca", "/nonexistent/ca.crt"],
            "NATS TLS files",
            id="start",
        ),
    ],
)
async def test_bad_settings_exit_2(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A setting ignored while starting would leave main waiting for NATS: fail instead.
    assert await asyncio.wait_for(main(argv), 10) == 2
    assert message in capsys.readouterr().err + caplog.text
