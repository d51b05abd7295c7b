"""The demo, start to finish: a simulated fleet comes up, the examples are applied, and the results,
one claim's trace and the two reports are gathered into a `DemoResult` (rendered by `render`).

Steps: start the system (progress reported) while listening to utilisation samples and the drift
summary; wait until every node's pool is published; apply the examples (plus the demo's own
unschedulable scenario); wait for decisions; prepare every allocated claim through its node's
kubelet plugin; pick one claim's trace (the 8-GPU claim when it is allocated) and render it; write
all traces as OTLP JSON; compute the reports. The system is stopped on the way out whatever
happened (Ctrl-C included) by the caller, which may instead keep it running.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpudra_cli.standalone import reports, results
from gpudra_cli.standalone.apply import apply_claims, wait_decided
from gpudra_cli.standalone.client import Client
from gpudra_cli.standalone.errors import StartError
from gpudra_cli.standalone.manifests import Plan, demo_scenarios, files_of, plan_files
from gpudra_cli.standalone.prepare import prepare_rows
from gpudra_cli.standalone.system import Progress, System
from gpudra_cli.standalone.telemetry import SERVICE, CliTracing
from gpudra_standalone import render_tree

TRACE_CLAIM = "default/nvswitch-8-gpus"
# The order people would submit the scenarios in: the single-claim scenarios, then the workloads.
# Order matters on a small fleet, as it does in a cluster: applied alphabetically, the gang's four
# 4-GPU workers take both DGX baseboards before the 8-GPU claim arrives, which then (correctly)
# cannot be placed. Files not listed here follow in name order.
DEMO_ORDER = (
    "b200-150gb-training",
    "nvswitch-8-gpus",
    "nvlink-4-gpus",
    "h100-or-better-40gb",
    "mig-small-medium-full",
    "shared-claim-two-pods",
    "deployment-gpu-per-replica",
    "gang-of-pods",
)


def demo_files(examples: Path) -> list[Path]:
    """The example files in `DEMO_ORDER`, then the demo's own scenarios."""
    rank = {name: i for i, name in enumerate(DEMO_ORDER)}
    files = sorted(files_of(examples), key=lambda p: (rank.get(p.stem, len(rank)), p.name))
    return [*files, *files_of(demo_scenarios())]


MIN_SAMPLES_WAIT = 3.0
# An unschedulable claim is final for the demo once it stayed so for this long: the allocator
# retries held claims every second (`--retry-interval 1`), so this covers two retries.
SETTLE = 2.0


@dataclass
class TraceView:
    claim: str
    trace_id: str
    services: list[str]
    tree: list[str]
    file: str
    spans_total: int


@dataclass
class DemoResult:
    samples: reports.Samples
    fleet: dict[str, str]
    rows: list[results.Row]
    skipped: list[str]
    timings: dict[str, float]
    trace: TraceView | None
    utilisation: reports.Utilisation
    drift: reports.Drift | None
    exit_codes: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "fleet": self.fleet,
            "claims": [r.as_json() for r in self.rows],
            "skipped": self.skipped,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
            "trace": asdict(self.trace) if self.trace else None,
            "utilisation": self.utilisation.as_json(),
            "drift": self.drift.as_json() if self.drift else None,
            "exitCodes": self.exit_codes,
        }


async def wait_for_pools(
    client: Client, nodes: Sequence[str], timeout: float = 60.0, system: System | None = None
) -> None:
    """Until the inventory published a ResourceSlice pool for every node; a service of `system`
    that dies meanwhile ends the wait at once (`System.check_alive`): its node's slices, or
    every node's, would never come."""
    deadline = time.monotonic() + timeout
    missing = set(nodes)
    while True:
        if system is not None:
            system.check_alive()
        pools = {(s.get("spec") or {}).get("pool", {}).get("name") for s in await client.slices()}
        missing = set(nodes) - pools
        if not missing:
            return
        if time.monotonic() > deadline:
            raise StartError(f"no ResourceSlices for {', '.join(sorted(missing))} after {timeout}s")
        await asyncio.sleep(0.1)


