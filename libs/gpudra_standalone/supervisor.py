"""Runs gpudra's services as separate processes on one machine (standalone mode, demo, tests).

Promises: every child gets its own log file (stdout and stderr, line-buffered) under `log_dir`;
`start` returns once the child printed its readiness line or fails with the last lines of its log;
`stop_all` stops children in reverse start order with SIGTERM, then SIGKILL after a grace period, so
nothing outlives the supervisor. A child that exits early is reported by `exited()` with its code.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from gpudra_standalone.errors import StandaloneError

READY = re.compile(r"\bready\b")


@dataclass(frozen=True)
class ServiceSpec:
    """One process: `python -m <module> <args>` with extra environment."""

    name: str
    module: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    ready: re.Pattern[str] | None = READY


@dataclass
class Child:
    spec: ServiceSpec
    proc: subprocess.Popen[bytes]
    log_path: Path
    ready: threading.Event = field(default_factory=threading.Event)
    tail: list[str] = field(default_factory=list)


class Supervisor:
    """Starts, watches and stops child processes; a context manager that always stops them."""

    def __init__(self, log_dir: Path, python: str = sys.executable) -> None:
        self.log_dir = log_dir
        self.python = python
        self.children: list[Child] = []
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, spec: ServiceSpec, timeout: float = 30.0) -> Child:
        log_path = self.log_dir / f"{spec.name.replace('/', '_')}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **spec.env}
        proc = subprocess.Popen(
            [self.python, "-m", spec.module, *spec.args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a Ctrl-C reaches the supervisor, which stops children in order
        )
        child = Child(spec, proc, log_path)
        self.children.append(child)
        threading.Thread(target=self._pump, args=(child,), daemon=True, name=spec.name).start()
        if spec.ready is None:
            child.ready.set()
        deadline = time.monotonic() + timeout
        while not child.ready.wait(0.02):
            if proc.poll() is not None or time.monotonic() > deadline:
                why = "exited" if proc.poll() is not None else f"was not ready after {timeout:.0f}s"
                tail = "".join(child.tail[-15:])
                raise StandaloneError(f"{spec.name} {why}; log {log_path}:\n{tail}")
        return child

    def _pump(self, child: Child) -> None:
        assert child.proc.stdout is not None
        with child.log_path.open("w", encoding="utf-8") as log:
            for raw in iter(child.proc.stdout.readline, b""):
                line = raw.decode(errors="replace")
                log.write(line)
                log.flush()
                child.tail.append(line)
                del child.tail[:-50]
                pattern = child.spec.ready
                if pattern is not None and not child.ready.is_set() and pattern.search(line):
                    child.ready.set()

    def exited(self) -> list[tuple[str, int]]:
        """Children that are no longer running, with their exit codes."""
        return [
            (c.spec.name, c.proc.returncode) for c in self.children if c.proc.poll() is not None
        ]

    def stop(self, child: Child, grace: float = 10.0) -> int:
        if child.proc.poll() is None:
            child.proc.send_signal(signal.SIGTERM)
            try:
                child.proc.wait(grace)
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait()
        return child.proc.returncode

    def kill(self, child: Child) -> None:
        """SIGKILL, as a crash would (for failure tests and demos)."""
        if child.proc.poll() is None:
            child.proc.kill()
            child.proc.wait()

    def stop_all(self, grace: float = 10.0) -> None:
        for child in reversed(self.children):
            self.stop(child, grace)

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop_all()
