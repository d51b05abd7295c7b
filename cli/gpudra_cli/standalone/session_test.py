from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# What `gpudra up` does once the system is up, without the services: hold it until a signal, then
# stop in a worker thread (as `up` does), optionally getting the signal a second time meanwhile
# (Ctrl-C pressed twice, a supervisor's second SIGTERM); the stop must run to its end either way.
_HOLD = """\
import asyncio, os, signal, sys, time
from pathlib import Path
from gpudra_cli.standalone import session
from gpudra_cli.standalone.fleet import parse_fleet
from gpudra_cli.standalone.system import System

system = System(parse_fleet("l4-pcie=1"))  # a temp run directory, removed by stop()

def stop() -> None:
    if sys.argv[2] == "again":
        os.kill(os.getpid(), int(sys.argv[3]))
        time.sleep(1.0)
    system.stop()
    print("cleaned up", flush=True)

async def main() -> None:
    try:
        await session.hold(system, Path(sys.argv[1]))
    finally:
        await asyncio.to_thread(stop)

try:
    with session.interrupts():
        asyncio.run(main())
except KeyboardInterrupt:  # as gpudra_cli.main does
    sys.exit(130)
"""


@pytest.mark.parametrize("again", ["once", "again"])
@pytest.mark.parametrize(
    "sig",
    [
        pytest.param(signal.SIGINT, id="ctrl-c"),
        pytest.param(signal.SIGTERM, id="kill"),
        pytest.param(signal.SIGHUP, id="terminal-closed"),
    ],
)
def test_a_held_system_is_cleaned_up_on_each_stop_signal(
    tmp_path: Path, sig: signal.Signals, again: str
) -> None:
    state_file = tmp_path / "state.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(state_file), again, str(int(sig))],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # As a terminal starts it: a runner started under nohup (CI) passes SIGHUP on ignored.
        preexec_fn=_hangup_default,
    )
    try:
        deadline = time.monotonic() + 30
        while not state_file.exists():
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the state file was never written"
            time.sleep(0.05)
        proc.send_signal(sig)
        out = proc.communicate(timeout=30)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in ((0,) if again == "once" else (0, 130)), out
    assert "cleaned up" in out
    assert not state_file.exists()


# Before the hold, `up` is still starting services: they are stopped only if the signal raises.
def _hangup_default() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


_STARTING = """\
import os, signal, time
from gpudra_cli.standalone import session

signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as a terminal starts it (a test runner may not)

with session.interrupts():
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(10)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
print("restored" if signal.getsignal(signal.SIGHUP) == signal.SIG_DFL else "not restored")
"""


def test_a_hangup_while_starting_interrupts_like_ctrl_c() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-c", _STARTING], env=env, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout.split()) == (0, ["interrupted", "restored"]), done


_NOHUP = """\
import os, signal, time
from gpudra_cli.standalone import session

signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts it
with session.interrupts():
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.5)
        print("kept running", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
"""


def test_under_nohup_a_hangup_is_still_ignored() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-c", _NOHUP], env=env, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout.split()) == (0, ["kept", "running"]), done