async def run_demo(
    system: System,
    examples: Path,
    trace_file: Path | None,
    progress: Progress,
) -> tuple[DemoResult, Client]:
    """Run the demo on `system` (not yet started); returns the result and the open client (the
    caller closes it, and stops the system)."""
    system.start_nats(progress)
    client = await Client.open(system.nats_url)
    try:
        return await _run(system, client, examples, trace_file, progress), client
    except BaseException:
        await client.close()
        raise


async def _run(
    system: System, client: Client, examples: Path, trace_file: Path | None, progress: Progress
) -> DemoResult:
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    samples = reports.Samples()
    await samples.subscribe(client.nc)
    await system.prepare_bus()
    await asyncio.to_thread(system.start_services, progress)
    timings["start"] = time.monotonic() - t0
    progress("waiting for every node's ResourceSlices")
    await wait_for_pools(client, [n.name for n in system.fleet.nodes], system=system)
    timings["slices"] = time.monotonic() - t0
    plan: Plan = plan_files(demo_files(examples))
    progress(f"applying {len(plan.claims)} claims from {examples}")
    t_apply = time.monotonic()
    applied = await apply_claims(client, plan.claims)
    keys = [f"{c['metadata']['namespace']}/{c['metadata']['name']}" for c in plan.claims]
    claims, allocate_ms = await wait_decided(client, keys, applied, settle=SETTLE)
    timings["decided"] = time.monotonic() - t_apply
    slices = await client.slices()
    index = results.device_index(slices)
    rows = [results.row_of(claims[k], index) for k in keys if k in claims]
    for row in rows:
        row.source = plan.sources.get(row.key, "")
        row.allocate_ms = allocate_ms.get(row.key)
    progress("preparing allocated claims through the kubelet plugins")
    cli_tracing = CliTracing(system.collector.endpoint) if system.collector else None
    t_prep = time.monotonic()
    try:
        await prepare_rows(
            client, rows, lambda n: system.node_dirs(n).registry, system.collector, cli_tracing
        )
    finally:
        if cli_tracing is not None:
            cli_tracing.close()
    timings["prepare"] = time.monotonic() - t_prep
    # Utilisation needs a few samples per node; the node-agents send one a second.
    rest = MIN_SAMPLES_WAIT - (time.monotonic() - t_apply)
    if rest > 0:
        await asyncio.sleep(rest)
    trace = await _trace_view(system, rows, trace_file)
    use = reports.utilisation([claims[k] for k in keys if k in claims], index, samples)
    timings["total"] = time.monotonic() - t0
    return DemoResult(
        samples=samples,
        fleet={n.name: n.profile for n in system.fleet.nodes},
        rows=rows,
        skipped=plan.skipped,
        timings=timings,
        trace=trace,
        utilisation=use,
        drift=reports.drift(samples.drift),
    )


def _pick(rows: Sequence[results.Row]) -> results.Row | None:
    prepared = [r for r in rows if r.cdi_ids]
    for row in prepared:
        if row.key == TRACE_CLAIM:
            return row
    return prepared[0] if prepared else None


async def _trace_view(
    system: System, rows: Sequence[results.Row], trace_file: Path | None
) -> TraceView | None:
    collector = system.collector
    if collector is None:
        return None
    row = _pick(rows)
    trace_id = ""
    spans = []
    if row is not None:
        deadline = time.monotonic() + 3.0
        while True:
            mine = [
                s
                for s in list(collector.spans)
                if s.service == SERVICE and s.attributes.get("gpudra.claim") == row.key
            ]
            trace_id = mine[-1].trace_id if mine else ""
            spans = collector.trace(trace_id) if trace_id else []
            # The plugin's span arrives with its exporter's next batch.
            if len({s.service for s in spans}) >= 4 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
    # Written by the caller once the services stopped (their last spans are flushed on exit).
    path = trace_file or Path(tempfile.gettempdir()) / f"gpudra-demo-traces-{time.time_ns()}.json"
    return TraceView(
        claim=row.key if row else "",
        trace_id=trace_id,
        services=sorted({s.service for s in spans}),
        tree=render_tree(spans),
        file=str(path),
        spans_total=len(collector.spans),
    )
