"""The control-plane services use the shared settings they are given: NATS TLS files, stream
replicas and the probe port reach what they configure, and bad settings exit 2 with one line.

One table over inventory, allocator and claim-writer (their `serve`/`main` share the skeleton in
`gpudra_service`), against a real nats-server. Each `serve` is bounded by a timeout: a setting that
was ignored would let the service start serving, which the timeout turns into a failure.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from types import ModuleType
from typing import Any

import pytest

import gpudra_allocator.main
import gpudra_allocator.settings
import gpudra_claim_writer.main
import gpudra_claim_writer.settings
import gpudra_inventory.main
import gpudra_inventory.settings
from gpudra_bus import BusError
from gpudra_service import SettingsError
from gpudra_standalone.nats_server import NatsServer

SERVICES = ["gpudra_inventory", "gpudra_allocator", "gpudra_claim_writer"]
# One settings error per service that only its own loader can find.
OWN_BAD_SETTINGS = {
    "gpudra_inventory": (["--mode", "cloud"], "mode must be one of"),
    "gpudra_allocator": (["--policy", "best"], "policy must be one of"),
    "gpudra_claim_writer": (["--mode", "cloud"], "mode must be one of"),
}


MODULES: dict[str, tuple[ModuleType, Any]] = {
    "gpudra_inventory": (gpudra_inventory.main, gpudra_inventory.settings.Settings),
    "gpudra_allocator": (gpudra_allocator.main, gpudra_allocator.settings.Settings),
    "gpudra_claim_writer": (gpudra_claim_writer.main, gpudra_claim_writer.settings.Settings),
}


def _modules(package: str) -> tuple[ModuleType, Any]:
    return MODULES[package]


@pytest.mark.parametrize("package", SERVICES)
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
    fresh_nats_server: NatsServer,
    package: str,
    changes: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    main, settings_cls = _modules(package)
    settings = settings_cls(nats_url=fresh_nats_server.url, health_host="127.0.0.1", health_port=0)
    with pytest.raises(error, match=message):
        await asyncio.wait_for(
            main.serve(dataclasses.replace(settings, **changes), asyncio.Event()), 10
        )


@pytest.mark.parametrize("package", SERVICES)
async def test_a_taken_probe_port_is_a_settings_error(
    fresh_nats_server: NatsServer, package: str
) -> None:
    main, settings_cls = _modules(package)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        settings = settings_cls(
            nats_url=fresh_nats_server.url,
            health_host="127.0.0.1",
            health_port=taken.getsockname()[1],
        )
        with pytest.raises(SettingsError, match="cannot serve probes on 127.0.0.1:"):
            await asyncio.wait_for(main.serve(settings, asyncio.Event()), 10)


@pytest.mark.parametrize("package", SERVICES)
@pytest.mark.parametrize("kind", ["own-load-check", "tls-at-start"])
async def test_bad_settings_exit_2(
    package: str,
    kind: str,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    main, _ = _modules(package)
    if kind == "own-load-check":
        argv, message = OWN_BAD_SETTINGS[package]
    else:
        argv = ["--nats-url", "nats://127.0.0.1:1", "--nats-tls-ca", "/nonexistent/ca.crt"]
        message = "NATS TLS files"
    # A setting ignored while starting would leave main waiting for NATS: fail instead.
    assert await asyncio.wait_for(main.main(argv), 10) == 2
    assert message in capsys.readouterr().err + caplog.text


async def test_allocator_device_classes_file_is_checked_at_start(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    main, _ = _modules("gpudra_allocator")
    argv = ["--nats-url", "nats://127.0.0.1:1", "--device-classes", "/nonexistent/classes.yaml"]
    assert await asyncio.wait_for(main.main(argv), 10) == 2
    assert "device classes /nonexistent/classes.yaml" in capsys.readouterr().err + caplog.text


@pytest.mark.parametrize("package", SERVICES)
async def test_stop_while_waiting_for_nats_returns(package: str) -> None:
    """Connecting waits for NATS without bound; a stop (SIGTERM) must still end `serve`."""
    main, settings_cls = _modules(package)
    settings = settings_cls(nats_url="nats://127.0.0.1:1", health_host="127.0.0.1", health_port=0)
    stop = asyncio.Event()
    serving = asyncio.create_task(main.serve(settings, stop))
    await asyncio.sleep(0.5)
    assert not serving.done(), "serve must keep waiting for NATS until it is stopped"
    stop.set()
    await asyncio.wait_for(serving, 10)
