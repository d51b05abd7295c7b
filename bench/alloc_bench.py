"""Allocation throughput on a generated DGX-like cluster: first-fit (Kubernetes' semantics) and
the topology policy, in the same process.

Run: `python bench/alloc_bench.py` (or `./pants run bench/alloc_bench.py`). It builds N nodes x 8
H100 GPUs with the attributes gpudra publishes (docs/DEVICES.md), a DeviceClass and requests with
CEL selectors, and reports:

1. one-GPU claims allocated in sequence, the allocator choosing the node (claims/s);
2. eight-GPU claims with matchAttribute on nvlinkDomain, in sequence (claims/s);
3. a day of churn as one contract `steps` problem (JSON in, parsing included), in steps/s;
4. how the per-claim cost grows with the cluster size (100 ... 10,000 nodes), both when the
   allocator chooses the node and when the node is given (kube-scheduler's per-node filter),
   and what the topology policy (`gpudra_alloc.placement.Chooser`, one per run as the
   allocator service keeps one) costs for the same claims; `--topology-plain` also times it
   with its optimisations off (every node searched for every claim);
5. the churn workload (`gpudra_alloc.workload`: DGX H100, HGX B200, A100 with MIG, L4, GB200
   trays; 1/2/4/8-GPU, MIG, large-memory claims and gangs) on a heterogeneous fleet of
   `--fleet-nodes` nodes, as one contract `steps` document under each policy (parsing
   included): pods and gangs decided per second.

`--rebuild 1000,10000` instead times what the allocator service does after one node's slice
changed, a node joined or a node left (its `Engine.warm_up`: the allocator, the topology
chooser, every node's pools and keys, a search for the last claim's shape), rebuilding every
node vs only what the event touched (`gpudra_alloc.rebuild`), under both policies:
milliseconds per event, median (`--rebuild-events` picks the events).

Each figure allocates into the same state the claims before it left behind, as a scheduler does.
Times are this process's CPU time (the machine may be shared); parsing is not included.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import gpudra_alloc  # noqa: F401
    import gpudra_allocator  # noqa: F401
except ImportError:  # plain `python bench/alloc_bench.py` from a checkout: use the source roots
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "libs"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services" / "allocator"))

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpudra_alloc import AllocatedState, Allocator, Features, solve
from gpudra_alloc.placement import Chooser
from gpudra_alloc.workload import ChurnConfig, Fleet, churn_problem
from gpudra_allocator.engine import Engine
from gpudra_api import Node, parse_device_class, parse_resource_claim, parse_resource_slice

DRIVER = "gpu.nvidia.com"
GPUS_PER_NODE = 8
CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": DRIVER},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": f'device.driver == "{DRIVER}" && '
                    f'device.attributes["{DRIVER}"].type == "gpu"'
                }
            }
        ]
    },
}
REQUEST_SELECTOR = (
    f'device.attributes["{DRIVER}"].productName.startsWith("NVIDIA H100") && '
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'
)


def dgx_slice(node: str) -> dict[str, Any]:
    devices = []
    for i in range(GPUS_PER_NODE):
        bus = 0x18 + 0x10 * i
        devices.append(
            {
                "name": f"gpu-{i}",
                "attributes": {
                    "type": {"string": "gpu"},
                    "uuid": {"string": f"GPU-{node}-{i:04x}"},
                    "index": {"int": i},
                    "minor": {"int": i},
                    "productName": {"string": "NVIDIA H100 80GB HBM3"},
                    "brand": {"string": "Nvidia"},
                    "architecture": {"string": "Hopper"},
                    "cudaComputeCapability": {"version": "9.0.0"},
                    "driverVersion": {"version": "550.54.15"},
                    "cudaDriverVersion": {"version": "12.4.0"},
                    "resource.kubernetes.io/pciBusID": {"string": f"0000:{bus:02x}:00.0"},
                    "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{bus & 0xF0:02x}"},
                    "nvlinkDomain": {"string": "nvswitch-0"},
                    "numaNode": {"int": i // 4},
                },
                "capacity": {"memory": {"value": "80Gi"}},
            }
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def claim(name: str, count: int, match_nvlink: bool) -> Any:
    devices: dict[str, Any] = {
        "requests": [
            {
                "name": "gpus",
                "exactly": {
                    "deviceClassName": DRIVER,
                    "count": count,
                    "selectors": [{"cel": {"expression": REQUEST_SELECTOR}}],
                },
            }
        ]
    }
    if match_nvlink:
        devices["constraints"] = [{"matchAttribute": f"{DRIVER}/nvlinkDomain"}]
    return parse_resource_claim(
        {"metadata": {"name": name, "namespace": "bench"}, "spec": {"devices": devices}}
    )


class Cluster:
    """A parsed cluster and an allocator over it, with fresh state."""

    def __init__(self, nodes: int, progress: Progress | None = None) -> None:
        self.node_list = [Node(f"node-{i:05d}") for i in range(nodes)]
        task = progress.add_task(f"parse {nodes} slices", total=nodes) if progress else None
        slices = []
        for node in self.node_list:
            slices.append(parse_resource_slice(dgx_slice(node.name)))
            if progress is not None and task is not None:
                progress.advance(task)
        self.state = AllocatedState()
        self.allocator = Allocator([parse_device_class(CLASS)], slices, Features(), self.state)


def run_sequence(
    cluster: Cluster,
    count: int,
    gpus: int,
    match: bool,
    given_node: bool,
    progress: Progress | None,
    label: str,
    policy: str = "first-fit",
) -> tuple[int, float]:
    """Allocate `count` claims one after the other; returns (allocated, CPU seconds).

    CPU time, not wall time: the benchmark machine is shared, and what we want to know is what
    one claim costs this process."""
    task = progress.add_task(label, total=count) if progress else None
    claims = [claim(f"c{gpus}-{i}", gpus, match) for i in range(count)]
    per_node = GPUS_PER_NODE // gpus
    allocated = 0
    choose: Callable[[int, Any], Any]
    if given_node:

        def choose(i: int, c: Any) -> Any:
            return cluster.allocator.allocate(cluster.node_list[i // per_node], [c])

    elif policy != "first-fit":
        chooser = (
            Chooser(cluster.allocator)
            if policy == "topology"
            else Chooser(cluster.allocator, optimise=False)
        )

        def choose(i: int, c: Any) -> Any:
            return chooser.choose(cluster.node_list, [c])

    else:

        def choose(i: int, c: Any) -> Any:
            return cluster.allocator.choose_node(cluster.node_list, [c])

    gc.collect()  # do not bill this run for the garbage of the cluster before it
    start = time.process_time()
    for i, c in enumerate(claims):
        outcome = choose(i, c)
        if outcome is not None and outcome.results is not None:
            cluster.state.apply(outcome.results)
            allocated += 1
        if progress is not None and task is not None:
            progress.advance(task)
    return allocated, time.process_time() - start


def run_churn(nodes: int, count: int) -> tuple[int, float, str]:
    """A `steps` problem through the contract: pods of 1/2/4/8 GPUs (NVLink-matched) arrive,
    30% of the time a random earlier one leaves. Returns (steps, CPU seconds, outcome counts)."""
    rng = random.Random(7)
    steps: list[dict[str, Any]] = []
    live: list[str] = []
    for i in range(count):
        if live and rng.random() < 0.3:
            steps.append({"release": [live.pop(rng.randrange(len(live)))]})
            continue
        gpus = rng.choice([1, 1, 2, 4, 8])
        devices: dict[str, Any] = {
            "requests": [
                {
                    "name": "gpus",
                    "exactly": {
                        "deviceClassName": DRIVER,
                        "count": gpus,
                        "selectors": [{"cel": {"expression": REQUEST_SELECTOR}}],
                    },
                }
            ],
            "constraints": [{"matchAttribute": f"{DRIVER}/nvlinkDomain"}],
        }
        name = f"pod-{i}"
        steps.append(
            {
                "allocate": [
                    {"metadata": {"name": name, "namespace": "churn"}, "spec": {"devices": devices}}
                ]
            }
        )
        live.append(f"churn/{name}")
    problem = {
        "id": "churn",
        "policy": "first-fit",
        "classes": [CLASS],
        "slices": [dgx_slice(f"node-{i:05d}") for i in range(nodes)],
        "steps": steps,
    }
    text = json.dumps(problem)
    gc.collect()
    start = time.process_time()
    answer = solve(json.loads(text), "first-fit")
    secs = time.process_time() - start
    counts = Counter(step["outcome"] for step in answer["steps"])
    return len(steps), secs, ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


# The default churn fleet's mix of machine types, per 1,000 nodes (GB200 trays in whole cliques).
FLEET_MIX = {"dgx-h100": 250, "hgx-b200": 100, "a100-mig": 100, "l4-pcie": 100, "gb200-tray": 450}


def run_fleet_day(nodes: int, hours: float, policy: str) -> tuple[int, float, str]:
    """The churn workload on a heterogeneous fleet of about `nodes` nodes as one `steps`
    document under `policy`. Returns (pods and gangs decided, CPU seconds incl. parsing,
    outcome counts)."""
    counts = {key: round(n * nodes / 1000) for key, n in FLEET_MIX.items()}
    counts["gb200-tray"] -= counts["gb200-tray"] % 18
    config = ChurnConfig(seed=1, hours=hours, load=1.3, fleet=Fleet(counts=counts), policy=policy)
    text = json.dumps(churn_problem(config))
    gc.collect()
    start = time.process_time()
    answer = solve(json.loads(text), policy)
    secs = time.process_time() - start
    counts_out = Counter(step["outcome"] for step in answer["steps"])
    decided = sum(n for outcome, n in counts_out.items() if outcome != "released")
    return decided, secs, ", ".join(f"{k} {v}" for k, v in sorted(counts_out.items()))


def run_rebuild(
    nodes: int, changes: int, policy: str, incremental: bool, progress: Progress, event: str
) -> float:
    """Median CPU ms of the engine's warm-up after one event, `changes` times, each on another
    node: `change` (a node's slice republished: a new generation, the same devices), `join` (a
    new node's slice written: its name sorts among the others, the slice comes last in the
    index, as a new key does) or `leave` (a node's slice deleted)."""
    docs = {f"node-{i:05d}": dgx_slice(f"node-{i:05d}") for i in range(nodes)}
    slices = {name: parse_resource_slice(doc) for name, doc in docs.items()}
    state = AllocatedState()
    engine = Engine([parse_device_class(CLASS)], policy, incremental=incremental)
    engine.decide([claim("first", 1, False)], slices.values(), 0, state)  # built; a recent shape
    rng = random.Random(1)
    names = sorted(docs)
    times = []
    what = "incremental" if incremental else "full"
    task = progress.add_task(f"{nodes}: {policy} {what} {event}s", total=changes)
    for version in range(1, changes + 1):
        name = rng.choice(names)
        if event == "change":
            docs[name]["spec"]["pool"]["generation"] += 1
            slices[name] = parse_resource_slice(docs[name])
        elif event == "join":  # sorts right after an existing node: the middle of the list
            joined = f"{name}-j{version}"
            docs[joined] = dgx_slice(joined)
            slices[joined] = parse_resource_slice(docs[joined])
        elif event == "leave":
            names.remove(name)
            del docs[name], slices[name]
        else:
            raise ValueError(event)
        gc.collect()
        began = time.process_time()
        engine.warm_up(slices.values(), version, state)
        times.append(time.process_time() - began)
        progress.advance(task)
    times.sort()
    return 1e3 * times[len(times) // 2]


REBUILD_EVENTS = ("change", "join", "leave")


def rebuild_figures(
    sizes: list[int], changes: int, events: list[str], console: Console, progress: Progress
) -> None:
    table = Table(
        title="engine rebuild after one node's slice changed, a node joined or left "
        f"(ms of CPU, median of {changes} events)"
    )
    for col in ("nodes", "policy", "event", "every node", "touched only", "ratio"):
        table.add_column(col, justify="right")
    rows = []
    for nodes in sizes:
        for policy in ("first-fit", "topology"):
            for event in events:
                full = run_rebuild(nodes, max(3, changes // 4), policy, False, progress, event)
                part = run_rebuild(nodes, changes, policy, True, progress, event)
                rows.append(
                    [
                        f"{nodes:,}",
                        policy,
                        event,
                        f"{full:.1f}",
                        f"{part:.2f}",
                        f"{full / part:.0f}x",
                    ]
                )
    for row in rows:
        table.add_row(*row)
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="cluster size for figures 1-2")
    parser.add_argument("--claims", type=int, default=2000, help="one-GPU claims to allocate")
    parser.add_argument("--big-claims", type=int, default=500, help="eight-GPU claims to allocate")
    parser.add_argument(
        "--scale",
        default="100,1000,3000,10000",
        help="cluster sizes (nodes, comma separated) for the growth table",
    )
    parser.add_argument("--scale-claims", type=int, default=400, help="claims per size")
    parser.add_argument(
        "--churn-steps", type=int, default=4000, help="steps of the contract churn figure"
    )
    parser.add_argument(
        "--fleet-nodes",
        type=int,
        default=1000,
        help="nodes of the heterogeneous churn fleet (figure 5; 0: skip)",
    )
    parser.add_argument(
        "--fleet-hours", type=float, default=1.0, help="hours of churn on that fleet"
    )
    parser.add_argument(
        "--topology-plain",
        action="store_true",
        help="also time topology with its optimisations off (slow: every node searched)",
    )
    parser.add_argument(
        "--rebuild",
        default="",
        help="only time the rebuild after a one-node slice change at these sizes (nodes, "
        "comma separated), every node vs the touched ones",
    )
    parser.add_argument("--rebuild-changes", type=int, default=20, help="events per figure")
    parser.add_argument(
        "--rebuild-events",
        default=",".join(REBUILD_EVENTS),
        help="which events --rebuild times (comma separated: change, join, leave)",
    )
    args = parser.parse_args(argv)
    policies = ["topology", "topology-plain"] if args.topology_plain else ["topology"]
    console = Console()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    if args.rebuild:
        with Progress(*columns, console=console, transient=True) as progress:
            sizes = [int(n) for n in args.rebuild.split(",") if n]
            events = [e for e in args.rebuild_events.split(",") if e]
            unknown = sorted(set(events) - set(REBUILD_EVENTS))
            if unknown:
                parser.error(f"unknown --rebuild-events: {', '.join(unknown)}")
            rebuild_figures(sizes, args.rebuild_changes, events, console, progress)
        return 0
    figures: list[tuple[str, str]] = []
    scale_rows: list[list[str]] = []
    with Progress(*columns, console=console, transient=True) as progress:
        for policy in ["first-fit", *policies]:
            cluster = Cluster(args.nodes, progress)
            done, secs = run_sequence(
                cluster, args.claims, 1, False, False, progress, f"{policy}: 1-GPU", policy
            )
            figures.append(
                (
                    f"{policy}: 1-GPU claims/s ({done} on {args.nodes} nodes, node chosen)",
                    f"{done / secs:,.0f}",
                )
            )
            cluster = Cluster(args.nodes, progress)
            done, secs = run_sequence(
                cluster, args.big_claims, 8, True, False, progress, f"{policy}: 8-GPU", policy
            )
            figures.append(
                (
                    f"{policy}: 8-GPU claims/s, matchAttribute nvlinkDomain "
                    f"({done} on {args.nodes} nodes)",
                    f"{done / secs:,.0f}",
                )
            )
        if args.churn_steps:
            progress.add_task(f"churn: {args.churn_steps} contract steps", total=None)
            steps, secs, outcomes = run_churn(args.nodes, args.churn_steps)
            figures.append(
                (
                    f"contract steps/s, churn of {steps} steps on {args.nodes} nodes "
                    f"(JSON in, incl. parsing; {outcomes})",
                    f"{steps / secs:,.0f}",
                )
            )
        if args.fleet_nodes:
            for policy in ("first-fit", "topology"):
                progress.add_task(f"{policy}: churn on a {args.fleet_nodes}-node fleet", total=None)
                decided, secs, outcomes = run_fleet_day(args.fleet_nodes, args.fleet_hours, policy)
                figures.append(
                    (
                        f"{policy}: pods and gangs decided/s, {args.fleet_hours:g} h of churn on "
                        f"a heterogeneous {args.fleet_nodes}-node fleet (steps document, "
                        f"incl. parsing; {outcomes})",
                        f"{decided / secs:,.0f}",
                    )
                )
        for nodes in [int(n) for n in args.scale.split(",") if n]:
            count = min(args.scale_claims, nodes * GPUS_PER_NODE)
            cluster = Cluster(nodes, progress)
            done1, secs1 = run_sequence(
                cluster, count, 1, False, False, progress, f"{nodes}: 1-GPU"
            )
            cluster = Cluster(nodes, progress)
            done2, secs2 = run_sequence(cluster, count, 1, False, True, progress, f"{nodes}: given")
            big = min(count, nodes)
            cluster = Cluster(nodes, progress)
            done8, secs8 = run_sequence(cluster, big, 8, True, False, progress, f"{nodes}: 8-GPU")
            row = [
                f"{nodes:,}",
                f"{1e6 * secs1 / max(done1, 1):,.0f}",
                f"{1e6 * secs2 / max(done2, 1):,.0f}",
                f"{1e6 * secs8 / max(done8, 1):,.0f}",
            ]
            allocated = [done1, done2, done8]
            for policy in policies:
                cluster = Cluster(nodes, progress)
                done_t, secs_t = run_sequence(
                    cluster, count, 1, False, False, progress, f"{nodes}: {policy} 1-GPU", policy
                )
                cluster = Cluster(nodes, progress)
                done_t8, secs_t8 = run_sequence(
                    cluster, big, 8, True, False, progress, f"{nodes}: {policy} 8-GPU", policy
                )
                row += [
                    f"{1e6 * secs_t / max(done_t, 1):,.0f}",
                    f"{1e6 * secs_t8 / max(done_t8, 1):,.0f}",
                ]
                allocated += [done_t, done_t8]
            scale_rows.append([*row, "/".join(str(n) for n in allocated)])
    table = Table(title="gpudra allocation, first-fit and topology (CPU time of this process)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in figures:
        table.add_row(name, value)
    console.print(table)
    growth = Table(
        title="per-claim cost by cluster size (µs of CPU per claim; ff: first-fit, "
        "topo: topology, plain: topology unoptimised; 1: one GPU, node chosen unless given; "
        "8: eight GPUs with matchAttribute)"
    )
    short = {"topology": "topo", "topology-plain": "plain"}
    for col in (
        "nodes",
        "ff 1",
        "ff 1 given",
        "ff 8",
        *(f"{short[policy]} {what}" for policy in policies for what in ("1", "8")),
        "allocated",
    ):
        growth.add_column(col, justify="right")
    for row in scale_rows:
        growth.add_row(*row)
    if scale_rows:
        console.print(growth)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
