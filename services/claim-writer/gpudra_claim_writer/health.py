"""A minimal HTTP health server: `GET /healthz` (alive) and `GET /readyz` (ready to work).

Promises: answers within the event loop without blocking it; `/readyz` is 200 only while the
`ready` callable returns True (503 otherwise); anything else is 404; a malformed request gets
400 and the connection is closed. Port 0 binds an ephemeral port, readable from `port`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}


class HealthServer:
    def __init__(self, host: str, port: int, ready: Callable[[], bool]) -> None:
        self._host = host
        self._port = port
        self._ready = ready
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        assert self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> HealthServer:
        self._server = await asyncio.start_server(self._handle, self._host, self._port)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def status_for(self, method: str, path: str) -> int:
        if method not in ("GET", "HEAD"):
            return 400
        path = path.split("?", 1)[0]
        if path == "/healthz":
            return 200
        if path == "/readyz":
            return 200 if self._ready() else 503
        return 404

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
