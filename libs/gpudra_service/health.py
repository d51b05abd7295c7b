"""The probe server every service runs: `GET /healthz` (alive) and `GET /readyz` (ready to work).

A deliberately tiny HTTP/1.1 responder on asyncio streams — probes need a status line, nothing
more. Promises: answers inside the event loop without blocking it; each path answers 200 while its
check returns True and 503 otherwise; other paths 404, other methods 405, a malformed request 400;
the connection is closed after one response. Port 0 binds an ephemeral port, readable from `port`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from gpudra_service.errors import SettingsError

Check = Callable[[], bool]
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}


def _always() -> bool:
    return True


class HealthServer:
    def __init__(self, host: str, port: int, ready: Check, live: Check = _always) -> None:
        self._host, self._port = host, port
        self._checks = {"/healthz": live, "/readyz": ready}
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
        check = self._checks.get(path.split("?", 1)[0])
        if check is None:
            return 404
        if method not in ("GET", "HEAD"):
            return 405
        return 200 if check() else 503

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5.0)
            parts = line.decode("latin-1").split()
            status = self.status_for(parts[0], parts[1]) if len(parts) == 3 else 400
            # Drain the headers so the client sees a clean response.
            while (await asyncio.wait_for(reader.readline(), 5.0)) not in (b"\r\n", b"\n", b""):
                pass
            body = f"{_REASONS[status].lower()}\n".encode()
            writer.write(
                f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: text/plain\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
