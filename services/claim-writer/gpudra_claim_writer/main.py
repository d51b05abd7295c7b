"""`python -m gpudra_claim_writer`: settings, wiring and the loops, per the service skeleton.

Start-up: tracing, NATS (waits for a server; credentials and TLS from the shared settings),
streams and buckets (idempotent, created with `stream-replicas` replicas), the claim store
(the API server in kubernetes mode, the KV buckets in standalone mode — the same `Store` interface,
so both modes run the same code), the health server, then the loops: intake (claims → events),
write-back (decisions → claim status), pod gates (and `PodUnits.run`, which retries what a failed
read left) and, in kubernetes mode, the DeviceClass mirror (cluster classes → the allocator's KV
bucket), the Events writer and the release of claims deleted while no claim-writer ran
(`vanished`), in standalone mode the
consumers (pods → claims' `reservedFor`, the last one leaving releases). `/statusz` says what
each loop did (`status`: the mode, each watch's last resourceVersion and resync, the counters). SIGTERM/SIGINT cancel the
loops; the exit stack closes the store and drains NATS. Exit status: 0 after a signal, 1 on a fatal error (a loop that ended on its own
is one, named in the log), 2 for
bad settings (also those found while starting: unreadable NATS TLS files, a probe port in use).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Sequence
from typing import Any

from gpudra_bus import (
    DEVICE_CLASSES_BUCKET,
    RESERVATIONS_BUCKET,
    BusError,
    Publisher,
    connect,
    ensure_buckets,
    ensure_streams,
)
from gpudra_claim_writer.classes import ClassMirror
from gpudra_claim_writer.consumers import Consumers
from gpudra_claim_writer.errors import ClaimWriterError
from gpudra_claim_writer.events import PodUnits
from gpudra_claim_writer.gates import Gates
from gpudra_claim_writer.intake import Intake
from gpudra_claim_writer.kube_events import CONTROLLER, ClaimEvents
from gpudra_claim_writer.ownership import Ownership
from gpudra_claim_writer.settings import Settings
from gpudra_claim_writer.status import ClaimWriterStatus, WatchBook
from gpudra_claim_writer.vanished import Vanished
from gpudra_claim_writer.writeback import Writeback
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.errors import KubeError
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.recorder import EventRecorder
from gpudra_kube.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS
from gpudra_kube.store import Store
from gpudra_service import (
    HealthServer,
    alive_while_open,
    nats_options,
    run_service,
    until_stopped,
)

log = logging.getLogger("gpudra_claim_writer")


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    async with contextlib.AsyncExitStack() as stack:
        connected = await until_stopped(
            connect(settings.nats_servers, name="claim-writer", **nats_options(settings)), stop
        )
        if connected is None:
            return
        nc = connected
        stack.push_async_callback(nc.drain)
        js = nc.jetstream()
        await ensure_streams(js, replicas=settings.stream_replicas)
        buckets = await ensure_buckets(js, replicas=settings.stream_replicas)
        store: Store
        if settings.mode == "kubernetes":
            store = await ApiStore.from_kubeconfig(settings.kubeconfig or None)
        else:
            store = KvStore(nc)
        stack.push_async_callback(store.close)
        publisher = Publisher(nc)
        watches = WatchBook()  # each loop's watch, observed for `/statusz`
        ownership = Ownership(store)
        # The pod watch (gates) tells which claims belong to one pod; without it, claim by claim.
        pods = PodUnits(store, publisher, ownership) if settings.gate_pods else None
        gates = Gates(
            watches.store(store, "gates", PODS) if settings.gate_pods else store,
            settings.namespace,
            settings.watch_timeout,
            ownership,
            on_pod=pods.pod_changed if pods is not None else None,
        )

        async def on_claim(namespace: str, name: str) -> None:
            if settings.gate_pods:
                await gates.claim_changed(namespace, name)

        intake = Intake(
            watches.store(store, "intake", RESOURCE_CLAIMS),
            publisher,
            settings.namespace,
            settings.watch_timeout,
            on_claim,
            ownership,
            pods,
            wait_for_consumers=settings.mode == "kubernetes",
        )
        # A claim deleted while no claim-writer ran leaves no trace a watch could show (see
        # `vanished`); in standalone mode the claim-writer itself lets deleted claims go.
        vanished = (
            Vanished(store, publisher, buckets[RESERVATIONS_BUCKET], settings.namespace)
            if settings.mode == "kubernetes"
            else None
        )

        # Standalone mode has no kube-scheduler/kube-controller-manager to keep reservedFor.
        consumers = (
            Consumers(
                watches.store(store, "consumers", PODS), settings.namespace, settings.watch_timeout
            )
            if settings.mode == "standalone" and settings.record_consumers
            else None
        )

        async def on_allocated(uid: str, namespace: str, name: str, alloc: dict[str, Any]) -> None:
            intake.written(uid)
            if consumers is not None:
                await consumers.claim_allocated(namespace, name)
            if settings.gate_pods:
                await gates.claim_changed(namespace, name)

        events = ClaimEvents(
            EventRecorder(store, controller=CONTROLLER, instance=socket.gethostname())
            if settings.mode == "kubernetes" and settings.record_events
            else None
        )
        writeback = Writeback(
            nc,
            store,
            publisher,
            consumer=settings.consumer,
            on_allocated=on_allocated,
            events=events,
            reoffer=pods.reoffer if pods is not None else None,
        )
        mirror = (
            ClassMirror(
                watches.store(store, "classes", DEVICE_CLASSES),
                buckets[DEVICE_CLASSES_BUCKET],
                watch_timeout=settings.watch_timeout,
            )
            if settings.mode == "kubernetes" and settings.mirror_classes
            else None
        )

        def ready() -> bool:
            return intake.synced.is_set() and writeback.ready

        status = ClaimWriterStatus(
            mode=settings.mode,
            ready=ready,
            watches=watches,
            intake=intake.published,
            intake_conflicts=lambda: intake.conflicts,
            intake_retrying=lambda: intake.retrying,
            writeback=writeback.counts,
            dead_letters=writeback.dead_letters,
            events=events.recorder.counts if events.recorder is not None else None,
            classes=mirror.counts if mirror is not None else None,
            lifted=(lambda: gates.lifted) if settings.gate_pods else None,
            consumers=consumers.counts if consumers is not None else None,
        )
        health = await HealthServer(
            settings.health_host,
            settings.health_port,
            ready=ready,
            live=alive_while_open(lambda: nc),
            status=status,
        ).start()
        stack.push_async_callback(health.stop)
        log.info("health server on port %d", health.port)
        loops = [intake.run(), writeback.run()]
        if settings.gate_pods:
            loops.append(gates.run())
        if pods is not None:
            loops.append(pods.run())
        if events.recorder is not None:
            loops.append(events.run())
        if consumers is not None:
            loops.append(consumers.run())
        if mirror is not None:
            loops.append(mirror.run())
        if vanished is not None:
            loops.append(vanished.run(intake.synced, intake.live))
        if isinstance(store, KvStore):
            # Standalone: this process owns the buckets; deleted claims and pods leave them after
            # a grace period (`KvStore.collect_deleted`), or every list would read them for ever.
            loops.append(store.collect_deleted([RESOURCE_CLAIMS, PODS]))
        tasks = [asyncio.create_task(loop, name=loop.__qualname__) for loop in loops]
        stopper = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopper:
                    task.result()  # a loop ended: surface its error
                    # Every loop runs until it is cancelled; one that returned stopped working,
                    # so stop with an error (exit 1) that names it, and the pod is restarted.
                    raise ClaimWriterError(f"loop {task.get_name()} ended on its own")
        finally:
            log.info("stopping")
            for task in [*tasks, stopper]:
                task.cancel()
            _, stuck = await asyncio.wait([*tasks, stopper], timeout=5.0)
            for task in stuck:
                # Nothing is lost by leaving (unacked work is redelivered); say where it hung.
                log.error("loop %s did not stop within 5 s: %s", task.get_name(), task.get_stack())
            log.info("loops stopped; draining NATS")


# Errors that stop the service with exit code 1 and one log line (anything else: a traceback).
FATAL: tuple[type[Exception], ...] = (BusError, KubeError, ClaimWriterError)


async def main(argv: Sequence[str] | None = None) -> int:
    return await run_service("claim-writer", Settings.load, serve, argv, fatal=FATAL)
