"""The DaemonSet's probe endpoint: `GET /healthz` answers 200 while the event loop turns, and
`GET /readyz` 200 once the kubelet has accepted the plugin and NATS is connected, else 503.

A minimal HTTP/1.0 responder on asyncio streams (probes read only the status line), so the plugin
needs no web framework. Unknown paths are 404, other methods 405, a garbled request 400.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from gpudra_kubelet_plugin.errors import SettingsError

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


class ProbeServer:
    """Serves `/healthz` and `/readyz` from two checks."""

    def __init__(
        self, host: str, port: int, live: Callable[[], bool], ready: Callable[[], bool]
    ) -> None:
        self.host, self.port = host, port
        self._checks = {"/healthz": live, "/readyz": ready}
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._serve, self.host, self.port)
        except OSError as exc:
            raise SettingsError(f"cannot serve probes on {self.host}:{self.port}: {exc}") from exc
        if self.port == 0:
            self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def status(self, request_line: str) -> int:
        parts = request_line.split()
        if len(parts) < 2:
            return 400
        if parts[0] != "GET":
            return 405
        check = self._checks.get(parts[1].split("?", 1)[0])
        if check is None:
            return 404
        return 200 if check() else 503

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), timeout=5)
            code = self.status(line.decode("latin-1"))
            reason = REASONS.get(code, "Service Unavailable")
            body = f"{reason}\n".encode()
            writer.write(
                f"HTTP/1.0 {code} {reason}\r\nContent-Type: text/plain\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode() + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
