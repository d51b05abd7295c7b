"""`gpudra describe claim NAME`: a claim's request, allocation (devices with their attributes), the
allocator's explanation when it cannot be placed, and its events on the bus."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from gpudra_cli.errors import CliError
from gpudra_cli.standalone import cliargs, results
from gpudra_cli.standalone.connect import connected
from gpudra_cli.standalone.describe import describe_claim
from gpudra_cli.standalone.events import claim_events


async def _describe(args: argparse.Namespace) -> int:
    if args.kind not in ("claim", "claims", "resourceclaim", "resourceclaims"):
        raise CliError(f"cannot describe {args.kind!r}: only claims")
    missing: list[str] = []
    shown = 0
    async with connected(args) as (_, client):
        index = results.device_index(await client.slices())
        for name in args.names:
            # A name that is not found must not hide the others, as in kubectl.
            try:
                claim = await client.claim(name, args.namespace)
            except CliError as exc:
                missing.append(str(exc))
                continue
            events = await claim_events(client.nc, args.namespace, name)
            if shown:
                print()
            print("\n".join(describe_claim(claim, index, events)))
            shown += 1
    if missing:
        raise CliError("; ".join(missing))
    return 0


def run(args: argparse.Namespace) -> int:
    if not args.names:  # `nargs="*"` so that names may follow the flags (main._parse)
        raise CliError("name the claims to describe", exit_code=2)
    return asyncio.run(_describe(args))


def register(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser("describe", help="show one claim in detail, with its events")
    parser.add_argument("kind", help="claim")
    parser.add_argument("names", nargs="*", help="claim names (at least one)")
    parser.add_argument("-n", "--namespace", default="default", help="namespace of the claims")
    cliargs.add_state_file(parser)
    parser.set_defaults(func=run)
