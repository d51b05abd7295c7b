"""`gpudra slices`: the ResourceSlices the inventory will publish for one node.

With `--profile`, the node is a simulator profile and the output says so in a leading comment
(YAML) or in the List's metadata annotations (JSON); without it, the host's real NVML is read.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

from gpudra_cli.errors import CliError
from gpudra_nvml import NvmlError, open_adapter, snapshot
from gpudra_slices import DEFAULT_DRIVER, SliceError, SliceOptions, build_slices


def render(args: argparse.Namespace) -> str:
    try:
        opened = open_adapter(profile=args.profile or "")
        try:
            inventory = snapshot(opened.adapter.discover(), args.node, opened.source)
        finally:
            opened.adapter.stop()
        inventory.generation = 1
        slices = build_slices(
            inventory, SliceOptions(driver=args.driver, dynamic_mig=not args.no_dynamic_mig)
        )
    except (NvmlError, SliceError) as exc:
        raise CliError(str(exc)) from exc
    origin = (
        f"SIMULATED node (profile {args.profile}), not real hardware"
        if args.profile
        else "NVML on this host"
    )
    if args.output == "json":
        doc = {
            "apiVersion": "v1",
            "kind": "List",
            "metadata": {"annotations": {"gpudra.dev/source": origin}},
            "items": slices,
        }
        return json.dumps(doc, indent=2)
    return f"# {origin}\n" + yaml.safe_dump_all(slices, sort_keys=False, explicit_start=True)


def run(args: argparse.Namespace) -> int:
    print(render(args), end="" if args.output == "yaml" else "\n")
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser(
        "slices", help="print the ResourceSlices inventory publishes for a node"
    )
    parser.add_argument(
        "--profile",
        default="",
        help="simulator profile (see `gpudra profiles`); default: real NVML",
    )
    parser.add_argument("--node", required=True, help="node name (a DNS subdomain); names the pool")
    parser.add_argument(
        "-o", "--output", choices=("yaml", "json"), default="yaml", help="output format"
    )
    parser.add_argument(
        "--driver", default=DEFAULT_DRIVER, help="DRA driver name (default: %(default)s)"
    )
    parser.add_argument("--no-dynamic-mig", action="store_true", help="omit free MIG placements")
    parser.set_defaults(func=run)
