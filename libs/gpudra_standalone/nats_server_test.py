from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import nats
import pytest

from gpudra_standalone.nats_server import NatsServer, NatsServerError


async def test_jetstream_publish_and_consume(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="FOUNDATION_T", subjects=["foundation.t.>"])
        ack = await js.publish("foundation.t.one", b"hello")
        assert ack.stream == "FOUNDATION_T"
        sub = await js.pull_subscribe("foundation.t.>", durable="t1")
        msgs = await sub.fetch(1, timeout=5)
        assert [m.data for m in msgs] == [b"hello"]
        await msgs[0].ack()
        await js.delete_stream("FOUNDATION_T")
    finally:
        await nc.drain()


async def test_store_survives_kill_and_restart() -> None:
    server = NatsServer().start()
    try:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="KEEP", subjects=["keep.>"])
        await js.publish("keep.a", b"1")
        await nc.close()
        server.kill()
        server.restart()
        nc = await nats.connect(server.url)
        info = await nc.jetstream().stream_info("KEEP")
        assert info.state.messages == 1
        await nc.close()
    finally:
        server.stop()


@contextlib.contextmanager
def _another_listener(port: int) -> Iterator[socket.socket]:
    """Another process's server taking `port` (as one could while ours is down)."""
    other = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers (Go's) do
        other.bind(("127.0.0.1", port))
        other.listen()
        yield other
    finally:
        other.close()


async def _stream_survived(server: NatsServer) -> None:
    nc = await nats.connect(server.url)
    try:
        info = await nc.jetstream().stream_info("KEEP")
        assert info.state.messages == 1
    finally:
        await nc.close()


async def _killed_with_a_stream(server: NatsServer) -> None:
    nc = await nats.connect(server.url)
    await nc.jetstream().add_stream(name="KEEP", subjects=["keep.>"])
    await nc.jetstream().publish("keep.a", b"1")
    await nc.close()
    server.kill()


async def test_restart_waits_for_its_port_taken_in_the_gap() -> None:
    # Clients reconnect to the same URL, so the port must stay: a restart waits for it.
    server = NatsServer().start()
    try:
        await _killed_with_a_stream(server)
        url = server.url
        with _another_listener(server.port) as other:

            def release_once_refused() -> None:
                deadline = time.monotonic() + 10
                while "address already in use" not in server.log and time.monotonic() < deadline:
                    time.sleep(0.01)
                other.close()

            releaser = threading.Thread(target=release_once_refused)
            releaser.start()
            try:
                server.restart(timeout=10)
            finally:
                releaser.join()
        assert "address already in use" in server.log  # the port was taken at the first try
        assert server.url == url
        await _stream_survived(server)
    finally:
        server.stop()


async def test_restart_says_when_its_port_stays_taken_and_keeps_the_store() -> None:
    server = NatsServer().start()
    try:
        await _killed_with_a_stream(server)
        taken = f"port {server.port}.*another process"
        with _another_listener(server.port), pytest.raises(NatsServerError, match=taken):
            server.restart(timeout=1)
        server.restart()
        await _stream_survived(server)
    finally:
        server.stop()


async def test_kill_keeps_the_port_from_others_until_restart() -> None:
    # The kernel hands a bound port to no one (an outgoing connection's local port, another
    # server's `-p -1`); clients are refused as if nothing were there.
    server = NatsServer().start()
    try:
        server.kill()
        other = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            with pytest.raises(OSError, match="in use"):
                other.bind(("127.0.0.1", server.port))
        finally:
            other.close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
        server.restart()
        nc = await nats.connect(server.url)
        await nc.close()
    finally:
        server.stop()


def test_failed_start_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    server = NatsServer(extra_args=("--no-such-flag",))
    with pytest.raises(Exception, match="did not start"):
        server.start(timeout=5)


# A child process that starts a server, then gets a Ctrl-C the way a terminal delivers it: SIGINT
# to its whole process group. It ignores SIGINT itself and says whether the server survived.
_CTRL_C = """\
import os, signal, sys, time
from gpudra_standalone.nats_server import NatsServer
signal.signal(signal.SIGINT, signal.SIG_IGN)
server = NatsServer().start()
os.killpg(os.getpgid(0), signal.SIGINT)
time.sleep(1.0)
print("alive" if server._proc is not None and server._proc.poll() is None else "dead")
server.stop()
"""


def test_ctrl_c_of_the_owner_does_not_reach_the_server() -> None:
    # The owner (`gpudra up`, the demo) stops its services before NATS; a server that took the
    # terminal's SIGINT itself would leave them draining against a dead connection.
    done = subprocess.run(
        [sys.executable, "-c", _CTRL_C],
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,  # the SIGINT stays in the child's own group, away from pytest
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    assert done.stdout.strip() == "alive", done.stderr
