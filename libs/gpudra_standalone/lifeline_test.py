from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpudra_standalone.lifeline import bound_to_owner

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")

# An owner like `gpudra up`: a service child and a NATS server, started from a worker thread that
# has ended by the time the owner is killed (the kernel's parent-death signal follows the thread
# that forked, so the children must not die with that thread, only with the process).
_OWNER = """
import sys, threading, time
from pathlib import Path
from gpudra_standalone import NatsServer, ServiceSpec, Supervisor

tmp = Path(sys.argv[1])
started = {}

def start():
    started["nats"] = NatsServer().start()
    sup = Supervisor(tmp / "logs")
    started["child"] = sup.start(ServiceSpec("svc", "svc", env={"PYTHONPATH": str(tmp)}))

worker = threading.Thread(target=start)
worker.start()
worker.join()
time.sleep(0.5)
print(started["nats"]._proc.pid, started["child"].proc.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too (the owner that would reap it is gone, init reaps it soon).
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_children_of_an_owner_killed_outright_stop(tmp_path: Path) -> None:
    (tmp_path / "svc.py").write_text(
        "import time\nprint('svc ready', flush=True)\nwhile True: time.sleep(0.05)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        nats_pid, child_pid = (int(p) for p in line.split())
        # the starting thread's end kills nothing
        assert _alive(nats_pid)
        assert _alive(child_pid)
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        deadline = time.monotonic() + 10.0
        while (_alive(nats_pid) or _alive(child_pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(nats_pid), "the NATS server outlived its owner"
        assert not _alive(child_pid), "the service outlived its owner"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def test_a_child_whose_owner_is_already_gone_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    argv = bound_to_owner([sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    argv[3] = "1"  # an owner pid that is not its parent: as if the owner died before prctl
    done = subprocess.run(argv, timeout=30)
    assert done.returncode == 0
    assert not marker.exists()


def test_the_bound_command_runs_the_command(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    done = subprocess.run(
        bound_to_owner([sys.executable, "-c", f"open({str(marker)!r}, 'w')"]), timeout=30
    )
    assert done.returncode == 0
    assert marker.exists()
