"""`python -m gpudra_node_agent`: settings, wiring, signals; the loop itself is `agent.NodeAgent`.

Start-up order (`main` is the shared `gpudra_service.run_service`): settings (a bad one exits 2
with one line), logging and tracing, NVML or the simulator (exits 1 with NVML's reason when
neither is possible), NATS (waits for a server; a node-agent may start before NATS does), the
inventory stream, then the loop. SIGTERM/SIGINT set an Event; on the way out the
event set is freed, NVML shut down and the NATS connection drained.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Sequence

from gpudra_bus import connect, disconnect, ensure_streams
from gpudra_bus.errors import BusError
from gpudra_bus.streams import INVENTORY_STREAM, STREAMS
from gpudra_node_agent.agent import NodeAgent
from gpudra_node_agent.settings import Settings
from gpudra_nvml import NvmlError, open_adapter
from gpudra_service import (
    HealthServer,
    alive_while_open,
    nats_options,
    run_service,
    until_stopped,
)

log = logging.getLogger("gpudra_node_agent")


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    """Run the agent until `stop` is set; resources are released in reverse order."""
    async with contextlib.AsyncExitStack() as stack:
        opened = open_adapter(
            settings.simulator_profile,
            settings.fallback_profile,
            faults_file=settings.simulator_faults,
        )
        stack.callback(opened.adapter.stop)
        if opened.fake is not None:
            log.warning(
                "node %s runs simulator profile %r: SIMULATED GPUs",
                settings.node,
                opened.source.profile,
            )
        agent: NodeAgent | None = None

        async def reconnected() -> None:
            if agent is not None:
                agent.mark_dirty()

        nc = await until_stopped(
            connect(
                settings.nats_servers,
                name=f"node-agent-{settings.node}",
                reconnected_cb=reconnected,
                **nats_options(settings),
            ),
            stop,
        )
        if nc is None:
            return
        stack.push_async_callback(disconnect, nc)
        spec = next(s for s in STREAMS if s.name == INVENTORY_STREAM)
        await ensure_streams(nc.jetstream(), [spec], replicas=settings.stream_replicas)
        agent = NodeAgent(settings, opened, nc)
        await agent.start()
        stack.push_async_callback(agent.close)
        probes = await HealthServer(
            settings.health_host,
            settings.health_port,
            ready=agent.ready,
            live=alive_while_open(lambda: nc, agent.live),
        ).start()
        stack.push_async_callback(probes.stop)
        log.info("health server on port %d", probes.port)
        origin = f"simulator profile {opened.source.profile}" if opened.fake is not None else "NVML"
        log.info("node-agent for %s started (%s)", agent.node, origin)
        await agent.run(stop)


async def main(argv: Sequence[str] | None = None) -> int:
    """The shared service skeleton (`gpudra_service.run_service`: settings, logging, tracing,
    signals); NVML and NATS failures exit 1."""
    return await run_service("node-agent", Settings.load, serve, argv, fatal=(NvmlError, BusError))


def run() -> None:
    sys.exit(asyncio.run(main()))
