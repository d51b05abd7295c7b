"""An exclusive lock on a file, taken without blocking the event loop, for serializing prepare
and unprepare across plugin instances (two pods of the DaemonSet run side by side during a rolling
update, sharing the plugin directory) and across coroutines of one instance.

The lock is `flock(LOCK_EX)` on a fresh open file description per holder, so holders in the same
process exclude each other as holders in different processes do. It is polled (non-blocking
attempts with a short sleep) rather than waited for in a thread, so a cancelled waiter leaves no
thread behind that would take the lock later and never release it.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from gpudra_kubelet_plugin.errors import CheckpointError

POLL_SECONDS = 0.005


@asynccontextmanager
async def file_lock(path: Path) -> AsyncIterator[None]:
    """Hold an exclusive lock on `path` (created if missing) for the `async with` body."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise CheckpointError(f"cannot open lock file {path}: {exc}") from exc
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(POLL_SECONDS)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock
