"""The probe server every service runs: `GET /healthz` (alive), `GET /readyz` (ready to work) and,
for a service that passes a `status` callable, `GET /statusz` (what the replica is doing, as JSON).

A deliberately tiny HTTP/1.1 responder on asyncio streams — probes need a status line, nothing
more. Promises: answers inside the event loop without blocking it; each probe path answers 200
while its check returns True and 503 otherwise; `/statusz` answers 200 with the `status` mapping
as a JSON object (keys sorted), or 500 when the callable raises or returns what JSON cannot encode;
other paths 404 (`/statusz` too without a `status`), other methods 405, a malformed request 400;
the connection is closed after one response. Port 0 binds an ephemeral port, readable from `port`.

Why `/statusz` with a JSON body rather than a probe-style path (say `/leaderz`, 200 only on the
leader): a leader/standby pair is two healthy replicas, and a path that answers 503 on a healthy
standby reads as a failure to anything that treats non-2xx as down (monitors, an operator's
`curl -f`, a probe wired to it by mistake would even restart or unroute the standby). `/statusz`
always answers 200 while the process serves, and says what it is (`role`, ...) in fields that
`curl | jq`, `kubectl get --raw .../pods/<pod>:8080/proxy/statusz` and scrapers read alike;
Kubernetes' own components serve read-only status under the same name (z-pages, KEP-4827). The
probe paths keep their exact meaning and plain-text bodies.

`alive_while_open` is the liveness every service on NATS uses: a client closed for good is dead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from gpudra_service.errors import SettingsError

Check = Callable[[], bool]
# What `/statusz` serves: a JSON object (values JSON can encode: str, int, float, bool, None, lists
# and mappings of them).
Status = Callable[[], Mapping[str, object]]
STATUS_PATH = "/statusz"
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
log = logging.getLogger(__name__)


def _always() -> bool:
    return True


class _Client(Protocol):
    @property
    def is_closed(self) -> bool: ...


def alive_while_open(client: Callable[[], _Client | None], also: Check = _always) -> Check:
    """A liveness check for a service on NATS: False once its client (`client()`, None while
    still connecting) is closed for good, and while `also` fails. nats-py never reopens a closed
    client (the server dropped it for a protocol error, or its reconnects ran out): without this
    the service would answer its probes for ever while doing nothing; a restart brings it back."""

    def check() -> bool:
        nc = client()
        return (nc is None or not nc.is_closed) and also()

    return check


class HealthServer:
    def __init__(
        self,
        host: str,
        port: int,
        ready: Check,
        live: Check = _always,
        status: Status | None = None,
    ) -> None:
        self._host, self._port = host, port
        self._checks = {"/healthz": live, "/readyz": ready}
        self._status = status
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound port (the kernel's choice when started with 0)."""
        if self._server is None or not self._server.sockets:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> HealthServer:
        """Bind and serve; a port that cannot be bound (taken, privileged) is a `SettingsError`
        naming it, not a traceback."""
        try:
            self._server = await asyncio.start_server(self._handle, self._host, self._port)
        except OSError as exc:
            raise SettingsError(f"cannot serve probes on {self._host}:{self._port}: {exc}") from exc
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def status_for(self, method: str, path: str) -> int:
        """The status code a request gets (see `respond`)."""
        return self.respond(method, path)[0]

    def respond(self, method: str, path: str) -> tuple[int, str, bytes]:
        """Status code, content type and body for one request."""
        path = path.split("?", 1)[0]
        check = self._checks.get(path)
        status = self._status if path == STATUS_PATH else None
        if check is None and status is None:
            return _plain(404)
        if method not in ("GET", "HEAD"):
            return _plain(405)
        if status is not None:
            return _statusz(status)
        return _plain(200 if check is not None and check() else 503)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5.0)
            parts = line.decode("latin-1").split()
            status, content_type, body = (
                self.respond(parts[0], parts[1]) if len(parts) == 3 else _plain(400)
            )
            # Drain the headers so the client sees a clean response.
            while (await asyncio.wait_for(reader.readline(), 5.0)) not in (b"\r\n", b"\n", b""):
                pass
            writer.write(
                f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


def _plain(status: int) -> tuple[int, str, bytes]:
    return status, "text/plain", f"{_REASONS[status].lower()}\n".encode()


def _statusz(status: Status) -> tuple[int, str, bytes]:
    try:
        body = json.dumps(dict(status()), sort_keys=True, allow_nan=False)
    # A broken status callable must not take the probes' server down with it: log it, answer 500.
    except Exception:
        log.exception("the %s callable failed", STATUS_PATH)
        return _plain(500)
    return 200, "application/json", f"{body}\n".encode()
