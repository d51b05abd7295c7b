"""gRPC servers on Unix sockets, as the kubelet expects them: parent directories created, a stale
socket file replaced, the socket made private to its owner (mode 0600) before anyone is told of it.

A path occupied by something other than a socket is a `SocketError` (never silently deleted).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import grpc

from gpudra_kubelet_plugin.errors import SocketError

MAX_SOCKET_PATH = 107  # sun_path is 108 bytes on Linux, NUL included


def clear_socket_path(path: Path) -> None:
    """Make `path` free for a new socket: create its directory, remove a stale socket file."""
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise SocketError(f"socket path {path} is longer than {MAX_SOCKET_PATH} bytes")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise SocketError(f"cannot use socket path {path}: {exc}") from exc
    if not stat.S_ISSOCK(mode):
        raise SocketError(f"{path} exists and is not a socket; refusing to replace it")
    path.unlink(missing_ok=True)


async def start_unix_server(server: grpc.aio.Server, path: Path) -> None:
    """Bind `server` to `path` (replacing a stale socket), start it, and chmod the socket 0600."""
    clear_socket_path(path)
    try:
        # grpc binds with the process umask; tighten the window by binding under umask 077.
        old_umask = os.umask(0o077)
        try:
            bound = server.add_insecure_port(f"unix:{path}")
        finally:
            os.umask(old_umask)
        if bound == 0:
            raise SocketError(f"cannot bind gRPC server to {path}")
        await server.start()
        os.chmod(path, 0o600)
    except (OSError, RuntimeError) as exc:
        raise SocketError(f"cannot serve on {path}: {exc}") from exc


def remove_socket(path: Path) -> None:
    """Remove our socket file on shutdown (a missing one is fine)."""
    try:
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise SocketError(f"cannot remove socket {path}: {exc}") from exc
