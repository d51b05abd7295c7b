"""Children that die with their owner, even when the owner is killed with SIGKILL.

`gpudra up` and the demo stop their services in order on SIGTERM, SIGINT and SIGHUP; a SIGKILL
(the OOM killer, `kill -9`) gives them no chance, and the services and NATS server they started
ran on as orphans, holding ports and a second set of nodes for the next `up`. On Linux the kernel
can signal a process when its parent dies (`prctl(PR_SET_PDEATHSIG)`), a setting kept across
`exec`. `bound_to_owner(argv)` is the command line that sets it (SIGTERM, so the child still shuts
down cleanly), checks that the owner is still there (it may have died before the setting took
effect; the child then exits at once) and execs `argv`. Elsewhere it is `argv` unchanged.

The kernel sends that signal when the *thread* that forked the child ends, not only the process
(the CLI starts services from worker threads): `popen` therefore forks every bound child from one
thread that lives as long as the process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

# Runs in the new process, single-threaded, before `argv` replaces it: no imports but the
# standard library, nothing that could fail quietly. Exit 70 (EX_SOFTWARE) when prctl fails,
# 0 when the owner is already gone (nothing to run for).
_TRAMPOLINE = """
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(1, int(signal.SIGTERM), 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
    sys.stderr.write("prctl(PR_SET_PDEATHSIG) failed: errno %d\\n" % ctypes.get_errno())
    sys.exit(70)
if os.getppid() != int(sys.argv[1]):
    sys.exit(0)
os.execvp(sys.argv[2], sys.argv[2:])
"""


def bound_to_owner(argv: list[str], python: str = sys.executable) -> list[str]:
    """`argv`, started so that it gets SIGTERM when this process dies (Linux; else unchanged)."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    return [python, "-c", _TRAMPOLINE, str(os.getpid()), *argv]


# One thread forks every bound child; it ends only with the process.
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpudra-lifeline")


def popen(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(bound_to_owner(argv), **kwargs)`, forked by the lifeline thread."""
    bound = bound_to_owner(argv, kwargs.pop("python", sys.executable))

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(bound, **kwargs)

    return _spawner.submit(start).result()
