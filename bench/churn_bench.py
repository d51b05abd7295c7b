"""Churn benchmark: the same day of arrivals and departures under `first-fit` and `topology`.

    python bench/churn_bench.py [--seed 1] [--load 3.0] [--reserve 6] [--floor 6]
                                [--mig-homes 1 | --hold-mig-domains] [--node-order shuffled]
                                [--mix gpu-8-nvl=0.05,mig=0] [--policies first-fit topology]
                                [--plot docs/churn-free-capacity.png]

Generates the seeded churn workload (`gpudra_alloc.workload`; `--mix` reweights its shapes),
replays it once per policy with
pending pods retried as capacity frees (`gpudra_alloc.placement.replay`), and reports: claims
placed by shape, 8-GPU NVLink claims placed (topology / first-fit), GPU-hours placed, GPUs
stranded (free while some pod is pending: unusable for every pending shape), mean time-to-place
(steps and minutes, placed pods only), placement throughput (attempts per second of placement
work), and why 8-GPU pods waited: GPU-hours of the large NVLink domains by node type and by the
shape holding them, sampled while an 8-GPU pod is pending; GPU-hours placed by shape, and
GPU-hours idle while some pod is pending by node type (free whole GPUs, those the topology
reserve holds or the MIG home guards, free MIG slices). Writes a PNG of the free-capacity shape over the day for both policies, and the figures as
JSON next to it. Simulated fleet; no GPU is touched.

`kube-scheduler` (`--policies first-fit topology kube-scheduler`) is a reference, not an
allocator policy: Kubernetes' device choice on a node drawn at random among the feasible ones
(`Replay(node_choice="random")`, seeded from the workload seed), as stock kube-scheduler places
these pods; topology's 8-GPU ratio and GPU-hours are then reported against it too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, "") and "gpudra_alloc" not in sys.modules:  # pragma: no cover
    # `python bench/churn_bench.py` from a checkout: find the libs the way Pants' source roots do
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "libs"))

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpudra_alloc.placement.choose import MIG_HOME
from gpudra_alloc.placement.replay import PodRecord, Replay, large_pods_waiting
from gpudra_alloc.placement.topology import NodeView
from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_alloc.workload import (
    DEFAULT_MIX,
    GANGS,
    SHAPES,
    ChurnConfig,
    WorkloadError,
    churn_problem,
)
from gpudra_alloc.workload.fleet import MACHINE_LABEL

POLICIES = ("first-fit", "topology")
KUBE_SCHEDULER = "kube-scheduler"  # a reference: first-fit's search, a random feasible node
SAMPLE_MINUTES = 10.0
WARMUP_MINUTES = 180.0
LARGE_WAITER = "gpu-8-nvl"  # the shape whose waits `large_domain_use` explains
CATEGORIES = (
    "free in whole 8-GPU domains",
    "free in whole 4-GPU domains",
    "free in partly used domains / PCIe",
    "free MIG slices (GPU share)",
)


@dataclass
class Sample:
    at: float
    shape: tuple[float, float, float, float]
    pending: int
    stranded: int


@dataclass
class Run:
    policy: str
    replay: Replay
    samples: list[Sample] = field(default_factory=list)
    wall_s: float = 0.0
    # while an 8-GPU pod waits: GPU-hours of large NVLink domains by (node type, what held them)
    large_use: dict[tuple[str, str], float] = field(default_factory=dict)
    minutes_waiting: float = 0.0
    large_gpus: dict[DeviceID, tuple[str, float]] | None = None
    # while any pod is pending: GPU-hours idle by (node type, why: free / held / slices)
    idle_pending: dict[tuple[str, str], float] = field(default_factory=dict)


def mix_weights(text: str) -> dict[str, float]:
    """`--mix SHAPE=W,...`: weights of `DEFAULT_MIX` shapes to change (0 drops a shape); the
    shapes not named keep their default weight. Raises ArgumentTypeError naming the shapes."""
    shapes = f"shapes: {', '.join(DEFAULT_MIX)}"
    out: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        shape, sep, weight = (x.strip() for x in item.partition("="))
        if not sep:
            raise argparse.ArgumentTypeError(f"{item!r}: expected SHAPE=WEIGHT ({shapes})")
        if shape not in DEFAULT_MIX:
            raise argparse.ArgumentTypeError(f"unknown shape {shape!r} ({shapes})")
        try:
            value = float(weight)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{shape}: weight {weight!r} is not a number ({shapes})"
            ) from None
        if not 0 <= value < float("inf"):
            raise argparse.ArgumentTypeError(
                f"{shape}: weight must be a finite number >= 0, not {weight!r} ({shapes})"
            )
        out[shape] = value
    if not out:
        raise argparse.ArgumentTypeError(f"no SHAPE=WEIGHT given ({shapes})")
    return out


def full_mix(changes: dict[str, float] | None) -> dict[str, float]:
    """`DEFAULT_MIX` with `changes` applied (None: the default mix)."""
    return dict(DEFAULT_MIX) | (changes or {})


def mix_label(changes: dict[str, float] | None) -> str:
    """How a run's header names its mix: "default", or the changed weights."""
    if not changes:
        return "default"
    return "default with " + ", ".join(f"{k}={v:g}" for k, v in sorted(changes.items()))


