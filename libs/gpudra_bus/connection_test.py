from __future__ import annotations

import asyncio
import socket

import nats.errors
import nats.js.errors
import pytest

from gpudra_bus.connection import Backoff, connect, disconnect, translate, wrong_revision
from gpudra_bus.errors import (
    BusPermanentError,
    BusRetryableError,
    BusTimeoutError,
    NotConnectedError,
    StreamConfigError,
)
from gpudra_testing import NatsServer

FAST = Backoff(initial=0.01, maximum=0.1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("attempt", "low", "high"),
    [
        pytest.param(0, 0.04, 0.06, id="first"),
        pytest.param(3, 0.32, 0.48, id="grows"),
        pytest.param(50, 4.0, 6.0, id="capped"),
        pytest.param(10**9, 4.0, 6.0, id="huge-attempt"),
    ],
)
def test_backoff_grows_and_caps(attempt: int, low: float, high: float) -> None:
    for _ in range(20):
        assert low <= Backoff().delay(attempt) <= high


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        pytest.param(nats.errors.TimeoutError(), BusTimeoutError, id="timeout"),
        pytest.param(nats.errors.NoRespondersError(), BusRetryableError, id="no-responders"),
        pytest.param(nats.errors.ConnectionClosedError(), NotConnectedError, id="closed"),
        pytest.param(ConnectionRefusedError(), BusRetryableError, id="refused"),
        pytest.param(nats.js.errors.ServiceUnavailableError(), BusRetryableError, id="js-503"),
        pytest.param(
            nats.js.errors.BadRequestError(code=400, description="x"),
            StreamConfigError,
            id="js-400",
        ),
        pytest.param(nats.errors.BadSubjectError(), BusPermanentError, id="bad-subject"),
        pytest.param(ValueError("x"), BusPermanentError, id="foreign"),
    ],
)
def test_translate(exc: BaseException, expected: type[Exception]) -> None:
    err = translate(exc, "doing x")
    assert type(err) is expected
    assert "doing x" in str(err)


@pytest.mark.parametrize(
    ("exc", "lost"),
    [
        pytest.param(nats.js.errors.KeyWrongLastSequenceError(), True, id="kv-wrong-last"),
        pytest.param(nats.js.errors.APIError(err_code=10071), True, id="js-10071"),
        pytest.param(nats.js.errors.APIError(err_code=10164), True, id="js-10164"),
        pytest.param(nats.js.errors.APIError(err_code=10058), False, id="js-other-code"),
        pytest.param(nats.js.errors.APIError(), False, id="js-no-code"),
        pytest.param(nats.js.errors.KeyNotFoundError(), False, id="kv-not-found"),
        pytest.param(nats.errors.TimeoutError(), False, id="timeout"),
        pytest.param(ValueError("10071"), False, id="foreign"),
    ],
)
def test_wrong_revision(exc: BaseException, lost: bool) -> None:
    assert wrong_revision(exc) is lost


async def test_connect_gives_up_at_the_deadline() -> None:
    url = f"nats://127.0.0.1:{_free_port()}"
    with pytest.raises(NotConnectedError):
        await connect(url, name="t", backoff=FAST, deadline=0.3)


async def test_connect_waits_for_a_late_server(fresh_nats_server: NatsServer) -> None:
    url = fresh_nats_server.url
    fresh_nats_server.kill()
    connecting = asyncio.create_task(connect(url, name="t", backoff=FAST, deadline=10))
    await asyncio.sleep(0.3)
    assert not connecting.done()
    await asyncio.to_thread(fresh_nats_server.restart)
    nc = await connecting
    try:
        assert nc.is_connected
    finally:
        await nc.close()


async def test_reconnects_after_an_outage_and_keeps_subscriptions(
    fresh_nats_server: NatsServer,
) -> None:
    reconnected = asyncio.Event()

    async def on_reconnect() -> None:
        reconnected.set()

    nc = await connect(fresh_nats_server.url, name="t", backoff=FAST, reconnected_cb=on_reconnect)
    try:
        sub = await nc.subscribe("gpudra.drift")
        await asyncio.to_thread(fresh_nats_server.kill)
        await asyncio.sleep(0.2)
        await asyncio.to_thread(fresh_nats_server.restart)
        await asyncio.wait_for(reconnected.wait(), 10)
        await nc.publish("gpudra.drift", b"after")
        msg = await sub.next_msg(timeout=5)
        assert msg.data == b"after"
    finally:
        await nc.close()


@pytest.mark.parametrize(
    "servers",
    [pytest.param([], id="empty-list"), pytest.param(" , ", id="blank-string")],
)
async def test_connect_rejects_empty_server_list(servers: str | list[str]) -> None:
    with pytest.raises(BusPermanentError):
        await connect(servers, name="t")


async def test_connect_accepts_a_comma_separated_list(nats_url: str) -> None:
    dead = f"nats://127.0.0.1:{_free_port()}"
    nc = await connect(f"{dead}, {nats_url}", name="t", backoff=FAST, deadline=10)
    try:
        assert nc.is_connected
    finally:
        await disconnect(nc)


async def test_disconnect_mid_outage_stops_cleanly(fresh_nats_server: NatsServer) -> None:
    nc = await connect(fresh_nats_server.url, name="t", backoff=FAST)
    await nc.subscribe("gpudra.drift")
    await asyncio.to_thread(fresh_nats_server.kill)
    await asyncio.sleep(0.1)
    await disconnect(nc)
    assert nc.is_closed
    await disconnect(nc)  # idempotent
