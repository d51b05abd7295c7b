"""A small gpudra control plane for cross-service tests: real processes, real NATS, simulated nodes.

`Cluster` starts the inventory, allocator(s) and claim-writer as separate processes
(`python -m gpudra_<service>` with the test's own interpreter), in standalone mode against one
nats-server; `publish_nodes` plays node-agents (NodeInventory snapshots of a simulator profile);
claims are applied, read and deleted through the standalone `KvStore`, exactly as the CLI does.
Each process logs to `<tmp>/<name>.log` and writes its spans as JSON lines to `<tmp>/<name>.spans`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.js.kv import KeyValue

from gpudra_bus import RESERVATIONS_BUCKET, SLICES_BUCKET, Codec, Publisher, subjects
from gpudra_kube.errors import NotFoundError
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import RESOURCE_CLAIMS
from gpudra_nvml.inventory import snapshot
from gpudra_nvml.loader import open_simulator
from gpudra_testing.kubeapi import FakeKubeApi
from gpudra_testing.kvkeys import bucket_keys
from gpudrapb.v1 import inventory_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
SOURCE_ROOTS = [
    "libs",
    "proto/gen",
    "services/inventory",
    "services/allocator",
    "services/claim-writer",
]
NODE_INVENTORY: Codec[pb.NodeInventory] = Codec(pb.NodeInventory)
UNSCHEDULABLE = "gpudra.io/unschedulable"
# What a service logs right before its loops start (an allocator logs when it consumes claims).
SERVING = "health server on port"
STARTUP = 120.0  # seconds a service process may take to start (import, connect, first work)


def claim_manifest(
    name: str, count: int = 1, namespace: str = "default", device_class: str = "gpu.nvidia.com"
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": device_class, "count": count},
                    }
                ]
            }
        },
    }


def devices_of(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [
        (r["driver"], r["pool"], r["device"])
        for r in (allocation.get("devices") or {}).get("results") or []
    ]


@dataclass
class Service:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    started: str = SERVING  # the log line that says it is at work
    since: int = 0  # where this process's lines begin in `log` (a restart appends to it)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def at_work(self) -> bool:
        """Whether this process (not an earlier one of the name) has logged its `started` line."""
        with self.log.open("rb") as f:
            f.seek(self.since)
            return self.started in f.read().decode(errors="replace")

    def health_port(self) -> int | None:
        """The port this process (not an earlier one of the name) serves `/statusz` on, once it
        has logged it (started with `--health-port 0`: the kernel chose it); None before."""
        with self.log.open("rb") as f:
            f.seek(self.since)
            found = re.search(r"health server on port (\d+)", f.read().decode(errors="replace"))
        return int(found.group(1)) if found else None


@dataclass
class Cluster:
    nats_url: str
    tmp: Path
    services: dict[str, Service] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(str(ROOT / p) for p in SOURCE_ROOTS)
        env["GPUDRA_NATS_URL"] = self.nats_url
        env["PYTHONWARNINGS"] = "ignore"
        return env

    def start(self, name: str, module: str, *args: str, started: str = SERVING) -> Service:
        log = self.tmp / f"{name}.log"
        argv = [
            sys.executable,
            "-m",
            module,
            "--health-port",
            "0",
            "--trace-exporter",
            "console",
            "--trace-file",
            str(self.tmp / f"{name}.spans"),
            *args,
        ]
        since = log.stat().st_size if log.exists() else 0
        with log.open("ab") as out:
            proc = subprocess.Popen(argv, env=self.env(), stdout=out, stderr=subprocess.STDOUT)
        service = Service(name, proc, log, started, since)
        self.services[name] = service
        return service

    def start_inventory(self, *args: str) -> Service:
        return self.start("inventory", "gpudra_inventory", "--heartbeat-timeout", "120", *args)

    def start_allocator(self, name: str = "allocator", *args: str) -> Service:
        return self.start(
            name,
            "gpudra_allocator",
            "--replica-id",
            name,
            "--ack-wait",
            "2",
            "--retry-interval",
            "1",
            *args,
            started=f"allocator {name} consuming claim events",
        )

    def start_claim_writer(self, *args: str) -> Service:
        return self.start("claim-writer", "gpudra_claim_writer", "--watch-timeout", "2", *args)

    def kill(self, name: str) -> None:
        service = self.services[name]
        service.proc.send_signal(signal.SIGKILL)
        service.proc.wait(timeout=10)

    def stop_all(self) -> dict[str, int | None]:
        codes: dict[str, int | None] = {}
        for service in self.services.values():
            if service.proc.poll() is None:
                service.proc.send_signal(signal.SIGTERM)
        for name, service in self.services.items():
            try:
                codes[name] = service.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                service.proc.kill()
                codes[name] = service.proc.wait()
        return codes

    def logs(self) -> str:
        return "\n".join(f"--- {s.name} ---\n{s.text()[-3000:]}" for s in self.services.values())

    def spans(self) -> list[dict[str, Any]]:
        out = []
        for path in self.tmp.glob("*.spans"):
            for line in path.read_text().splitlines():
                if line.strip():
                    out.append(json.loads(line))
        return out


def node_inventory(node: str, profile: str = "dgx-h100", generation: int = 1) -> pb.NodeInventory:
    opened = open_simulator(profile)
    try:
        inventory = snapshot(opened.adapter.discover(), node, opened.source)
    finally:
        opened.adapter.stop()
    inventory.generation = generation
    return inventory


async def publish_nodes(nc: Client, nodes: list[str], profile: str = "dgx-h100") -> None:
    """Play the node-agents of `nodes`: one NodeInventory snapshot each."""
    publisher = Publisher(nc)
    template = node_inventory("template", profile)
    for node in nodes:
        inventory = pb.NodeInventory()
        inventory.CopyFrom(template)
        inventory.node = node
        await publisher.publish(subjects.inventory(node), inventory, NODE_INVENTORY)


async def wait_for(
    check: Callable[[], Any], timeout: float, what: str, cluster: Cluster | None = None
) -> Any:
    """Poll the async `check` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.1)
    detail = cluster.logs() if cluster is not None else ""
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what} (last: {last!r})\n{detail}"
    )


