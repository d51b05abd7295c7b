"""End-to-end latency of the control plane: a claim is created → its allocation is written back.

Runs the real services as processes (inventory, allocator replica(s), claim-writer; standalone
mode) against a private nats-server, with simulated node-agents publishing a fleet of DGX H100
nodes (8 GPUs each). Claims (1 GPU each) are created at a fixed rate through the standalone claim
store — what `gpudra apply` does — and each is deleted `--lifetime` seconds after its allocation
appeared, so the fleet sees steady churn. Before measuring, `--warmup` claims are allocated one
by one (and deleted), so that start-up (the allocator still reading the fleet's slices, building
its per-node state) is not counted as claim latency. Reported: p50/p90/p99/max of create →
allocation written (seen by a watch on the claim bucket), sustained claims/s, and how many claims
never got one.

    python bench/e2e_bench.py --nodes 1000 --claims 2000 --rate 100

`--profile DIR` runs every service under cProfile (a `sitecustomize` hook put on the services'
PYTHONPATH; the bench's own process is profiled too) and writes `<service>-<pid>.prof` plus a
`.txt` summary (top functions by own time and by cumulative time) per process into DIR, so the
question "where do a claim's milliseconds go, per process" has an answer. The profiles count CPU
time (`time.process_time`), not wall time: on a loaded machine a wall-clock profile charges a
`send` or `poll` with the time the process waited for a core. Profiling slows every process
down; compare profiles with profiles, never with unprofiled latencies.

The services export their spans with the console exporter (one JSON line per span to a file, as
the cross-service tests run them) unless `--trace-exporter none`, the services' default, where
only the trace context is propagated: the difference is what exporting spans costs per claim.

`--slice-churn MS` rewrites one node's ResourceSlice every MS milliseconds during the claims phase
(round robin over the fleet, its pool generation bumped, as the inventory does when a node's
health, taints or MIG layout change): each write is a new slice-index version in the allocator,
whose per-node state is rebuilt for it (off the claim path since the allocator warms up after a
change; the flag measures what claims still pay). Compare with a run without it.

The goal of issue 8 is p99 < 50 ms at 100 claims/s on 1,000 nodes. No GPU is involved; the nodes
are simulator profiles.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
for _p in ("libs", "proto/gen", "tests"):
    if str(_ROOT / _p) not in sys.path:
        sys.path.insert(0, str(_ROOT / _p))

from nats.aio.client import Client  # noqa: E402
from nats.aio.msg import Msg  # noqa: E402
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402

from control_plane.cluster import (  # noqa: E402
    SERVING,
    Cluster,
    Service,
    claim_manifest,
    devices_of,
    publish_nodes,
)
from gpudra_bus import (  # noqa: E402
    SLICES_BUCKET,
    connect,
    ensure_buckets,
    ensure_streams,
    flush_subscriptions,
)
from gpudra_kube.informer import informer  # noqa: E402
from gpudra_kube.kv_backend import KvStore  # noqa: E402
from gpudra_kube.resources import RESOURCE_CLAIMS  # noqa: E402
from gpudra_kube.store import EventType  # noqa: E402
from gpudra_standalone.nats_server import NatsServer  # noqa: E402

_PROFILE_HOOK = """\
import cProfile, os, signal, sys, time
_dir = os.environ.get("GPUDRA_BENCH_PROFILE_DIR")
if _dir:
    _argv = list(getattr(sys, "orig_argv", sys.argv))
    _name = _argv[_argv.index("-m") + 1] if "-m" in _argv[:-1] else "python"
    if "--replica-id" in _argv[:-1]:
        _name += "-" + _argv[_argv.index("--replica-id") + 1]
    _prof = cProfile.Profile(time.process_time)

    def _start(signum, frame):
        _prof.enable()

    def _stop(signum, frame):
        _prof.disable()
        _prof.dump_stats(os.path.join(_dir, f"{_name}-{os.getpid()}.prof"))

    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
