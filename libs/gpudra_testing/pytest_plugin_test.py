"""The plugin's hang watchdog, seen from a child pytest run as CI runs a test file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HUNG = """\
import asyncio


async def test_waits_for_ever() -> None:
    await asyncio.Event().wait()


async def test_after_it_runs() -> None:
    await asyncio.sleep(0)
"""


LEFT_RUNNING = """\
import asyncio

KEEP = set()


async def recreate_consumer() -> None:  # as nats-py names its fire-and-forget request
    await asyncio.sleep(0.5)


async def something_else() -> None:
    await asyncio.sleep(1000)


async def test_leaves_a_bounded_nats_py_request() -> None:
    KEEP.add(asyncio.create_task(recreate_consumer()))


async def test_leaves_a_task_for_ever() -> None:
    KEEP.add(asyncio.create_task(something_else()))
"""


def _child_pytest(tmp_path: Path, source: str, **env: str) -> str:
    """Run `source` as a test file in a child pytest with this plugin; its output, after
    checking that it failed."""
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["gpudra_testing.pytest_plugin"]\n')
    (tmp_path / "child_test.py").write_text(source)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "asyncio_mode=auto"),
            *("--rootdir", str(tmp_path), str(tmp_path / "child_test.py")),
        ],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    return out


def test_a_hung_async_test_fails_with_where_it_waited_and_the_file_goes_on(
    tmp_path: Path,
) -> None:
    out = _child_pytest(tmp_path, HUNG, GPUDRA_TEST_HANG_AFTER="1")
    assert "1 failed, 1 passed" in out, out
    assert "test still running after 1 s" in out, out
    assert "in test_waits_for_ever" in out, out


def test_a_task_left_running_fails_its_test_unless_it_is_nats_pys_bounded_request(
    tmp_path: Path,
) -> None:
    """nats-py re-creates a lost ordered consumer in a task it keeps no handle to (a watch
    across a NATS restart); the leak check waits that request out instead of failing the test."""
    out = _child_pytest(tmp_path, LEFT_RUNNING)
    assert "2 passed, 1 error" in out, out  # the check fails the second test's teardown
    assert "ERROR child_test.py::test_leaves_a_task_for_ever" in out, out
    assert "something_else" in out, out
