"""The probe server: `GET /healthz` (the loop is turning) and `GET /readyz` (this node's inventory
is published and NATS is connected), 200 or 503, for the DaemonSet's probes on port `health`.

A deliberately tiny HTTP/1.0 responder on asyncio streams: probes need a status line, nothing more,
and a web framework would be the largest dependency of the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

Check = Callable[[], bool]


class HealthServer:
    def __init__(self, host: str, port: int, live: Check, ready: Check) -> None:
        self._host, self._port = host, port
        self._live, self._ready = live, ready
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound port (the kernel's choice when started with 0)."""
        if self._server is None or not self._server.sockets:
            return self._port
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
        if method != "GET":
            return 405
        checks = {"/healthz": self._live, "/readyz": self._ready}
        check = checks.get(path.split("?")[0])
        if check is None:
            return 404
        return 200 if check() else 503

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), timeout=5)
            parts = line.decode("latin-1").split()
            status = self.status_for(parts[0], parts[1]) if len(parts) >= 2 else 400
            reason = {
                200: "OK",
                400: "Bad Request",
                404: "Not Found",
                405: "Method Not Allowed",
            }.get(status, "Service Unavailable")
            body = f"{reason}\n".encode()
            writer.write(
                f"HTTP/1.0 {status} {reason}\r\nContent-Type: text/plain\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode() + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
