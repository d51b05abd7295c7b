"""Human output of the standalone commands: `rich` tables on a console (plain text when the output
is not a terminal), and one JSON document for `--json` / `-o json`.

Promises: every function only formats what it is given; long cells wrap (or fold, for long
names) instead of being cut, so a name is always shown whole and an explanation sentence too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from gpudra_cli.standalone import reports
from gpudra_cli.standalone.results import Row

# Names up to this long keep a line of their own in claim tables; longer ones fold onto the next
# lines. No cell is ever cut short ("…"): a name must be copyable into the next command, an
# explanation readable to its end, whatever the terminal's width.
NAME_WIDTH = 24
NAMES = ("NAMESPACE", "NAME", "NODE", "DEVICE", "CLAIM")  # the name columns of `rows_table`


def _list(items: Sequence[str], empty: str = "-") -> str:
    return ", ".join(items) if items else empty


def _compact_devices(row: Row) -> str:
    """`node/gpu-0..3` style: devices share the node, so name it once."""
    names = [d.split("/", 1)[-1] for d in row.devices]
    return _list(names)


def _name_column(names: Sequence[str]) -> dict[str, Any]:
    """A name column kept on one line while every name is at most NAME_WIDTH long (the other
    columns give way), else folded: a longer name would push them out of the table."""
    return {"no_wrap": all(len(n) <= NAME_WIDTH for n in names)}


def claims_table(rows: Sequence[Row], title: str = "Claims") -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAVY, title_justify="left", expand=False)
    for name, kwargs in (
        ("CLAIM", _name_column([r.name for r in rows])),
        ("ASKS FOR", {"ratio": 3}),
        ("NODE", _name_column([r.node for r in rows])),
        ("DEVICES", {"ratio": 2}),
        ("NVLINK", {}),
        ("MIG", {}),
        ("ALLOC", {"justify": "right", "no_wrap": True}),
    ):
        table.add_column(name, overflow="fold", **kwargs)
    for row in rows:
        if row.state == "allocated":
            chosen = sorted({r for r in row.requests if "/" in r})
            devices = _compact_devices(row) + (f" ({_list(chosen)})" if chosen else "")
            alloc = f"{row.allocate_ms:.0f} ms" if row.allocate_ms is not None else "-"
            table.add_row(
                row.name,
                row.asks,
                row.node,
                devices,
                _list(row.nvlink_domains),
                _list(row.mig_profiles),
                alloc,
            )
        else:
            why = row.reason or "pending: no decision yet"
            table.add_row(row.name, row.asks, f"[bold red]{row.state}[/]", why, "", "", "-")
    return table


def compact_cdi(ids: Sequence[str]) -> str:
    """`k8s.gpu.nvidia.com/claim=<uid>-{gpu-0,gpu-1}` for IDs that share everything up to the
    device name (the plugin names claim devices `<uid>-<device>`); otherwise one ID a line."""
    if len(ids) < 2:
        return "\n".join(ids)
    prefix = ids[0][: ids[0].index("=") + 1] if "=" in ids[0] else ""
    uid = ids[0][len(prefix) : len(prefix) + 36]
    head = f"{prefix}{uid}-"
    if not prefix or not all(i.startswith(head) for i in ids):
        return "\n".join(ids)
    return head + "{" + ",".join(i[len(head) :] for i in ids) + "}"


def prepared_table(rows: Sequence[Row]) -> Table:
    table = Table(
        title="Prepared through the kubelet plugins (NodePrepareResources over gRPC)",
        box=box.SIMPLE_HEAVY,
        title_justify="left",
    )
    shown = [r for r in rows if r.cdi_ids or r.prepare_error]
    table.add_column("CLAIM", overflow="fold", **_name_column([r.name for r in shown]))
    table.add_column("NODE", overflow="fold", **_name_column([r.node for r in shown]))
    table.add_column("CDI DEVICE IDS", overflow="fold")
    for row in rows:
        if row.cdi_ids:
            table.add_row(row.name, row.node, compact_cdi(row.cdi_ids))
        elif row.prepare_error:
            table.add_row(row.name, row.node, f"[red]error: {row.prepare_error}[/]")
    return table


def utilisation_tables(use: reports.Utilisation) -> list[Table]:
    per_claim = Table(
        title=f"Utilisation: allocated vs computing (GPU busy >= {reports.BUSY_PERCENT}%)",
        box=box.SIMPLE_HEAVY,
        title_justify="left",
    )
    for name in ("NAMESPACE", "CLAIM", "NODE", "ALLOCATED", "COMPUTING", "MEAN GPU %", "IDLE"):
        right = name.isupper() and " " in name
        per_claim.add_column(name, justify="right" if right else "left", overflow="fold")
    for c in use.claims:
        mean = f"{c.mean_percent:.0f}" if c.mean_percent is not None else "no sample"
        idle = _list(c.idle_devices, "")
        style = "[yellow]" if c.idle_devices else ""
        per_claim.add_row(
            c.namespace,
            c.name,
            c.node,
            str(c.allocated),
            f"{style}{c.computing}" if style else str(c.computing),
            mean,
            idle,
        )
    per_ns = Table(title="Utilisation per namespace", box=box.SIMPLE_HEAVY, title_justify="left")
    for name in ("NAMESPACE", "CLAIMS", "GPUS ALLOCATED", "GPUS COMPUTING", "IDLE CLAIMS"):
        per_ns.add_column(name, overflow="fold")
    for n in use.namespaces:
        per_ns.add_row(
            n.namespace,
            str(n.claims),
            str(n.allocated),
            str(n.computing),
            _list(n.idle_claims, ""),
        )
    return [per_claim, per_ns]


def drift_table(drift: reports.Drift | None) -> Table:
    table = Table(title="Version drift", box=box.SIMPLE_HEAVY, title_justify="left")
    table.add_column("NODE", no_wrap=True)
    table.add_column("DRIVER")
    table.add_column("CUDA DRIVER")
    if drift is None:
        table.add_row("(no drift summary received from the inventory)", "", "")
        return table
    table.add_row(
        "[bold]fleet majority[/]", drift.driver_majority or "-", drift.cuda_majority or "-"
    )
    for node, versions in drift.outliers.items():
        table.add_row(
            node, versions.get("driver", "= majority"), versions.get("cudaDriver", "= majority")
        )
    return table


def print_demo(console: Console, result: Any) -> None:
    """The demo's human output (`result` is a `showcase.DemoResult`)."""
    rows: list[Row] = result.rows
    console.print(claims_table(rows, title=f"Claims ({len(rows)} from the examples)"))
    console.print(prepared_table(rows))
    trace = result.trace
    if trace is not None:
        console.print(
            f"[bold]Trace of claim {trace.claim}[/] ({trace.trace_id or 'not found'}), "
            f"{len(trace.services)} services: {', '.join(trace.services)}"
        )
        for line in trace.tree:
            console.print("  " + line, highlight=False, markup=False)
        console.print(f"All {trace.spans_total} spans written as OTLP JSON to {trace.file}\n")
    for table in utilisation_tables(result.utilisation):
        console.print(table)
    console.print(drift_table(result.drift))
    if result.drift is not None and result.drift.exclude_selector:
        console.print(
            "To keep claims off the outliers, add this CEL selector to the claim or DeviceClass:\n"
            f"  {result.drift.exclude_selector}\n",
            highlight=False,
        )
    t = result.timings
    console.print(
        f"Timings: services up {t.get('start', 0):.1f} s, slices {t.get('slices', 0):.1f} s, "
        f"all claims decided {t.get('decided', 0):.1f} s after apply, "
        f"prepare {t.get('prepare', 0):.1f} s, total {t.get('total', 0):.1f} s",
        highlight=False,
    )


def console() -> Console:
    """stdout; wide enough for whole rows when it is a file or pipe (rich would use 80)."""
    out = Console(highlight=False)
    if not out.is_terminal:
        out = Console(highlight=False, width=160)
    return out


def print_json(doc: Any) -> None:
    print(json.dumps(doc, indent=1, sort_keys=False))


def rows_table(rows: Sequence[dict[str, str]], columns: Sequence[str], title: str = "") -> Table:
    """A kubectl-like table of `columns` (missing cells are empty)."""
    table = Table(title=title or None, box=box.SIMPLE, title_justify="left", pad_edge=False)
    for column in columns:
        kwargs = _name_column([r.get(column, "") for r in rows]) if column in NAMES else {}
        table.add_column(column, overflow="fold", **kwargs)
    for row in rows:
        table.add_row(*(row.get(c, "") for c in columns))
    return table


def as_list(items: Sequence[Any]) -> dict[str, Any]:
    """Objects as a Kubernetes `List` (what `kubectl get -o json` prints for several)."""
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}
