"""`python -m gpudra_inventory`: settings, wiring and the loop, per the service skeleton.

Start-up: tracing, NATS (waits for a server; credentials and TLS from the shared settings),
streams and buckets (idempotent, created with `stream-replicas` replicas) and the lease bucket,
the bucket's slices (generations continue), in Kubernetes mode the API client, the follower of
the cluster's Nodes (which own the slices) and the leader's watch of its ResourceSlices (which
writes back what the kubelet wipes), the health server
(`/healthz`, `/readyz`, and `/statusz`: the replica's role, leader or standby, as JSON),
then the loop: this replica's inventory consumer and its lease (the leader writes; on taking
over it republishes and, in Kubernetes mode, prunes stale API slices). SIGTERM/SIGINT stop the
loop, which releases the lease; the exit stack closes the API client and drains NATS. Exit status: 0 after a signal, 1 on a fatal error, 2 for bad
settings (also those found while starting: unreadable NATS TLS files, a probe port in use).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Sequence

from gpudra_bus import SLICES_BUCKET, BusError, connect, ensure_buckets, ensure_streams
from gpudra_inventory.lease import Lease, ensure_lease_bucket
from gpudra_inventory.mirror import SliceMirror
from gpudra_inventory.nodes import ClusterNodes
from gpudra_inventory.service import InventoryService
from gpudra_inventory.settings import Settings
from gpudra_inventory.wipes import SliceWatch
from gpudra_kube.errors import KubeError
from gpudra_service import (
    HealthServer,
    alive_while_open,
    nats_options,
    run_service,
    until_stopped,
)

log = logging.getLogger("gpudra_inventory")


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    async with contextlib.AsyncExitStack() as stack:
        connected = await until_stopped(
            connect(settings.nats_servers, name="inventory", **nats_options(settings)), stop
        )
        if connected is None:
            return
        nc = connected
        stack.push_async_callback(nc.drain)
        js = nc.jetstream()
        await ensure_streams(js, replicas=settings.stream_replicas)
        buckets = await ensure_buckets(js, replicas=settings.stream_replicas)
        lease_kv = await ensure_lease_bucket(
            js, settings.lease_ttl, replicas=settings.stream_replicas
        )
        holder = settings.lease_holder or f"{socket.gethostname()}:{os.getpid()}"
        lease = Lease(lease_kv, holder, settings.lease_ttl)
        mirror: SliceMirror | None = None
        wipes: SliceWatch | None = None
        if settings.mode == "kubernetes":
            from gpudra_kube.api_backend import ApiStore

            store = await ApiStore.from_kubeconfig(settings.kubeconfig or None)
            stack.push_async_callback(store.close)
            mirror = SliceMirror(store, settings.driver, nodes=ClusterNodes(store))
            if settings.api_repair_delay > 0:
                wipes = SliceWatch(store, settings.driver, delay=settings.api_repair_delay)
        service = InventoryService(
            nc, buckets[SLICES_BUCKET], settings, mirror, lease=lease, wipes=wipes
        )
        await service.load()
        health = await HealthServer(
            settings.health_host,
            settings.health_port,
            ready=lambda: service.ready,
            live=alive_while_open(lambda: nc, lambda: service.alive),
            status=service.status,
        ).start()
        stack.push_async_callback(health.stop)
        log.info("health server on port %d; lease holder %s", health.port, holder)
        await service.run(stop)


async def main(argv: Sequence[str] | None = None) -> int:
    return await run_service("inventory", Settings.load, serve, argv, fatal=(BusError, KubeError))
