"""`gpudra get claims|slices|nodes|devices [-o wide|yaml|json]`: what the running system holds."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import yaml

from gpudra_cli.errors import CliError
from gpudra_cli.standalone import cliargs, listing, render, results
from gpudra_cli.standalone.connect import connected

KINDS = {
    "claims": "claims",
    "claim": "claims",
    "resourceclaims": "claims",
    "resourceclaim": "claims",
    "slices": "slices",
    "slice": "slices",
    "resourceslices": "slices",
    "resourceslice": "slices",
    "nodes": "nodes",
    "node": "nodes",
    "devices": "devices",
    "device": "devices",
}
CLAIM_COLUMNS = ["NAMESPACE", "NAME", "STATE", "NODE", "DEVICES"]
CLAIM_WIDE = [*CLAIM_COLUMNS, "ASKS FOR", "NVLINK", "MIG", "CONSUMERS", "REASON"]
SLICE_COLUMNS = ["NAME", "NODE", "POOL", "GENERATION", "DEVICES"]
NODE_COLUMNS = ["NODE", "PROFILE", "READY", "GPUS", "MIG DEVICES", "ALLOCATED"]
DEVICE_COLUMNS = ["NODE", "DEVICE", "TYPE", "MEMORY", "NVLINK", "MIG PROFILE", "CLAIM"]


def claim_cells(row: results.Row) -> dict[str, str]:
    return {
        "NAMESPACE": row.namespace,
        "NAME": row.name,
        "STATE": row.state,
        "NODE": row.node,
        "DEVICES": ",".join(d.split("/", 1)[-1] for d in row.devices),
        "ASKS FOR": row.asks,
        "NVLINK": ",".join(row.nvlink_domains),
        "MIG": ",".join(row.mig_profiles),
        "REASON": row.reason,
    }


def consumers_cell(claim: dict[str, Any]) -> str:
    """The claim's consumers (`status.reservedFor`) by name, as `kubectl describe` lists them."""
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    return ",".join(str(r.get("name")) for r in reserved if isinstance(r, dict))


def emit(output: str, objects: list[Any], rows: list[dict[str, str]], columns: list[str]) -> None:
    if output == "json":
        print(json.dumps(render.as_list(objects), indent=1))
    elif output == "yaml":
        print(yaml.safe_dump(render.as_list(objects), sort_keys=False), end="")
    elif not rows:
        print("No resources found.")
    else:
        render.console().print(render.rows_table(rows, columns))


async def _get(args: argparse.Namespace) -> int:
    kind = KINDS.get(args.kind.lower())
    if kind is None:
        raise CliError(f"unknown kind {args.kind!r}: use claims, slices, nodes or devices")
    if args.names and kind != "claims":
        raise CliError(
            f"cannot get {kind} by name ({' '.join(args.names)}): names select claims only"
        )
    wide = args.output == "wide"
    async with connected(args) as (running, client):
        namespace = None if args.all_namespaces else args.namespace
        slices = await client.slices()
        if kind == "slices":
            emit(args.output, slices, listing.slice_rows(slices), SLICE_COLUMNS)
            return 0
        claims = await client.claims(namespace if kind == "claims" else None)
        if kind == "claims":
            wanted = [c for c in claims if not args.names or c["metadata"]["name"] in args.names]
            by_key = {
                f"{c['metadata'].get('namespace')}/{c['metadata']['name']}": c for c in wanted
            }
            cells = [
                claim_cells(r) | {"CONSUMERS": consumers_cell(by_key.get(r.key, {}))}
                for r in results.rows(wanted, slices)
            ]
            if wanted or not args.names:
                emit(args.output, wanted, cells, CLAIM_WIDE if wide else CLAIM_COLUMNS)
            found = {c["metadata"]["name"] for c in wanted}
            missing = [name for name in dict.fromkeys(args.names) if name not in found]
            if missing:  # what exists was shown; the rest is an error, as in kubectl
                scope, suffix = (f"{namespace}/", "") if namespace else ("", " in any namespace")
                raise CliError(f"claim {', '.join(scope + n for n in missing)} not found{suffix}")
        elif kind == "nodes":
            rows = listing.node_rows(slices, claims, running.nodes)
            columns = [*NODE_COLUMNS, "PRODUCT"] if wide else NODE_COLUMNS
            emit(args.output, list(rows), rows, columns)
        else:
            rows = listing.device_rows(slices, claims)
            columns = [*DEVICE_COLUMNS, "PRODUCT", "TAINTS"] if wide else DEVICE_COLUMNS
            emit(args.output, list(rows), rows, columns)
    return 0


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_get(args))


def register(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser("get", help="list claims, slices, nodes or devices")
    parser.add_argument("kind", help="claims, slices, nodes or devices")
    parser.add_argument("names", nargs="*", help="only these claims")
    parser.add_argument(
        "-o", "--output", choices=("table", "wide", "yaml", "json"), default="table"
    )
    parser.add_argument("-n", "--namespace", default="default", help="namespace of claims")
    parser.add_argument(
        "-A", "--all-namespaces", action="store_true", help="claims of every namespace"
    )
    cliargs.add_state_file(parser)
    parser.set_defaults(func=run)
