"""Re-read of the exec plugin runner: a run its caller gives up on."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path

from gpudra_kube.exec_plugin import ExecPlugin
from gpudra_testing.waiting import until

# A plugin that hangs (an identity service that never answers), its pid written first.
HANGING = """
import os, pathlib, sys, time
(pathlib.Path(sys.argv[1]) / "pid").write_text(str(os.getpid()))
while True:
    time.sleep(1)
"""


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except (FileNotFoundError, ProcessLookupError):  # gone, or being reaped
        return False


async def test_a_cancelled_run_ends_the_plugin(tmp_path: Path) -> None:
    """The request that started the plugin is cancelled (a caller's deadline): the plugin is
    ended, not left running (each retry of a hanging plugin left one more process)."""
    (tmp_path / "plugin.py").write_text(HANGING, encoding="utf-8")
    plugin = ExecPlugin(
        api_version="client.authentication.k8s.io/v1",
        command=sys.executable,
        args=(str(tmp_path / "plugin.py"), str(tmp_path)),
        interactive_mode="Never",
    )
    run = asyncio.create_task(plugin.run())
    pid_file = tmp_path / "pid"
    await until(lambda: pid_file.exists() and pid_file.read_text(), "the plugin's start", 10)
    pid = int(pid_file.read_text())
    try:
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        await until(lambda: not running(pid), "the plugin's end", 10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