"""


class ProfiledCluster(Cluster):
    """The bench's cluster; with a profile directory every service runs under cProfile."""

    def __init__(
        self, nats_url: str, tmp: Path, profile_dir: Path | None, trace_exporter: str = "console"
    ) -> None:
        super().__init__(nats_url, tmp)
        self.profile_dir = profile_dir
        self.trace_exporter = trace_exporter
        if profile_dir is not None:
            hook = tmp / "profile-hook"
            hook.mkdir(parents=True, exist_ok=True)
            (hook / "sitecustomize.py").write_text(_PROFILE_HOOK)

    def env(self) -> dict[str, str]:
        env = super().env()
        if self.profile_dir is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(self.tmp / "profile-hook"), env["PYTHONPATH"]])
            env["GPUDRA_BENCH_PROFILE_DIR"] = str(self.profile_dir)
        return env

    def start(self, name: str, module: str, *args: str, started: str = SERVING) -> Service:
        # The last `--trace-exporter` wins: the cluster's own (console) is overridden.
        return super().start(
            name, module, *args, "--trace-exporter", self.trace_exporter, started=started
        )

    def profile(self, on: bool) -> None:
        """Start (or stop and write) every service's profile: only the claims phase is measured."""
        if self.profile_dir is None:
            return
        for service in self.services.values():
            if service.proc.poll() is None:
                service.proc.send_signal(signal.SIGUSR1 if on else signal.SIGUSR2)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux `/proc`; 0 where unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def cpu_by_process(cluster: Cluster, server: NatsServer) -> dict[str, float]:
    """CPU seconds used so far by every service, the nats-server and this process."""
    out = {name: cpu_seconds(s.proc.pid) for name, s in cluster.services.items()}
    proc = getattr(server, "_proc", None)
    if proc is not None:
        out["nats-server"] = cpu_seconds(proc.pid)
    out["bench"] = time.process_time()
    return out


class RequestCounter:
    """Counts, by kind, the JetStream API requests and KV writes any client sends during the
    claims phase (a subscription of the bench's own sees every one): round trips per claim do not
    depend on the machine's load, CPU time per claim does, somewhat."""

    KINDS = (
        ("$JS.API.DIRECT.GET.", "KV/stream reads"),
        ("$JS.API.STREAM.MSG.GET.", "KV/stream reads"),
        ("$JS.API.CONSUMER.MSG.NEXT.", "pull requests"),
        ("$JS.API.", "other JetStream API"),
        ("$KV.", "KV writes"),
    )

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._subs: list[Any] = []

    @classmethod
    async def start(cls, nc: Client) -> RequestCounter:
        counter = cls()
        for subject in ("$JS.API.>", "$KV.>"):
            counter._subs.append(await nc.subscribe(subject, cb=counter._seen))
        await flush_subscriptions(nc)
        return counter

    async def _seen(self, msg: Msg) -> None:
        kind = next((k for prefix, k in self.KINDS if msg.subject.startswith(prefix)), "other")
        self.counts[kind] = self.counts.get(kind, 0) + 1

    async def stop(self) -> None:
        for sub in self._subs:
            await sub.unsubscribe()

    def report(self, claims: int) -> str:
        per = {k: n / max(claims, 1) for k, n in sorted(self.counts.items())}
        return "requests per claim: " + ", ".join(f"{k} {v:.2f}" for k, v in per.items())


def summarise_profiles(directory: Path, top: int = 30) -> None:
    """Write `<name>.txt` beside every `<name>.prof`: top functions by own and cumulative time."""
    for prof in sorted(directory.glob("*.prof")):
        out = io.StringIO()
        stats = pstats.Stats(str(prof), stream=out)
        stats.sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumulative").print_stats(top)
        prof.with_suffix(".txt").write_text(out.getvalue())
        print(f"profile: {prof.with_suffix('.txt')}")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def wait_slices(nc: Client, count: int, timeout: float) -> None:
    kv = await nc.jetstream().key_value(SLICES_BUCKET)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = await kv.status()
        if status.values >= count:
            return
        await asyncio.sleep(0.2)
    raise SystemExit(f"only {status.values} of {count} slices appeared within {timeout}s")


async def warm_up(store: KvStore, count: int, timeout: float) -> None:
    """Allocate (and delete) `count` claims one by one before measuring: the services' slice
    index may still be reading the fleet the inventory just wrote, and the first decisions build
    the allocator's per-node state. A control plane that has been running has done all that."""
    deadline = time.monotonic() + timeout
    for i in range(count):
        name = f"warmup-{i:03d}"
        await store.create(RESOURCE_CLAIMS, claim_manifest(name))
        while not devices_of(await store.get(RESOURCE_CLAIMS, name, "default")):
            if time.monotonic() > deadline:
                raise SystemExit(f"warm-up claim {name} not allocated within {timeout}s")
            await asyncio.sleep(0.05)
        await store.delete(RESOURCE_CLAIMS, name, "default")
    if count:
        print(f"warmed up with {count} claims")


