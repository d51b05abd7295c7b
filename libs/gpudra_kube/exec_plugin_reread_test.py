"""Re-read of the exec plugin runner: a run its caller gives up on, and one that never ends."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sys
import time
import warnings
from pathlib import Path

import pytest

from gpudra_kube import exec_plugin
from gpudra_kube.exec_plugin import ExecPlugin, ExecPluginError
from gpudra_testing.waiting import until

# A plugin that hangs (an identity service that never answers), its pid written first.
HANGING = """
import os, pathlib, sys, time
(pathlib.Path(sys.argv[1]) / "pid").write_text(str(os.getpid()))
while True:
    time.sleep(1)
"""


def python_plugin(folder: Path, script: str) -> ExecPlugin:
    """An exec plugin running `script` (written to `folder`) with `folder` as its argument."""
    (folder / "plugin.py").write_text(script, encoding="utf-8")
    return ExecPlugin(
        api_version="client.authentication.k8s.io/v1",
        command=sys.executable,
        args=(str(folder / "plugin.py"), str(folder)),
        interactive_mode="Never",
    )


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except (FileNotFoundError, ProcessLookupError):  # gone, or being reaped
        return False


async def test_a_cancelled_run_ends_the_plugin(tmp_path: Path) -> None:
    """The request that started the plugin is cancelled (a caller's deadline): the plugin is
    ended, not left running (each retry of a hanging plugin left one more process)."""
    plugin = python_plugin(tmp_path, HANGING)
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


# A hanging plugin that started a helper of its own (a wrapper script's real plugin), both pids
# written first.
HANGING_WITH_A_CHILD = """
import os, pathlib, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
(pathlib.Path(sys.argv[1]) / "pid").write_text(f"{os.getpid()} {child.pid}")
while True:
    time.sleep(1)
"""


async def test_a_run_that_does_not_end_is_stopped_at_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin that never answers (an identity service that hangs): the run fails after
    `RUN_TIMEOUT` with an error naming the executable, and the plugin and what it started are
    ended. Without a bound the run waited for ever, and every request waited on it."""
    # Long enough for the plugin to start its helper and write the pids on a loaded machine.
    monkeypatch.setattr(exec_plugin, "RUN_TIMEOUT", 5.0)
    plugin = python_plugin(tmp_path, HANGING_WITH_A_CHILD)
    pid_file = tmp_path / "pid"
    try:
        with pytest.raises(
            ExecPluginError, match=rf"exec: executable {sys.executable} did not answer within 5 s"
        ):
            await plugin.run()
        pids = [int(p) for p in pid_file.read_text().split()]
        assert len(pids) == 2
        await until(lambda: not any(running(p) for p in pids), "the plugin's end", 10)
    finally:
        for pid in pid_file.read_text().split() if pid_file.exists() else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), 9)


def test_a_cancelled_run_has_reaped_the_plugin_when_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A cancelled run returns once the killed plugin has been reaped, so that nothing of it is
    left to an event loop that may close next (a test's, or a service's at shutdown). It
    returned at once: the plugin's exit reached a closed loop ("Loop ... that handles pid ... is
    closed"), and its subprocess transport, never finished, raised "Event loop is closed" from
    `__del__` when it was collected whenever its pipes were still open: an unraisable exception,
    which pytest pins on whichever test runs at that moment."""
    plugin = python_plugin(tmp_path, HANGING)
    unraisable: list[str] = []
    monkeypatch.setattr(
        sys, "unraisablehook", lambda u: unraisable.append(f"{u.exc_type.__name__}: {u.exc_value}")
    )
    pid_file = tmp_path / "pid"

    async def cancelled_run() -> None:
        run = asyncio.create_task(plugin.run())
        await until(lambda: pid_file.exists() and pid_file.read_text(), "the plugin's start", 10)
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run

    loop = asyncio.new_event_loop()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            loop.run_until_complete(cancelled_run())
            loop.close()
            time.sleep(0.5)  # a late exit would reach the closed loop by now
            gc.collect()
    finally:
        loop.close()
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), 9)
    assert [r.getMessage() for r in caplog.records if "handles pid" in r.getMessage()] == []
    assert [str(w.message) for w in caught if "SubprocessTransport" in str(w.message)] == []
    assert unraisable == []