def compare(topo: dict[str, Any], other: dict[str, Any]) -> tuple[float, float]:
    """Topology's 8-GPU NVLink claims placed ÷ `other`'s (0 when `other` placed none) and its
    GPU-hours minus `other`'s."""
    ratio = 0.0
    if other["gpu8NvlinkPlaced"]:
        ratio = topo["gpu8NvlinkPlaced"] / other["gpu8NvlinkPlaced"]
    return ratio, topo["gpuHoursPlaced"] - other["gpuHoursPlaced"]


def large_gpus(replay: Replay) -> dict[DeviceID, tuple[str, float]]:
    """Every device of a large NVLink domain (>= 8 GPUs): its node type and its GPU share."""
    out: dict[DeviceID, tuple[str, float]] = {}
    for node in replay.nodes:
        view = replay.chooser.view(node)
        kind = node.labels.get(MACHINE_LABEL, node.name)
        large = [g for g in view.gpus if g.domain and view.domain_sizes[g.domain] >= 8]
        for gpu in large:
            out[gpu.id] = (kind, 1.0)
        sets = {g.counter_set for g in large if g.counter_set is not None}
        for part in view.partitions:
            if part.counter_set in sets:
                share = len(part.counters) / len(view.counter_names[part.counter_set])
                out[part.id] = (kind, share)
    return out


def large_domain_use(run: Run, minutes: float) -> None:
    """While a LARGE_WAITER pod waits: add `minutes` of what sits on the large NVLink domains
    (GPUs by node type and by the shape of the pod holding them, "free" for free whole GPUs)."""
    replay = run.replay
    if not any(r.shape == LARGE_WAITER for r in replay.pending):
        return
    if run.large_gpus is None:
        run.large_gpus = large_gpus(replay)
    run.minutes_waiting += minutes
    use = run.large_use
    for record in replay.records:
        if record.placed_step is None or record.released_at is not None:
            continue
        for result in record.results:
            for r in result.results:
                found = run.large_gpus.get(DeviceID(r.driver, r.pool, r.device))
                if found is not None:
                    key = (found[0], record.shape)
                    use[key] = use.get(key, 0.0) + found[1] * minutes / 60
    for node in replay.nodes:
        view = replay.chooser.view(node)
        free = view.free(replay.allocator.state)
        kind = node.labels.get(MACHINE_LABEL, node.name)
        for domain, count in free.domains.items():
            if domain and view.domain_sizes[domain] >= 8:
                use[(kind, "free")] = use.get((kind, "free"), 0.0) + count * minutes / 60


