"""The kubelet plugin service: settings → wiring → serve until SIGTERM/SIGINT → orderly stop.

Resources are entered into one `AsyncExitStack` and leave in reverse: registration socket, DRA
socket, then NATS is drained. Exit codes: 0 after a signal, 2 for bad settings, 1 when a component
fails to start (the reason is logged as one line).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path

from nats.aio.client import Client
from nats.errors import Error as NatsError

import gpudra_bus as bus
from gpudra_kube import ApiStore, KubeError
from gpudra_kubelet_plugin import healthfeed
from gpudra_kubelet_plugin.cdi import CdiWriter
from gpudra_kubelet_plugin.cdibase import load_base_edits
from gpudra_kubelet_plugin.checkpoint import Checkpoint
from gpudra_kubelet_plugin.claimsource import ClaimSource, NatsKvClaimSource, StoreClaimSource
from gpudra_kubelet_plugin.errors import (
    ClaimSourceUnavailableError,
    KubeletPluginError,
    SettingsError,
)
from gpudra_kubelet_plugin.events import NatsEvents
from gpudra_kubelet_plugin.health import HealthHub
from gpudra_kubelet_plugin.nodedevices import open_devices
from gpudra_kubelet_plugin.plugin import KubeletPlugin
from gpudra_kubelet_plugin.settings import Settings
from gpudra_kubelet_plugin.state import DeviceState
from gpudra_service import (
    HealthServer,
    ServiceError,
    alive_while_open,
    cancel_until_done,
    nats_options,
    setup_tracing,
)

log = logging.getLogger("gpudra_kubelet_plugin")


async def start_probes(
    settings: Settings, ready: Callable[[], bool], live: Callable[[], bool] = lambda: True
) -> HealthServer:
    """The `/healthz` (the loop turns; `live`) and `/readyz` server (a port it cannot bind is a
    `SettingsError` naming it)."""
    return await HealthServer(
        settings.health_host, settings.health_port, ready=ready, live=live
    ).start()


async def serve(
    settings: Settings, stop: asyncio.Event, ready: asyncio.Event | None = None
) -> None:
    """Run the plugin until `stop` is set; `ready` is set once the kubelet may register it."""
    async with AsyncExitStack() as stack:
        stack.callback(
            setup_tracing(
                "gpudra-kubelet-plugin",
                settings.trace_exporter,
                settings.trace_endpoint,
                settings.trace_file,
            )
        )
        plugin: KubeletPlugin | None = None
        nc: Client | None = None

        def is_ready() -> bool:
            return (
                plugin is not None
                and plugin.registration.registered.is_set()
                and nc is not None
                and nc.is_connected
            )

        probes = await start_probes(settings, is_ready, alive_while_open(lambda: nc))
        stack.push_async_callback(probes.stop)
        base_edits = load_base_edits(Path(settings.cdi_base_spec)) if settings.cdi_base_spec else {}
        devices = await asyncio.to_thread(
            open_devices, settings.device_source, settings.mig_minors_file
        )
        stack.callback(devices.close)
        lookup, control = devices.lookup, devices.control
        try:
            nc = await bus.connect(
                settings.nats_url,
                name=f"kubelet-plugin-{settings.node}",
                deadline=settings.nats_connect_deadline,
                **nats_options(settings),
            )
        except bus.BusError as exc:
            raise ClaimSourceUnavailableError(str(exc)) from exc
        stack.push_async_callback(bus.disconnect, nc)
        claims: ClaimSource
        if settings.claim_source == "kubernetes":
            try:
                store = await ApiStore.from_kubeconfig(settings.kubeconfig or None)
            except KubeError as exc:
                raise SettingsError(str(exc)) from exc
            stack.push_async_callback(store.close)
            claims = StoreClaimSource(store)
        else:
            try:
                claims = NatsKvClaimSource(await nc.jetstream().key_value(settings.claims_bucket))
            except (NatsError, TimeoutError) as exc:
                raise ClaimSourceUnavailableError(
                    f"cannot open KV bucket {settings.claims_bucket}: {exc!r}"
                ) from exc
        connection = nc
        hub = HealthHub(
            settings.node,
            await lookup.devices(),
            settings.health_timeout,
            refresh_seconds=settings.health_refresh,
            is_current=lambda: connection.is_connected,
        )
        await healthfeed.subscribe(nc, settings.node, hub)
        # Events are not stored: the node's inventories correct the ones missed (see healthfeed).
        inventories = healthfeed.InventoryCheck(nc.jetstream(), settings.node, hub)
        await inventories.once()
        checking = asyncio.create_task(
            inventories.run(settings.health_refresh), name="health-inventory-check"
        )
        stack.push_async_callback(cancel_until_done, checking)
        state = DeviceState(
            driver=settings.driver_name,
            node=settings.node,
            claims=claims,
            lookup=lookup,
            control=control,
            cdi=CdiWriter(settings.cdi_dir, settings.driver_name, base_edits),
            checkpoint=Checkpoint(settings.checkpoint_path, settings.boot_id_file),
            events=NatsEvents(nc, settings.node),
        )
        plugin = KubeletPlugin(settings, state, hub)
        await plugin.start()
        stack.push_async_callback(plugin.stop)
        log.info(
            "kubelet plugin %s serving on node %s (probes on port %d)",
            settings.driver_name,
            settings.node,
            probes.port,
        )
        if ready is not None:
            ready.set()
        await stop.wait()
        log.info("stopping")


async def _main(settings: Settings) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ready = asyncio.Event()
    serving = asyncio.create_task(serve(settings, stop, ready), name="kubelet-plugin")
    stopping = asyncio.create_task(stop.wait(), name="stop-signal")
    try:
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not serving.done() and not ready.is_set():
            # Stopped while still starting (e.g. waiting for NATS): unwind what has started.
            log.info("stopping before the plugin was ready")
            await cancel_until_done(serving)
        with contextlib.suppress(asyncio.CancelledError):
            await serving
    except (KubeletPluginError, ServiceError) as exc:
        log.error("cannot run: %s", exc)
        return 2 if isinstance(exc, SettingsError) else 1
    finally:
        stopping.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(RuntimeError):
                loop.remove_signal_handler(sig)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = Settings.load(argv)
    except SettingsError as exc:
        print(f"gpudra kubelet-plugin: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return asyncio.run(_main(settings))
