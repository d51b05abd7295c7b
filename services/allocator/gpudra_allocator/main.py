"""`python -m gpudra_allocator`: settings, wiring and the loop, per the service skeleton.

Start-up order: tracing, NATS (waits for a server; credentials and TLS from the shared settings),
streams and buckets (idempotent, created with `stream-replicas` replicas), the
reservation mirror, the slice index and the applied DeviceClasses (all fully read before the first
claim is decided; applied classes override the built-in ones of the same name), the health server
(`/healthz`, `/readyz`, and `/statusz`: what this replica indexed and decided, see `status`),
then the claim consumer. SIGTERM/SIGINT stop the loop; the exit stack then stops
the watches and drains the NATS connection. Exit status: 0 after a signal, 1 on a fatal error, 2
for bad settings (also those found while starting: DeviceClasses file, unreadable NATS TLS files,
a probe port in use).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from gpudra_allocator.engine import Engine, load_classes
from gpudra_allocator.index import class_index, slice_index
from gpudra_allocator.reservations import Reservations
from gpudra_allocator.settings import Settings
from gpudra_allocator.status import AllocatorStatus
from gpudra_allocator.worker import Worker
from gpudra_bus import (
    DEVICE_CLASSES_BUCKET,
    RESERVATIONS_BUCKET,
    SLICES_BUCKET,
    BusError,
    connect,
    ensure_buckets,
    ensure_streams,
)
from gpudra_service import (
    HealthServer,
    alive_while_open,
    nats_options,
    run_service,
    until_stopped,
)

log = logging.getLogger("gpudra_allocator")


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    engine = Engine(
        load_classes(settings.device_classes),
        settings.policy,
        reserve=settings.reserve,
        reserve_floor=settings.reserve_floor,
        mig_homes=settings.mig_homes,
    )
    if settings.reserve and settings.policy != "topology":
        log.warning("reserve=%d is ignored: only the topology policy has one", settings.reserve)
    async with contextlib.AsyncExitStack() as stack:
        connected = await until_stopped(
            connect(
                settings.nats_servers,
                name=f"allocator-{settings.replica}",
                **nats_options(settings),
            ),
            stop,
        )
        if connected is None:
            return
        nc = connected
        stack.push_async_callback(nc.drain)
        js = nc.jetstream()
        await ensure_streams(js, replicas=settings.stream_replicas)
        buckets = await ensure_buckets(js, replicas=settings.stream_replicas)
        reservations = Reservations(buckets[RESERVATIONS_BUCKET])
        await reservations.start()
        stack.push_async_callback(reservations.stop)
        index = slice_index(buckets[SLICES_BUCKET])
        await index.start()
        stack.push_async_callback(index.stop)
        classes = class_index(buckets[DEVICE_CLASSES_BUCKET])
        await classes.start()
        stack.push_async_callback(classes.stop)
        worker = Worker(nc, settings, engine, index, reservations, classes)
        status = AllocatorStatus(worker, index, reservations, classes, policy=settings.policy)
        health = await HealthServer(
            settings.health_host,
            settings.health_port,
            ready=lambda: worker.ready,
            live=alive_while_open(lambda: nc),
            status=status,
        ).start()
        stack.push_async_callback(health.stop)
        log.info("health server on port %d", health.port)
        await worker.run(stop)


async def main(argv: Sequence[str] | None = None) -> int:
    return await run_service("allocator", Settings.load, serve, argv, fatal=(BusError,))
