"""Preparing allocated claims through each node's kubelet plugin, as the kubelet would.

Per node: register with the plugin's registration socket, then `NodePrepareResources` for each
claim allocated on that node, one call per claim so each has its own span. The CLI's span
`kubelet prepare` continues the claim's trace (under the claim-writer's status write, when the
collector has it) and is handed to the plugin in the claim's `gpudra.io/traceparent` annotation,
which the plugin continues. Results are the CDI device IDs per claim, or the plugin's error for it;
a node whose plugin cannot be reached marks its claims with that error and does not stop the rest.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gpudra_bus import tracing
from gpudra_cli.standalone.client import TRACEPARENT, Client
from gpudra_cli.standalone.results import Row
from gpudra_cli.standalone.services import DRIVER
from gpudra_cli.standalone.telemetry import CliTracing, context_of
from gpudra_standalone import Span, TraceCollector
from gpudra_standalone.kubelet import ClaimRef, KubeletClient, KubeletError

STATUS_SPAN = "write claim status"


async def _status_span(collector: TraceCollector | None, key: str, wait: float) -> Span | None:
    """The claim-writer's latest status-write span of claim `key` (spans arrive in batches)."""
    if collector is None:
        return None
    deadline = time.monotonic() + wait
    while True:
        found = [
            s
            for s in list(collector.spans)
            if s.name == STATUS_SPAN and s.attributes.get("gpudra.claim") == key
        ]
        if found or time.monotonic() > deadline:
            return max(found, key=lambda s: s.start_ns) if found else None
        await asyncio.sleep(0.05)


async def prepare_rows(
    client: Client,
    rows: Sequence[Row],
    registry_dir: Callable[[str], Path],
    collector: TraceCollector | None = None,
    cli_tracing: CliTracing | None = None,
) -> None:
    """Fill `cdi_ids` / `prepare_error` of every allocated single-node row."""
    by_node: dict[str, list[Row]] = {}
    for row in rows:
        if row.state == "allocated" and row.node and "," not in row.node:
            by_node.setdefault(row.node, []).append(row)
    await asyncio.gather(
        *(
            _prepare_node(client, node, node_rows, registry_dir(node), collector, cli_tracing)
            for node, node_rows in sorted(by_node.items())
        )
    )


async def _prepare_node(
    client: Client,
    node: str,
    rows: Sequence[Row],
    registry: Path,
    collector: TraceCollector | None,
    cli_tracing: CliTracing | None,
) -> None:
    async with KubeletClient(registry, DRIVER) as kubelet:
        try:
            await kubelet.register()
        except KubeletError as exc:
            for row in rows:
                row.prepare_error = str(exc)
            return
        for row in rows:
            ref = ClaimRef(row.uid, row.namespace, row.name)
            if cli_tracing is None:
                await _prepare_one(kubelet, ref, row)
                continue
            parent = context_of(await _status_span(collector, row.key, wait=3.0))
            with cli_tracing.tracer.start_as_current_span(
                "kubelet prepare",
                context=parent,
                attributes={
                    "gpudra.claim": row.key,
                    "gpudra.claim.uid": row.uid,
                    "gpudra.node": node,
                },
            ):
                carrier = tracing.inject()
                if "traceparent" in carrier:
                    await client.annotate(
                        row.name, row.namespace, TRACEPARENT, carrier["traceparent"]
                    )
                await _prepare_one(kubelet, ref, row)


async def _prepare_one(kubelet: KubeletClient, ref: ClaimRef, row: Row) -> None:
    try:
        answer = (await kubelet.prepare([ref])).get(ref.uid)
    except KubeletError as exc:
        row.prepare_error = str(exc)
        return
    if answer is None:
        row.prepare_error = "the plugin did not answer for this claim"
    elif answer.error:
        row.prepare_error = answer.error
    else:
        row.cdi_ids = sorted({i for d in answer.devices for i in d.cdi_ids})
