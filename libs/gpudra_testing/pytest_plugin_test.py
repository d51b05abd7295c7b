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


def test_a_hung_async_test_fails_with_where_it_waited_and_the_file_goes_on(
    tmp_path: Path,
) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["gpudra_testing.pytest_plugin"]\n')
    (tmp_path / "hung_test.py").write_text(HUNG)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "GPUDRA_TEST_HANG_AFTER": "1",
    }
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "asyncio_mode=auto"),
            *("--rootdir", str(tmp_path), str(tmp_path / "hung_test.py")),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "1 failed, 1 passed" in out, out
    assert "test still running after 1 s" in out, out
    assert "in test_waits_for_ever" in out, out
