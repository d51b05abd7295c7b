from __future__ import annotations

import os
import subprocess
import sys

import nats
import pytest

from gpudra_standalone.nats_server import NatsServer


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