async def logged(cluster: Cluster, name: str, text: str, timeout: float = 60) -> None:
    """Wait until service `name` has written `text` to its log."""

    async def seen() -> bool:
        return text in cluster.services[name].text()

    await wait_for(seen, timeout, f"{name} to log {text!r}", cluster)


async def slices_ready(nc: Client, cluster: Cluster, count: int, what: str = "") -> None:
    """Wait until the inventory has stored at least `count` slices and every service started
    is at work (`all_started`)."""
    kv = await nc.jetstream().key_value(SLICES_BUCKET)

    async def enough() -> bool:
        return len(await bucket_keys(kv)) >= count

    # The inventory's start-up is in this wait too: as long as `all_started` gives one.
    await wait_for(enough, STARTUP, what or f"{count} slices in the bucket", cluster)
    await all_started(cluster)


async def all_started(cluster: Cluster, timeout: float = STARTUP) -> None:
    """Wait until every running service has logged its `started` line (a restarted one: since
    its restart). A process can take tens of seconds to import and connect on a loaded machine
    without a bytecode cache (a fresh Pants sandbox); the tests' shorter waits for decisions must
    not absorb that, so a test that starts a service late calls this too."""
    for name, service in cluster.services.items():
        if service.proc.poll() is None:

            async def at_work(service: Service = service) -> bool:
                return service.at_work()

            await wait_for(at_work, timeout, f"{name} to log {service.started!r}", cluster)


async def kubernetes_mode(nc: Client, cluster: Cluster, api: FakeKubeApi, tmp: Path) -> KeyValue:
    """Inventory, allocator and claim-writer in kubernetes mode against `api` (its kubeconfig
    written to `tmp/kubeconfig`), with one DGX H100 node `node-k` whose slice is stored; the
    reservations bucket."""
    kubeconfig = str(api.write_kubeconfig(tmp / "kubeconfig"))
    await publish_nodes(nc, ["node-k"])
    cluster.start_inventory("--mode", "kubernetes", "--kubeconfig", kubeconfig)
    cluster.start_allocator()
    cluster.start_claim_writer("--mode", "kubernetes", "--kubeconfig", kubeconfig)
    await slices_ready(nc, cluster, 1)
    return await nc.jetstream().key_value(RESERVATIONS_BUCKET)


async def claims(store: KvStore, namespace: str = "default") -> dict[str, dict[str, Any]]:
    listed = await store.list(RESOURCE_CLAIMS, namespace)
    return {c["metadata"]["name"]: c for c in listed.items}


async def claim_or_none(store: KvStore, name: str, namespace: str = "default") -> Any:
    with contextlib.suppress(NotFoundError):
        return await store.get(RESOURCE_CLAIMS, name, namespace)
    return None
