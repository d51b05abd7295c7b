"""`gpudra explain claim NAME`: why a claim is (or is not) where it is — the allocation search run
again on the system's current slices, with a per-request, per-stage breakdown when it does not
fit. Uses the built-in DeviceClasses unless `--device-classes` names a file."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from gpudra_alloc.builtin import builtin_class_documents
from gpudra_cli.errors import CliError
from gpudra_cli.standalone import cliargs, explaining
from gpudra_cli.standalone.connect import connected


async def _explain(args: argparse.Namespace) -> int:
    if args.kind not in ("claim", "claims", "resourceclaim", "resourceclaims"):
        raise CliError(f"cannot explain {args.kind!r}: only claims")
    classes = (
        explaining.load_classes(args.device_classes)
        if args.device_classes
        else builtin_class_documents()
    )
    async with connected(args) as (_, client):
        claim = await client.claim(args.name, args.namespace)
        others = await client.claims()
        slices = await client.slices()
    lines = await asyncio.to_thread(explaining.explain, claim, others, slices, classes)
    print("\n".join(lines))
    return 0


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_explain(args))


def register(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser("explain", help="why a claim is (not) allocated, stage by stage")
    parser.add_argument("kind", help="claim")
    parser.add_argument("name", help="claim name")
    parser.add_argument("-n", "--namespace", default="default", help="namespace of the claim")
    parser.add_argument(
        "--device-classes",
        type=Path,
        default=None,
        help="DeviceClasses YAML (default: the built-in classes)",
    )
    cliargs.add_state_file(parser)
    parser.set_defaults(func=run)