async def churn_slices(nc: Client, every_ms: float, stop: asyncio.Event) -> int:
    """Until `stop`: every `every_ms` ms, put one node's slice back with its pool generation
    bumped (nodes in key order, round robin). Returns how many slices were rewritten."""
    kv = await nc.jetstream().key_value(SLICES_BUCKET)
    keys = sorted(await kv.keys())
    written = 0
    next_at = time.monotonic()
    while not stop.is_set() and keys:
        key = keys[written % len(keys)]
        entry = await kv.get(key)
        doc = json.loads(entry.value or b"{}")
        doc["spec"]["pool"]["generation"] += 1
        await kv.put(key, json.dumps(doc).encode())
        written += 1
        next_at += every_ms / 1000
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
    return written


async def run(args: argparse.Namespace) -> int:
    server = NatsServer().start()
    tmp = Path(tempfile.mkdtemp(prefix="gpudra-e2e-"))
    profile_dir = Path(args.profile).resolve() if args.profile else None
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
    cluster = ProfiledCluster(server.url, tmp, profile_dir, args.trace_exporter)
    try:
        nc = await connect(server.url, name="e2e-bench", deadline=10)
        await ensure_streams(nc.jetstream())
        await ensure_buckets(nc.jetstream())
        store = KvStore(nc)
        nodes = [f"node-{i:04d}" for i in range(args.nodes)]
        await publish_nodes(nc, nodes)
        cluster.start_inventory()
        for r in range(args.replicas):
            cluster.start_allocator(f"allocator-{r + 1}", "--policy", args.policy)
        cluster.start_claim_writer()
        started = time.monotonic()
        await wait_slices(nc, args.nodes, timeout=300)
        print(f"{args.nodes} nodes published and sliced in {time.monotonic() - started:.1f}s")

        created: dict[str, float] = {}
        latency: dict[str, float] = {}
        done = asyncio.Event()
        later: set[asyncio.Task[None]] = set()

        async def watch() -> None:
            async for event in informer(store, RESOURCE_CLAIMS, "default", watch_timeout=5.0):
                if event.type is EventType.SYNCED or event.type is EventType.DELETED:
                    continue
                name = event.object["metadata"]["name"]
                if name in created and name not in latency and devices_of(event.object):
                    latency[name] = time.monotonic() - created[name]
                    later.add(asyncio.create_task(delete(name, args.lifetime)))
                    if len(latency) == args.claims:
                        done.set()

        async def delete(name: str, after: float) -> None:
            await asyncio.sleep(after)
            try:
                await store.delete(RESOURCE_CLAIMS, name, "default")
            except Exception as exc:  # a failed delete only skews the churn; report and go on
                print(f"delete {name}: {exc}", file=sys.stderr)

        watcher = asyncio.create_task(watch())
        await warm_up(store, args.warmup, timeout=120)
        await asyncio.sleep(1.0)
        interval = 1.0 / args.rate
        bench_profile = cProfile.Profile(time.process_time) if profile_dir is not None else None
        counter = await RequestCounter.start(nc) if args.count_requests else None
        cpu_before = cpu_by_process(cluster, server)
        cluster.profile(True)
        churn_stop = asyncio.Event()
        churn = (
            asyncio.create_task(churn_slices(nc, args.slice_churn, churn_stop))
            if args.slice_churn > 0
            else None
        )
        if bench_profile is not None:
            bench_profile.enable()
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
        ) as progress:
            sent = progress.add_task("created  ", total=args.claims)
            got = progress.add_task("allocated", total=args.claims)
            t0 = time.monotonic()
            for i in range(args.claims):
                name = f"bench-{i:06d}"
                target = t0 + i * interval
                now = time.monotonic()
                if target > now:
                    await asyncio.sleep(target - now)
                created[name] = time.monotonic()
                await store.create(RESOURCE_CLAIMS, claim_manifest(name))
                progress.update(sent, completed=i + 1)
                progress.update(got, completed=len(latency))
            send_time = time.monotonic() - t0
            deadline = time.monotonic() + args.drain
            while not done.is_set() and time.monotonic() < deadline:
                progress.update(got, completed=len(latency))
                await asyncio.sleep(0.2)
            progress.update(got, completed=len(latency))
            churn_stop.set()
            rewritten = await churn if churn is not None else 0
            if bench_profile is not None and profile_dir is not None:
                bench_profile.disable()
                bench_profile.dump_stats(str(profile_dir / f"bench-{os.getpid()}.prof"))
            cluster.profile(False)
            cpu_after = cpu_by_process(cluster, server)
            if counter is not None:
                await counter.stop()
            total_time = max(latency.values(), default=0.0) + (
                max(created.values()) - t0 if created else 0.0
            )
        # nats-py turns a cancellation that lands while the connection closes into a connection
        # error, which the informer retries: cancel until every task is really gone.
        tasks = [watcher, *later]
        while not all(task.done() for task in tasks):
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=1.0)
        values = [v * 1000 for v in latency.values()]
        print(
            f"\nclaims: {args.claims} at {args.rate}/s offered ({args.claims / send_time:.1f}/s "
            f"achieved), {len(values)} allocated, {args.claims - len(values)} not allocated"
        )
        if values:
            print(
                f"create → allocation written: p50 {percentile(values, 50):.1f} ms, "
                f"p90 {percentile(values, 90):.1f} ms, p99 {percentile(values, 99):.1f} ms, "
                f"max {max(values):.1f} ms, mean {statistics.mean(values):.1f} ms"
            )
            print(f"sustained: {len(values) / max(total_time, 1e-9):.1f} claims/s end to end")
            if churn is not None:
                print(
                    f"slice churn: {rewritten} slices rewritten, one every {args.slice_churn:g} ms"
                )
            # CPU time per claim depends far less than latency on what else runs on the machine
            # (not at all, though: a process that waited for a core handles several messages per
            # wake-up, so a busier machine shows somewhat less; compare runs made back to back).
            per_claim = {
                name: (cpu_after[name] - cpu_before.get(name, 0.0)) * 1000 / len(values)
                for name in cpu_after
            }
            print(
                "CPU per claim: "
                + ", ".join(f"{name} {ms:.2f} ms" for name, ms in per_claim.items())
                + f" (total {sum(per_claim.values()):.2f} ms; load average "
                + " ".join(f"{x:.1f}" for x in os.getloadavg())
                + ")"
            )
            if counter is not None:
                print(counter.report(len(values)))
        await nc.drain()
        return 0 if len(values) == args.claims else 1
    finally:
        codes = cluster.stop_all()
        if any(codes.values()):
            print(f"service exit codes: {codes}; logs in {tmp}", file=sys.stderr)
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="simulated DGX H100 nodes")
    parser.add_argument("--claims", type=int, default=2000, help="1-GPU claims to create")
    parser.add_argument("--rate", type=float, default=100.0, help="claims created per second")
    parser.add_argument(
        "--lifetime", type=float, default=5.0, help="seconds a claim lives after allocation"
    )
    parser.add_argument("--replicas", type=int, default=1, help="allocator replicas")
    parser.add_argument("--policy", default="first-fit", choices=("first-fit", "topology"))
    parser.add_argument("--drain", type=float, default=60.0, help="seconds to wait at the end")
    parser.add_argument(
        "--warmup", type=int, default=20, help="claims allocated one by one before measuring"
    )
    parser.add_argument(
        "--trace-exporter",
        default="console",
        choices=("console", "none"),
        help="the services' span exporter: console (one JSON line per span, as the "
        "cross-service tests run them) or none (the services' default: context still propagated)",
    )
    parser.add_argument(
        "--slice-churn",
        type=float,
        default=0.0,
        help="rewrite one node's slice every this many ms while claims arrive (0: off)",
    )
    parser.add_argument(
        "--count-requests",
        action="store_true",
        help="count JetStream API requests and KV writes per claim (adds a subscriber's cost)",
    )
    parser.add_argument(
        "--profile", default="", help="directory for per-process cProfile output (slows all)"
    )
    args = parser.parse_args(argv)
    code = asyncio.run(run(args))
    if args.profile:
        time.sleep(1.0)  # the services write their profiles on SIGUSR2, asynchronously
        summarise_profiles(Path(args.profile))
    return code


if __name__ == "__main__":
    sys.exit(main())
