"""`gpudra demo`: the whole of gpudra on this machine, with simulated GPUs, in one command.

Starts the embedded NATS, a simulated fleet (one node-agent and one kubelet-plugin per node) and
the inventory, allocator and claim-writer as processes; applies the examples; prints where each
claim landed (or why it cannot), the CDI devices the kubelet plugins prepared, one claim's trace
across the services, and the utilisation and version-drift reports. Everything is stopped at the
end or on Ctrl-C, unless `--keep-running` keeps the system up for the other commands.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from rich.console import Console

from gpudra_cli.standalone import cliargs, render, session, state
from gpudra_cli.standalone.examples import find_examples
from gpudra_cli.standalone.fleet import FLEETS, parse_fleet
from gpudra_cli.standalone.showcase import run_demo
from gpudra_cli.standalone.system import System


def progress_printer(enabled: bool) -> Any:
    err = Console(stderr=True, highlight=False)

    def show(message: str) -> None:
        if enabled:
            err.print(f"[dim]•[/] {message}")

    return show


async def _demo(args: argparse.Namespace) -> int:
    fleet = parse_fleet(args.fleet)
    examples = find_examples(args.examples)
    system = System(fleet, store_dir=args.store_dir, tracing=True)
    show = progress_printer(not args.json or sys.stderr.isatty())
    try:
        result, client = await run_demo(system, examples, args.trace_file, show)
        try:
            if not args.json:
                render.print_demo(render.console(), result)
            if args.keep_running:
                print(
                    f"gpudra keeps running (NATS {system.nats_url}, logs {system.log_dir}); "
                    "try `gpudra get claims`. Ctrl-C stops it.",
                    file=sys.stderr,
                )
                await session.hold(system, cliargs.state_path(args), result.samples)
        finally:
            await result.samples.unsubscribe()
            await client.close()
    finally:
        await asyncio.to_thread(system.stop)
    if result.trace is not None and system.collector is not None:
        system.collector.write_otlp_json(Path(result.trace.file))
    result.exit_codes = dict(system.exit_codes)
    if args.json:
        render.print_json(result.as_json())
    failed = {name: code for name, code in system.exit_codes.items() if code != 0}
    if failed:
        print(
            f"gpudra demo: services exited uncleanly: {failed}; logs kept in {system.log_dir}",
            file=sys.stderr,
        )
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    # --keep-running ends holding the state file: own it from the start, as `up` does, so that
    # neither takes over the other's file (and hides the other's system) while both run.
    owned = state.owned(cliargs.state_path(args)) if args.keep_running else nullcontext()
    with session.interrupts(), owned:
        return asyncio.run(_demo(args))


def register(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser(
        "demo",
        help="run gpudra on this machine with a simulated GPU fleet and show what it does",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--fleet",
        default="default",
        help=f"fleet: {', '.join(sorted(FLEETS))}, or a list like dgx-h100=2,l4-pcie=1",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--keep-running", action="store_true", help="keep the system up for the other commands"
    )
    parser.add_argument(
        "--store-dir",
        type=Path,
        default=None,
        help="NATS store, logs and kubelet directories (default: a temp dir removed at the end)",
    )
    parser.add_argument(
        "--trace-file", type=Path, default=None, help="write all traces as OTLP JSON here"
    )
    parser.add_argument("--examples", type=Path, default=None, help="folder of manifests to apply")
    cliargs.add_state_file(parser)
    parser.set_defaults(func=run)
