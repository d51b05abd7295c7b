"""Load sweep of the churn benchmark: how the topology policy's gains depend on how loaded the fleet is.

    python bench/churn_sweep.py [--loads 1.5,2,2.5,3,3.5,4] [--seeds 1,2,4,5]
                                [--reserve 6] [--floor 6] [--mig-homes 1]
                                [--mix gpu-8-nvl=0.05,mig=0] [--reference kube-scheduler]
                                [--plot docs/churn-load-sweep.png]

For every (load, seed) it generates the churn day of `churn_bench.py` and replays it under
`first-fit` and `topology` (the same code as `churn_bench.py`, same defaults), then prints one row
per run and one summary line per load: the 8-GPU NVLink ratio (topology ÷ first-fit; the issue's
goal is ≥ 1.5 where first-fit places under 85 % of claims), the GPU-hours topology places minus
first-fit's (the issue requires ≥ 0) both as held (a MIG claim first-fit hands a whole GPU counts a
whole GPU) and as asked (every claim at its first alternative), and claims placed by each. Writes a PNG of the three against
load and the rows as JSON beside it. Simulated fleet; no GPU is touched.

`--mix` reweights the workload's shapes (as `churn_bench.py --mix`). `--reference kube-scheduler`
also replays each day under stock kube-scheduler's node choice (`churn_bench.KUBE_SCHEDULER`) and
adds topology's 8-GPU ratio and GPU-hours against it: context; the goal stays against first-fit.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, "") and "gpudra_alloc" not in sys.modules:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "libs"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from rich.console import Console
from rich.table import Table

from churn_bench import (
    KUBE_SCHEDULER,
    figures,
    full_mix,
    mix_label,
    mix_weights,
    progress_bar,
    run_policy,
)
from gpudra_alloc.workload import ChurnConfig, WorkloadError, churn_problem

GOAL_RATIO = 1.5
LOADED = 0.85  # the setting: first-fit places under this share of claims


@dataclass(frozen=True)
class Row:
    load: float
    seed: int
    placed_first_fit: float
    placed_topology: float
    large_first_fit: int
    large_topology: int
    gpu_hours_first_fit: float
    gpu_hours_topology: float
    asked_hours_first_fit: float
    asked_hours_topology: float
    # the kube-scheduler reference (`--reference kube-scheduler`), None without it
    placed_kube: float | None = None
    large_kube: int | None = None
    gpu_hours_kube: float | None = None
    asked_hours_kube: float | None = None

    @property
    def ratio(self) -> float:
        return self.large_topology / self.large_first_fit if self.large_first_fit else 0.0

    @property
    def ratio_kube(self) -> float | None:
        """8-GPU NVLink claims placed, topology ÷ kube-scheduler (0 when it placed none)."""
        if self.large_kube is None:
            return None
        return self.large_topology / self.large_kube if self.large_kube else 0.0

    @property
    def gpu_hours_gained_kube(self) -> float | None:
        """GPU-hours held, topology - kube-scheduler."""
        if self.gpu_hours_kube is None:
            return None
        return round(self.gpu_hours_topology - self.gpu_hours_kube, 1)

    @property
    def asked_hours_gained_kube(self) -> float | None:
        """GPU-hours as asked, topology - kube-scheduler."""
        if self.asked_hours_kube is None:
            return None
        return round(self.asked_hours_topology - self.asked_hours_kube, 1)

    @property
    def gpu_hours_gained(self) -> float:
        """GPU-hours held (a MIG claim given a whole GPU counts a whole GPU)."""
        return round(self.gpu_hours_topology - self.gpu_hours_first_fit, 1)

    @property
    def asked_hours_gained(self) -> float:
        """GPU-hours as asked (every claim counted at its first alternative: a 1g.10gb claim is
        1/8 of a GPU whatever it got; `churn_bench.asked_gpus`)."""
        return round(self.asked_hours_topology - self.asked_hours_first_fit, 1)


def floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text}") from exc


def ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text}") from exc


def sweep(args: argparse.Namespace, console: Console) -> list[Row]:
    mix = full_mix(args.mix)
    reference: str | None = args.reference
    problems = {
        (load, seed): churn_problem(ChurnConfig(seed=seed, hours=args.hours, load=load, mix=mix))
        for load in args.loads
        for seed in args.seeds
    }
    policies = ("first-fit", "topology", *((reference,) if reference else ()))
    rows: list[Row] = []
    total = len(policies) * sum(len(p["steps"]) for p in problems.values())
    with progress_bar(console) as progress:
        task = progress.add_task("replaying", total=total)
        for (load, seed), problem in problems.items():
            result: dict[str, dict[str, Any]] = {}
            for policy in policies:
                progress.update(task, description=f"load {load:g} seed {seed} {policy}")
                run = run_policy(
                    problem,
                    policy,
                    args.reserve,
                    args.floor,
                    False,
                    args.mig_homes,
                    progress,
                    task,
                    seed=seed,
                )
                result[policy] = figures(run, args.hours * 60)
            first, topo = result["first-fit"], result["topology"]
            kube = result.get(KUBE_SCHEDULER)
            rows.append(
                Row(
                    load=load,
                    seed=seed,
                    placed_first_fit=first["placedFraction"],
                    placed_topology=topo["placedFraction"],
                    large_first_fit=first["gpu8NvlinkPlaced"],
                    large_topology=topo["gpu8NvlinkPlaced"],
                    gpu_hours_first_fit=first["gpuHoursPlaced"],
                    gpu_hours_topology=topo["gpuHoursPlaced"],
                    asked_hours_first_fit=first["gpuHoursAsAsked"],
                    asked_hours_topology=topo["gpuHoursAsAsked"],
                    placed_kube=None if kube is None else kube["placedFraction"],
                    large_kube=None if kube is None else kube["gpu8NvlinkPlaced"],
                    gpu_hours_kube=None if kube is None else kube["gpuHoursPlaced"],
                    asked_hours_kube=None if kube is None else kube["gpuHoursAsAsked"],
                )
            )
    return rows


def summary(rows: list[Row]) -> list[dict[str, Any]]:
    """One line per load: mean and lowest ratio, seeds below first-fit's GPU-hours, and whether
    the load is the issue's setting on every seed (first-fit under 85 %)."""
    out = []
    for load in sorted({r.load for r in rows}):
        at = [r for r in rows if r.load == load]
        kube: dict[str, Any] = {}
        ratios = [r.ratio_kube for r in at if r.ratio_kube is not None]
        if ratios and len(ratios) == len(at):
            kube = {
                "meanRatioVsKubeScheduler": round(sum(ratios) / len(ratios), 3),
                "seedsBelowKubeSchedulerGpuHours": [
                    r.seed for r in at if (r.gpu_hours_gained_kube or 0.0) < 0
                ],
            }
        out.append(
            {
                "load": load,
                "meanRatio": round(sum(r.ratio for r in at) / len(at), 3),
                "minRatio": round(min(r.ratio for r in at), 3),
                "seedsAtGoal": [r.seed for r in at if r.ratio >= GOAL_RATIO],
                "seedsBelowFirstFitGpuHours": [r.seed for r in at if r.gpu_hours_gained < 0],
                "seedsBelowFirstFitAskedHours": [r.seed for r in at if r.asked_hours_gained < 0],
                "firstFitPlacedMax": max(r.placed_first_fit for r in at),
                "loadedOnEverySeed": all(r.placed_first_fit < LOADED for r in at),
            }
            | kube
        )
    return out


