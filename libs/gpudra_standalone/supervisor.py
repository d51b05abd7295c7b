"""Runs gpudra's services as separate processes on one machine (standalone mode, demo, tests).

Promises: every child gets its own log file (stdout and stderr, line-buffered) under `log_dir`;
`start` returns once the child printed its readiness line or fails with the last lines of its log
(`launch` + `wait_ready` do the same in two steps, so many children can start side by side);
`stop_all` stops children in reverse start order with SIGTERM, then SIGKILL after a grace period, so
nothing outlives the supervisor; on Linux a child also gets SIGTERM from the kernel when the
supervisor's process is killed outright (`lifeline`); `stop_together` stops independent peers at once. A child that
exits early is reported by `exited()` with its code.
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

from gpudra_standalone import lifeline
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
    done: threading.Event = field(default_factory=threading.Event)


class Supervisor:
    """Starts, watches and stops child processes; a context manager that always stops them."""

    def __init__(self, log_dir: Path, python: str = sys.executable) -> None:
        self.log_dir = log_dir
        self.python = python
        self.children: list[Child] = []
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, spec: ServiceSpec, timeout: float = 30.0) -> Child:
        """Launch `spec` and wait until it is ready."""
        child = self.launch(spec)
        self.wait_ready(child, timeout)
        return child

    def launch(self, spec: ServiceSpec) -> Child:
        """Start `spec` without waiting: several children can then start side by side and be
        waited for with `wait_ready`."""
        log_path = self.log_dir / f"{spec.name.replace('/', '_')}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **spec.env}
        try:
            proc = lifeline.popen(
                [self.python, "-m", spec.module, *spec.args],
                python=self.python,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # Ctrl-C reaches us; we stop children in order
            )
        except OSError as exc:
            raise StandaloneError(f"cannot start {spec.name}: {exc}") from exc
        child = Child(spec, proc, log_path)
        self.children.append(child)
        threading.Thread(target=self._pump, args=(child,), daemon=True, name=spec.name).start()
        if spec.ready is None:
            child.ready.set()
        return child

    def wait_ready(self, child: Child, timeout: float = 30.0) -> None:
        """Return once `child` printed its readiness line; a child that exits first, or is not
        ready within `timeout` seconds, is a `StandaloneError` with the last lines of its log."""
        deadline = time.monotonic() + timeout
        while not child.ready.wait(0.02):
            if child.proc.poll() is not None or time.monotonic() > deadline:
                exited = child.proc.poll() is not None
                if exited:
                    child.done.wait(1.0)  # let the log pump read the last lines
                why = "exited" if exited else f"was not ready after {timeout:.0f}s"
                tail = "".join(child.tail[-15:])
                raise StandaloneError(f"{child.spec.name} {why}; log {child.log_path}:\n{tail}")

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
        child.done.set()

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

    def stop_together(self, children: list[Child], grace: float = 10.0) -> dict[str, int]:
        """SIGTERM all of `children` at once, then wait for each (SIGKILL after `grace`): for
        peers that do not depend on each other, so stopping costs the slowest, not the sum."""
        for child in children:
            if child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in children:
            try:
                child.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait()
        return {c.spec.name: c.proc.returncode for c in children}

    def stop_all(self, grace: float = 10.0) -> None:
        for child in reversed(self.children):
            self.stop(child, grace)

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop_all()