IDLE_FREE = "free GPUs"
IDLE_HELD = "held by the reserve"
IDLE_HOME = "in the MIG home"
IDLE_SLICES = "free MIG slices (GPU share)"


def idle_while_pending(run: Run, minutes: float) -> None:
    """While any pod is pending: add `minutes` of idle capacity by node type and by why it is
    idle: free whole GPUs of a domain the topology reserve holds (`IDLE_HELD`) or of the MIG
    home (`IDLE_HOME`), other free whole GPUs, and the free counters of partitioned GPUs as a
    GPU share (`IDLE_SLICES`). Every idle GPU-hour here is one the day did not place."""
    replay = run.replay
    if not replay.pending:
        return
    state = replay.allocator.state
    chooser = replay.chooser
    held: set[tuple[str, str]] = set()
    if replay.policy == "topology" and chooser.reserve > 0:
        count = min(chooser.reserve, max(chooser.reserve_floor, large_pods_waiting(replay.pending)))
        held = chooser.held_domains(state, count) if count > 0 else set()
    use = run.idle_pending
    for node in replay.nodes:
        view = chooser.view(node)
        free = view.free(state)
        kind = node.labels.get(MACHINE_LABEL, node.name)
        for domain, count in free.domains.items():
            why = IDLE_FREE
            if (node.name, domain) in held:
                why = IDLE_HELD
            elif (node.name, MIG_HOME + domain) in held:
                why = IDLE_HOME
            use[(kind, why)] = use.get((kind, why), 0.0) + count * minutes / 60
        for key, (counters, _) in free.partitioned.items():
            share = counters / len(view.counter_names[key])
            use[(kind, IDLE_SLICES)] = use.get((kind, IDLE_SLICES), 0.0) + share * minutes / 60


def asked_gpus(shape: str) -> float | None:
    """The GPUs a pod of `shape` asks for first (a gang: all its pods; MIG: its 1g.10gb slice,
    1/8 of a GPU), from the workload's shape table; None for a shape the table lacks."""
    if shape in GANGS:
        gang = GANGS[shape]
        return gang.pods * SHAPES[gang.pod_shape].gpus
    if shape in SHAPES:
        return SHAPES[shape].gpus
    return None


def gpu_share(views: dict[str, NodeView], record: PodRecord) -> float:
    """GPUs an allocation takes: a whole GPU counts 1, a partition its share of the counters."""
    whole: dict[DeviceID, float] = {}
    for view in views.values():
        for gpu in view.gpus:
            whole[gpu.id] = 1.0
        for part in view.partitions:
            whole[part.id] = len(part.counters) / len(view.counter_names[part.counter_set])
    total = 0.0
    for result in record.results:
        for r in result.results:
            total += whole.get(DeviceID(r.driver, r.pool, r.device), 1.0)
    return total


def sample(replay: Replay, at: float) -> Sample:
    state: AllocatedState = replay.allocator.state
    whole8 = whole4 = broken = mig = 0.0
    free_gpus = 0
    for node in replay.nodes:
        view = replay.chooser.view(node)
        free = view.free(state)
        for domain, count in free.domains.items():
            size = view.domain_sizes[domain]
            free_gpus += count
            if domain and count == size and size >= 8:
                whole8 += count
            elif domain and count == size and size >= 4:
                whole4 += count
            else:
                broken += count
        for key, (counters, _) in free.partitioned.items():
            mig += counters / len(view.counter_names[key])
    pending = len(replay.pending)
    return Sample(at, (whole8, whole4, broken, mig), pending, free_gpus if pending else 0)