def report(console: Console, rows: list[Row], lines: list[dict[str, Any]]) -> None:
    table = Table(title="churn day per load and seed (first-fit → topology)")
    columns: tuple[str, ...] = (
        "load",
        "seed",
        "claims placed",
        "8-GPU NVLink",
        "ratio",
        "GPU-h held",
        "as asked",
    )
    kube = any(r.large_kube is not None for r in rows)
    if kube:
        columns += (
            f"{KUBE_SCHEDULER}: claims, 8-GPU",
            "ratio vs it",
            "GPU-h held vs it",
            "as asked vs it",
        )
    for column in columns:
        table.add_column(column, justify="right")
    for r in rows:
        cells = [
            f"{r.load:g}",
            str(r.seed),
            f"{r.placed_first_fit:.1%} → {r.placed_topology:.1%}",
            f"{r.large_first_fit} → {r.large_topology}",
            f"{r.ratio:.2f}",
            f"{r.gpu_hours_gained:+.1f}",
            f"{r.asked_hours_gained:+.1f}",
        ]
        if kube:
            cells += [
                f"{r.placed_kube or 0.0:.1%}, {r.large_kube}",
                f"{r.ratio_kube or 0.0:.2f}",
                f"{r.gpu_hours_gained_kube or 0.0:+.1f}",
                f"{r.asked_hours_gained_kube or 0.0:+.1f}",
            ]
        table.add_row(*cells)
    console.print(table)
    per_load = Table(title=f"per load (goal: ratio ≥ {GOAL_RATIO}, GPU-hours never below)")
    for column in (
        "load",
        "mean ratio",
        "min",
        "seeds ≥ goal",
        "below GPU-h held",
        "below as asked",
        "loaded",
    ):
        per_load.add_column(column, justify="right")
    for line in lines:
        per_load.add_row(
            f"{line['load']:g}",
            f"{line['meanRatio']:.2f}",
            f"{line['minRatio']:.2f}",
            ",".join(map(str, line["seedsAtGoal"])) or "-",
            ",".join(map(str, line["seedsBelowFirstFitGpuHours"])) or "-",
            ",".join(map(str, line["seedsBelowFirstFitAskedHours"])) or "-",
            "yes" if line["loadedOnEverySeed"] else f"no (ff ≤ {line['firstFitPlacedMax']:.1%})",
        )
    console.print(per_load)
    for line in lines:
        if "meanRatioVsKubeScheduler" in line:
            below = ",".join(map(str, line["seedsBelowKubeSchedulerGpuHours"])) or "none"
            console.print(
                f"load {line['load']:g}: topology ÷ {KUBE_SCHEDULER} 8-GPU ratio, mean "
                f"{line['meanRatioVsKubeScheduler']:.2f}; seeds below its GPU-hours held: {below}"
            )


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loads = sorted({r.load for r in rows})
    seeds = sorted({r.seed for r in rows})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    panels: tuple[tuple[Callable[[Row], float], str, float], ...] = (
        (lambda r: r.ratio, "8-GPU NVLink claims placed, topology ÷ first-fit", GOAL_RATIO),
        (
            lambda r: r.gpu_hours_gained,
            "GPU-hours, topology - first-fit (solid: held; dotted: as asked)",
            0.0,
        ),
        (lambda r: 100 * r.placed_first_fit, "claims placed by first-fit (%)", 100 * LOADED),
    )
    for ax, (value, label, line) in zip(axes, panels, strict=True):
        for seed in seeds:
            by_load = {r.load: value(r) for r in rows if r.seed == seed}
            drawn = ax.plot(loads, [by_load[x] for x in loads], marker="o", label=f"seed {seed}")
            if ax is axes[1]:
                asked = {r.load: r.asked_hours_gained for r in rows if r.seed == seed}
                ax.plot(
                    loads,
                    [asked[x] for x in loads],
                    linestyle=":",
                    color=drawn[0].get_color(),
                )
        ax.axhline(line, color="black", linestyle="--", linewidth=1)
        ax.set_xlabel("offered load (GPU-time ÷ capacity)")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("churn day under first-fit and topology, by load (dashed: the issue's lines)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=floats, default=[1.5, 2.0, 2.5, 3.0, 3.5, 4.0])
    parser.add_argument("--seeds", type=ints, default=[1, 2, 4, 5])
    parser.add_argument("--hours", type=float, default=24.0, help="length of the day, hours")
    parser.add_argument("--reserve", type=int, default=6, help="as churn_bench.py")
    parser.add_argument("--floor", type=int, default=6, help="as churn_bench.py")
    parser.add_argument("--mig-homes", type=int, default=1, help="as churn_bench.py")
    parser.add_argument(
        "--mix",
        type=mix_weights,
        default=None,
        metavar="SHAPE=W,...",
        help="workload shape weights to change, as churn_bench.py (0 drops a shape)",
    )
    parser.add_argument(
        "--reference",
        choices=(KUBE_SCHEDULER,),
        default=None,
        help="also replay under this reference and compare topology with it",
    )
    parser.add_argument(
        "--plot",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "docs" / "churn-load-sweep.png",
        help="where the PNG goes (the rows go beside it as .json)",
    )
    args = parser.parse_args(argv)
    if not args.loads or not args.seeds:
        parser.error("--loads and --seeds need at least one value each")
    try:
        ChurnConfig(mix=full_mix(args.mix))
    except WorkloadError as exc:
        parser.error(f"argument --mix: {exc}")
    console = Console()
    console.print(f"mix {mix_label(args.mix)}")
    rows = sweep(args, console)
    lines = summary(rows)
    report(console, rows, lines)
    plot(rows, args.plot)
    out = {
        "config": vars(args) | {"plot": args.plot.name, "mix": full_mix(args.mix)},
        "rows": [asdict(r) | {"ratio": round(r.ratio, 3)} for r in rows],
        "perLoad": lines,
    }
    args.plot.with_suffix(".json").write_text(json.dumps(out, indent=2) + "\n")
    console.print(f"plot: {args.plot}; rows: {args.plot.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
