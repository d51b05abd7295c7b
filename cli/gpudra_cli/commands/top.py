"""`gpudra top`: GPU utilisation per device, claim and namespace, from the node-agents' samples
over a short window (`--seconds`): which allocated GPUs are actually computing."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from gpudra_cli.errors import CliError
from gpudra_cli.standalone import cliargs, listing, render, reports, results
from gpudra_cli.standalone.connect import connected


def device_cells(
    slices: list[dict[str, Any]], claims: list[dict[str, Any]], samples: reports.Samples
) -> list[dict[str, str]]:
    rows = []
    for d in listing.device_rows(slices, claims):
        if d["TYPE"] != "gpu":
            continue
        level = samples.mean(d["NODE"], d["DEVICE"])
        rows.append(
            {
                "NODE": d["NODE"],
                "DEVICE": d["DEVICE"],
                "GPU %": "no sample" if level is None else f"{level:.0f}",
                "CLAIM": d["CLAIM"],
                "NOTE": (
                    "allocated, idle"
                    if d["CLAIM"] and level is not None and level < reports.BUSY_PERCENT
                    else ""
                ),
            }
        )
    return rows


async def _top(args: argparse.Namespace) -> int:
    if args.seconds <= 0:
        raise CliError("--seconds must be > 0")
    async with connected(args) as (_, client):
        samples = reports.Samples()
        await samples.subscribe(client.nc)
        try:
            await asyncio.sleep(args.seconds)
        finally:
            await samples.unsubscribe()
        slices = await client.slices()
        claims = await client.claims()
    if not samples.sums:
        raise CliError(f"no utilisation samples in {args.seconds:g}s; are the node-agents up?")
    out = render.console()
    out.print(
        render.rows_table(
            device_cells(slices, claims, samples),
            ["NODE", "DEVICE", "GPU %", "CLAIM", "NOTE"],
            title="GPUs",
        )
    )
    use = reports.utilisation(claims, results.device_index(slices), samples)
    for table in render.utilisation_tables(use):
        out.print(table)
    return 0


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_top(args))


def register(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser("top", help="GPU utilisation per device, claim and namespace")
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="sampling window [seconds] (default 3)"
    )
    cliargs.add_state_file(parser)
    parser.set_defaults(func=run)
