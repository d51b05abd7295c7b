"""The standalone system: embedded nats-server, trace collector and every service as a process.

`System.start` brings the parts up in dependency order — NATS (JetStream store under the run
directory), then streams and buckets, then the services: the control plane (inventory, allocator,
claim-writer) and one node-agent and one kubelet-plugin per simulated node, launched side by side
(start-up costs the slowest child, not the sum) — reporting each step to `progress`. `stop` ends
the node processes, then the control plane, then NATS (SIGTERM, then SIGKILL after a grace
period); it is safe to call twice or after a failed start, and nothing outlives it. A child that
fails to start is a `StartError` with the last lines of its log. The temp run directory (when no
`store_dir` is given) is removed by `stop`, unless a service failed (did not start, stopped on its
own, or exited non-zero when stopped after a complete start): then its logs, which the error
names, are kept. An interrupted start leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpudra_bus import BusError, connect, ensure_buckets, ensure_streams
from gpudra_cli.standalone import services
from gpudra_cli.standalone.errors import StartError, make_dir
from gpudra_cli.standalone.fleet import Fleet
from gpudra_standalone import (
    Child,
    NatsServer,
    StandaloneError,
    Supervisor,
    TraceCollector,
)

Progress = Callable[[str], None]
START_TIMEOUT = 90.0
SHORT_TMP = 24  # longest temp dir used as is for the run directory


def _quiet(_: str) -> None:
    pass


@dataclass
class System:
    fleet: Fleet
    store_dir: Path | None = None
    tracing: bool = True
    run_dir: Path = field(init=False)
    nats: NatsServer | None = None
    collector: TraceCollector | None = None
    supervisor: Supervisor | None = None
    timings: dict[str, float] = field(default_factory=dict)
    exit_codes: dict[str, int] = field(default_factory=dict)
    failed: bool = False  # a service failed to start or stopped on its own: keep the logs
    _stopping: bool = False
    _tmp: Path | None = None  # the run directory when it is our own temp dir

    def __post_init__(self) -> None:
        if self.store_dir is not None:
            make_dir(self.store_dir, f"cannot use {self.store_dir} as the store directory")
            self.run_dir = self.store_dir.resolve()
        else:
            # Kubelet sockets live below the run directory, and sun_path holds 107 bytes: a deep
            # $TMPDIR (build sandboxes) would not leave room for them.
            base = tempfile.gettempdir()
            short = "/tmp" if len(base) > SHORT_TMP and Path("/tmp").is_dir() else None
            try:
                self._tmp = Path(tempfile.mkdtemp(prefix="gpudra-", dir=short))
            except OSError as exc:
                raise StartError(f"cannot create a run directory: {exc}") from exc
            self.run_dir = self._tmp

    @property
    def nats_url(self) -> str:
        return self.nats.url if self.nats is not None else ""

    @property
    def log_dir(self) -> Path:
        return self.run_dir / "logs"

    def node_dirs(self, node: str) -> services.NodeDirs:
        return services.NodeDirs.of(self.run_dir, node)

    async def start(self, progress: Progress = _quiet) -> None:
        t0 = time.monotonic()
        try:
            self.start_nats(progress)
            await self.prepare_bus()
            await asyncio.to_thread(self.start_services, progress)
        except BaseException:
            self.stop()
            raise
        self.timings["start"] = time.monotonic() - t0

    def start_nats(self, progress: Progress = _quiet) -> None:
        t0 = time.monotonic()
        progress("starting nats-server (JetStream)")
        store = self.run_dir / "nats"
        store.mkdir(parents=True, exist_ok=True)
        try:
            self.nats = NatsServer(store_dir=store).start()
        except StandaloneError as exc:
            raise StartError(str(exc).splitlines()[0]) from exc
        if self.tracing:
            self.collector = TraceCollector()
            self.collector.start()
        self.timings["nats"] = time.monotonic() - t0

    async def prepare_bus(self) -> None:
        """Streams and buckets exist before any service starts (the kubelet plugins open the
        claims bucket at start-up and would otherwise race the claim-writer)."""
        try:
            nc = await connect(self.nats_url, name="gpudra-cli-setup", deadline=10)
        except BusError as exc:
            raise StartError(f"cannot reach the embedded nats-server: {exc}") from exc
        try:
            js = nc.jetstream()
            await ensure_streams(js)
            await ensure_buckets(js)
        except BusError as exc:
            raise StartError(f"cannot create streams and buckets: {exc}") from exc
        finally:
            await nc.drain()

    def start_services(self, progress: Progress = _quiet) -> None:
        t0 = time.monotonic()
        endpoint = self.collector.endpoint if self.collector else ""
        env = services.child_env(self.nats_url, endpoint)
        self.supervisor = Supervisor(self.log_dir)
        specs = services.control_plane(self.nats_url, env, self.tracing)
        for node in self.fleet.nodes:
            specs.append(services.node_agent(node, self.nats_url, env, self.tracing))
            dirs = self.node_dirs(node.name).create()
            specs.append(services.kubelet_plugin(node, dirs, self.nats_url, env, self.tracing))
        progress(f"starting {len(specs)} service processes")
        children: list[Child] = []
        try:
            children = [self.supervisor.launch(spec) for spec in specs]
            for i, child in enumerate(children, 1):
                self.supervisor.wait_ready(child, max(1.0, START_TIMEOUT - (time.monotonic() - t0)))
                progress(f"[{i}/{len(children)}] {child.spec.name} ready")
        except StandaloneError as exc:
            # Not when `stop` (an interrupt) is what ended the children it was waiting for.
            self.failed = self.failed or not self._stopping
            raise StartError(str(exc)) from exc
        self.timings["services"] = time.monotonic() - t0

    def exited(self) -> list[tuple[str, int]]:
        return self.supervisor.exited() if self.supervisor else []

    def check_alive(self) -> None:
        """A `StartError` naming the first service that is no longer running, and its log (kept:
        `failed`); nothing while every service runs."""
        gone = self.exited()
        if gone:
            name, code = gone[0]
            self.failed = True
            raise StartError(
                f"service {name} exited with code {code}; see {self.log_dir / name}.log"
            )

    def stop(self) -> None:
        self._stopping = True
        if self.supervisor is not None:
            # Node processes first, side by side, then the control plane, side by side: no
            # service waits for another on the way out (each drains its own NATS connection,
            # and NATS stops last), so stopping costs the slowest of each group.
            control = {"inventory", "allocator", "claim-writer"}
            children = self.supervisor.children
            nodes = [c for c in children if c.spec.name not in control]
            self.exit_codes.update(self.supervisor.stop_together(nodes))
            rest = [c for c in reversed(children) if c.spec.name in control]
            self.exit_codes.update(self.supervisor.stop_together(rest))
            self.supervisor = None
        if self.collector is not None:
            self.collector.stop()
        if self.nats is not None:
            self.nats.stop(keep_store=True)
            self.nats = None
        if self._tmp is not None:
            # Kept after a failure: the error that reported it names a log in there. Exit codes
            # count only after a complete start: an interrupted one kills children mid-start.
            started = "services" in self.timings
            unclean = started and any(code != 0 for code in self.exit_codes.values())
            if not (self.failed or unclean):
                shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