def progress_bar(console: Console) -> Progress:
    """The churn benches' progress display: what runs, a bar, steps done of all, time taken."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


def run_policy(
    problem: dict[str, Any],
    policy: str,
    reserve: int,
    floor: int,
    hold_mig: bool,
    mig_homes: int,
    progress: Progress,
    task: Any,
    home_whole: bool = False,
    whole_tray: float = 0.0,
    seed: int = 0,
    slice_packing: float = 0.0,
) -> Run:
    """Replay `problem` under `policy` (`first-fit`, `topology` or `KUBE_SCHEDULER`, whose random
    node choice is drawn from `seed`), sampling the fleet every SAMPLE_MINUTES."""
    if policy == KUBE_SCHEDULER:
        replay = Replay.from_problem(problem, "first-fit", node_choice="random", seed=seed)
    else:
        replay = Replay.from_problem(
            problem, policy, *((reserve, floor) if policy == "topology" else (0, 0))
        )
    replay.chooser.hold_mig_domains = hold_mig
    replay.chooser.mig_homes = mig_homes
    replay.chooser.home_whole = home_whole
    replay.chooser.whole_tray = whole_tray
    replay.chooser.slice_packing = slice_packing
    run = Run(policy, replay)
    next_sample = 0.0
    start = time.perf_counter()
    for index, step in enumerate(problem["steps"]):
        at = replay.times[index]
        while at >= next_sample:
            run.samples.append(sample(replay, next_sample))
            large_domain_use(run, SAMPLE_MINUTES)
            idle_while_pending(run, SAMPLE_MINUTES)
            next_sample += SAMPLE_MINUTES
        replay.step(index, step)
        progress.advance(task)
    run.wall_s = time.perf_counter() - start
    return run


def figures(run: Run, day_minutes: float) -> dict[str, Any]:
    replay = run.replay
    views = replay.chooser.views
    for node in replay.nodes:
        replay.chooser.view(node)
    by_shape: dict[str, list[int]] = {}
    hours_by_shape: dict[str, float] = {}
    gpu_hours = 0.0
    asked_hours = 0.0
    waits_steps: list[int] = []
    waits_min: list[float] = []
    for record in replay.records:
        counts = by_shape.setdefault(record.shape, [0, 0])
        counts[1] += 1
        if record.placed_step is None or record.placed_at is None:
            continue
        counts[0] += 1
        end = record.released_at if record.released_at is not None else day_minutes
        share = gpu_share(views, record)
        hours = share * (end - record.placed_at) / 60
        gpu_hours += hours
        asked = asked_gpus(record.shape)
        asked_hours += (share if asked is None else asked) * (end - record.placed_at) / 60
        hours_by_shape[record.shape] = hours_by_shape.get(record.shape, 0.0) + hours
        waits_steps.append(record.placed_step - record.arrived_step)
        waits_min.append(record.placed_at - record.arrived_at)
    placed = sum(c[0] for c in by_shape.values())
    arrived = sum(c[1] for c in by_shape.values())
    stranded = [s.stranded for s in run.samples]
    use = run.large_use
    return {
        "policy": run.policy,
        "placedByShape": {
            k: {"placed": v[0], "arrived": v[1]} for k, v in sorted(by_shape.items())
        },
        "placed": placed,
        "arrived": arrived,
        "placedFraction": round(placed / arrived, 4) if arrived else 0.0,
        "gpu8NvlinkPlaced": by_shape.get(LARGE_WAITER, [0, 0])[0],
        # the same shape counted per pod, gang pods included (a gang of 2 x 8 GPUs counts 2)
        "gpu8NvlinkPodsPlaced": by_shape.get(LARGE_WAITER, [0, 0])[0]
        + sum(
            gang.pods * by_shape.get(key, [0, 0])[0]
            for key, gang in GANGS.items()
            if gang.pod_shape == LARGE_WAITER
        ),
        "gpuHoursPlaced": round(gpu_hours, 1),
        # a MIG claim counts the share of the GPU it got: a 1g.10gb slice 1/8, a full GPU 1
        # every pod counted at the GPUs it asks for first (a MIG claim 1/8 of a GPU, whether
        # it got a slice or fell back to a whole GPU): GPU-time of the work placed
        "gpuHoursAsAsked": round(asked_hours, 1),
        "gpuHoursByShape": {k: round(v, 1) for k, v in sorted(hours_by_shape.items())},
        "gpuHoursIdleWhilePending": {
            f"{kind} / {why}": round(hours, 1)
            for (kind, why), hours in sorted(run.idle_pending.items())
        },
        "meanGpusStranded": round(sum(stranded) / len(stranded), 2) if stranded else 0.0,
        "meanStepsToPlace": round(sum(waits_steps) / len(waits_steps), 2) if waits_steps else 0.0,
        "meanMinutesToPlace": round(sum(waits_min) / len(waits_min), 1) if waits_min else 0.0,
        "placementAttempts": replay.attempts,
        "placementSeconds": round(replay.seconds, 2),
        "attemptsPerSecond": round(replay.attempts / replay.seconds, 1) if replay.seconds else 0.0,
        "wallSeconds": round(run.wall_s, 1),
        "minutesWith8GpuPodWaiting": round(run.minutes_waiting),
        "largeDomainGpuHoursWhile8GpuPodWaits": {
            f"{kind} / {shape}": round(hours, 1) for (kind, shape), hours in sorted(use.items())
        },
    }


def plot(runs: list[Run], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, grid = plt.subplots(
        len(runs), 1, figsize=(11, 3.4 * len(runs)), sharex=True, sharey=True, squeeze=False
    )
    axes = list(grid[:, 0])
    colors = ("#1b7837", "#7fbf7b", "#d6604d", "#8073ac")
    for ax, run in zip(axes, runs, strict=True):
        hours = [s.at / 60 for s in run.samples]
        series = [[s.shape[i] for s in run.samples] for i in range(len(CATEGORIES))]
        ax.stackplot(hours, *series, labels=CATEGORIES, colors=colors, alpha=0.9)
        ax.set_ylabel("free GPUs")
        ax.set_title(f"{run.policy}")
        twin = ax.twinx()
        twin.plot(
            hours, [s.pending for s in run.samples], color="black", lw=1, label="pods pending"
        )
        twin.set_ylabel("pods pending")
        if run is runs[0]:
            handles, labels = ax.get_legend_handles_labels()
            h2, l2 = twin.get_legend_handles_labels()
            ax.legend(handles + h2, labels + l2, loc="upper left", fontsize=8, ncol=3)
    # The empty fleet of the first hours would dwarf the day; clip the y axis to what follows.
    later = [sum(x.shape) for run in runs for x in run.samples if x.at >= WARMUP_MINUTES]
    top = max(20.0, 1.3 * max(later, default=0.0))
    for ax in axes:
        ax.set_ylim(0, top)
    axes[-1].set_xlabel(f"hour of the day (free GPUs clipped at {top:.0f})")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(console: Console, results: list[dict[str, Any]]) -> None:
    table = Table(title="claims placed by shape (placed / arrived)")
    table.add_column("shape")
    for r in results:
        table.add_column(r["policy"], justify="right")
    shapes = sorted({k for r in results for k in r["placedByShape"]})
    for shape in shapes:
        cells = []
        for r in results:
            c = r["placedByShape"].get(shape, {"placed": 0, "arrived": 0})
            cells.append(f"{c['placed']} / {c['arrived']}")
        table.add_row(shape, *cells)
    console.print(table)
    summary = Table(title="the day, per policy")
    summary.add_column("figure")
    for r in results:
        summary.add_column(r["policy"], justify="right")
    for key in (
        "placedFraction",
        "gpu8NvlinkPlaced",
        "gpu8NvlinkPodsPlaced",
        "gpuHoursPlaced",
        "gpuHoursAsAsked",
        "meanGpusStranded",
        "meanStepsToPlace",
        "meanMinutesToPlace",
        "placementAttempts",
        "attemptsPerSecond",
        "wallSeconds",
    ):
        summary.add_row(key, *(str(r[key]) for r in results))
    console.print(summary)
    console.print(
        figures_by_key(
            results,
            "largeDomainGpuHoursWhile8GpuPodWaits",
            "large NVLink domains while an 8-GPU pod waits (GPU-hours, sampled)",
            "node type / held by",
            [f"{r['policy']} ({r['minutesWith8GpuPodWaiting']} min)" for r in results],
        )
    )
    console.print(
        figures_by_key(
            results,
            "gpuHoursByShape",
            "GPU-hours placed by shape (a MIG claim: the share of the GPU it got)",
            "shape",
        )
    )
    idle = figures_by_key(
        results,
        "gpuHoursIdleWhilePending",
        "GPU-hours idle while some pod is pending (sampled)",
        "node type / why idle",
    )
    idle.add_row(
        "total", *(str(round(sum(r["gpuHoursIdleWhilePending"].values()), 1)) for r in results)
    )
    console.print(idle)


def figures_by_key(
    results: list[dict[str, Any]],
    field: str,
    title: str,
    first: str,
    headers: list[str] | None = None,
) -> Table:
    """One row per key of the policies' `field` mappings (sorted; 0.0 where a policy lacks it),
    one column per policy (headed by `headers`, else the policy's name)."""
    table = Table(title=title)
    table.add_column(first)
    for header in headers or [r["policy"] for r in results]:
        table.add_column(header, justify="right")
    for key in sorted({k for r in results for k in r[field]}):
        table.add_row(key, *(str(r[field].get(key, 0.0)) for r in results))
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="workload seed")
    parser.add_argument("--load", type=float, default=3.0, help="offered GPU-time / capacity")
    parser.add_argument("--hours", type=float, default=24.0, help="length of the day, hours")
    parser.add_argument(
        "--reserve", type=int, default=6, help="topology: most 8-GPU NVLink domains held whole"
    )
    parser.add_argument(
        "--floor", type=int, default=6, help="topology: domains held even when no big pod waits"
    )
    parser.add_argument(
        "--hold-mig-domains",
        action="store_true",
        help="topology: the reserve may hold every A100 (MIG-capable) NVLink domain, no MIG home",
    )
    parser.add_argument(
        "--mig-homes",
        type=int,
        default=1,
        help="topology: MIG-capable domains the reserve leaves to MIG (0: holds none of them)",
    )
    parser.add_argument(
        "--home-whole",
        action="store_true",
        help="topology: an 8-GPU claim may take the MIG home whole while none of its GPUs is "
        "partitioned",
    )
    parser.add_argument(
        "--whole-tray",
        type=float,
        default=0.0,
        help="topology: value of a whole free GB200 tray (keeps trays for 4-GPU work)",
    )
    parser.add_argument(
        "--slice-packing",
        type=float,
        default=0.0,
        help="topology: MIG slices onto the fullest partitioned GPU (weight; round 5 measured 0.3)",
    )
    parser.add_argument(
        "--policies",
        nargs="+",
        choices=(*POLICIES, KUBE_SCHEDULER),
        default=list(POLICIES),
        help=f"policies to run ({KUBE_SCHEDULER}: stock kube-scheduler's random feasible node, "
        "a reference)",
    )
    parser.add_argument(
        "--mix",
        type=mix_weights,
        default=None,
        metavar="SHAPE=W,...",
        help="workload shape weights to change, e.g. gpu-8-nvl=0.05,mig=0 (0 drops a shape; "
        f"defaults: {', '.join(f'{k}={v:g}' for k, v in DEFAULT_MIX.items())})",
    )
    parser.add_argument("--node-order", choices=("shuffled", "sorted"), default="shuffled")
    parser.add_argument(
        "--plot",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "docs" / "churn-free-capacity.png",
        help="where the PNG goes (the figures go beside it as .json)",
    )
    args = parser.parse_args(argv)

    mix = full_mix(args.mix)
    try:
        config = ChurnConfig(
            seed=args.seed, hours=args.hours, load=args.load, node_order=args.node_order, mix=mix
        )
    except WorkloadError as exc:
        parser.error(f"argument --mix: {exc}")
    console = Console()
    problem = churn_problem(config)
    steps = len(problem["steps"])
    console.print(
        f"fleet: {len(problem['nodes'])} nodes; {steps} steps; seed {args.seed}, "
        f"load {args.load:g}, node order {args.node_order}, "
        f"topology reserve {args.reserve} (floor {args.floor}"
        f"{', all MIG domains too' if args.hold_mig_domains else f', MIG homes {args.mig_homes}'})"
        f"; mix {mix_label(args.mix)}"
    )
    runs: list[Run] = []
    with progress_bar(console) as progress:
        tasks = {p: progress.add_task(p, total=steps) for p in args.policies}
        for policy in args.policies:
            runs.append(
                run_policy(
                    problem,
                    policy,
                    args.reserve,
                    args.floor,
                    args.hold_mig_domains,
                    args.mig_homes,
                    progress,
                    tasks[policy],
                    args.home_whole,
                    args.whole_tray,
                    args.seed,
                    args.slice_packing,
                )
            )
    day = args.hours * 60
    results = [figures(run, day) for run in runs]
    report(console, results)
    ratio = 0.0
    by = {r["policy"]: r for r in results}
    topo = by.get("topology")
    if topo is not None and "first-fit" in by:
        first = by["first-fit"]
        ratio, gained = compare(topo, first)
        console.print(
            f"8-GPU NVLink claims placed, topology / first-fit: {ratio:.2f} "
            f"(first-fit placed {first['placedFraction']:.1%} of all claims); "
            f"GPU-hours topology - first-fit: {gained:+.1f}"
        )
        mig = [r["gpuHoursByShape"].get("mig", 0.0) for r in (first, topo)]
        console.print(
            f"of which MIG claims: {mig[1] - mig[0]:+.1f} (first-fit {mig[0]:.1f}, topology "
            f"{mig[1]:.1f}); every other shape: {gained - (mig[1] - mig[0]):+.1f}; "
            f"counting every claim at the GPUs it asks for first: "
            f"{topo['gpuHoursAsAsked'] - first['gpuHoursAsAsked']:+.1f}"
        )
    kube: dict[str, float] = {}
    if topo is not None and KUBE_SCHEDULER in by:
        reference = by[KUBE_SCHEDULER]
        kube_ratio, kube_gained = compare(topo, reference)
        kube = {
            "ratio8": round(kube_ratio, 3),
            "gpuHoursGained": round(kube_gained, 1),
            "asAskedGained": round(topo["gpuHoursAsAsked"] - reference["gpuHoursAsAsked"], 1),
        }
        console.print(
            f"against {KUBE_SCHEDULER} (context; the goal is measured against first-fit): "
            f"8-GPU NVLink claims topology / {KUBE_SCHEDULER}: {kube_ratio:.2f} "
            f"({KUBE_SCHEDULER} placed {reference['placedFraction']:.1%} of all claims); "
            f"GPU-hours topology - {KUBE_SCHEDULER}: {kube_gained:+.1f} "
            f"(as asked {kube['asAskedGained']:+.1f})"
        )
    title = (
        f"free capacity over the day (seed {args.seed}, load {args.load:g}, "
        f"{sum(SHAPES[s].gpus > 0 for s in SHAPES)} claim shapes + gangs)"
    )
    plot(runs, args.plot, title)
    out: dict[str, Any] = {
        # beside the JSON: no machine path; the mix as used, every shape's weight
        "config": vars(args) | {"plot": args.plot.name, "mix": mix},
        "ratio8": round(ratio, 3),
        "policies": results,
    }
    if kube:
        out["topologyVsKubeScheduler"] = kube
    args.plot.with_suffix(".json").write_text(json.dumps(out, indent=2) + "\n")
    console.print(f"plot: {args.plot}; figures: {args.plot.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
