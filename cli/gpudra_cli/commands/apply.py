"""`gpudra apply -f FILE|DIR`: create the ResourceClaims of manifests in the running system.

ResourceClaimTemplates referenced by workloads become one claim per pod, and the pods are recorded
(not run) so a pod's claims are allocated together (see `gpudra_cli.standalone.manifests`);
existing claims and pods are left unchanged. `--wait` waits for
gpudra's decisions (counting them on a terminal) and prints where each claim landed; claims still
undecided at `--timeout` are an error (exit 1), after the table.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudra_cli.errors import CliError
from gpudra_cli.standalone import cliargs, render, results
from gpudra_cli.standalone.apply import apply_plan, key_of, undecided, wait_decided
from gpudra_cli.standalone.connect import connected
from gpudra_cli.standalone.manifests import plan_files


async def _apply(args: argparse.Namespace) -> int:
    plan = plan_files(list(args.filename))
    async with connected(args) as (_, client):
        applied = await apply_plan(client, plan)  # pods recorded, so their claims go together
        for key in applied.created:
            print(f"resourceclaim/{key.split('/', 1)[1]} created")
        for key in applied.unchanged:
            print(f"resourceclaim/{key.split('/', 1)[1]} unchanged")
        for skipped in plan.skipped:
            print(f"{skipped.lower()} skipped (standalone mode runs no pods)")
        if args.wait:
            print(f"waiting for gpudra's decisions on {len(plan.claims)} claims", file=sys.stderr)
            keys = [key_of(c) for c in plan.claims]
            claims, allocate_ms = await wait_decided(
                client, keys, applied, timeout=args.timeout, settle=1.5, progress=_progress()
            )
            index = results.device_index(await client.slices())
            rows = [results.row_of(claims[k], index) for k in keys if k in claims]
            for row in rows:
                row.allocate_ms = allocate_ms.get(row.key)
            render.console().print(render.claims_table(rows))
            waiting = undecided(claims, keys)
            if waiting:  # the table shows them pending; a script must not read that as done
                shown = ", ".join(waiting[:5]) + (", ..." if len(waiting) > 5 else "")
                raise CliError(
                    f"no decision on {len(waiting)} of {len(keys)} claims after "
                    f"{args.timeout:g} s ({shown}); is the allocator running? "
                    "(`gpudra describe claim` shows their events)"
                )
    return 0


def _progress() -> Callable[[int, int], None]:
    """On a terminal, one line counting the claims decided so far, rewritten as it changes."""
    live = sys.stderr.isatty()

    def show(decided: int, total: int) -> None:
        if live:
            end = "\n" if decided == total else ""
            print(f"\r  {decided} of {total} claims decided", end=end, file=sys.stderr, flush=True)

    return show


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_apply(args))


def register(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser("apply", help="create the ResourceClaims of manifests")
    parser.add_argument(
        "-f",
        "--filename",
        type=Path,
        action="append",
        required=True,
        help="a YAML file or a folder of them (repeatable)",
    )
    parser.add_argument("--wait", action="store_true", help="wait for allocation and show it")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="how long --wait waits [seconds]"
    )
    cliargs.add_state_file(parser)
    parser.set_defaults(func=run)
