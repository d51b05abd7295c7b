"""`gpudra up`: start the standalone system (embedded NATS, simulated fleet, every service as a
process) and keep it running until Ctrl-C; the other commands find it through the state file."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from gpudra_cli.commands.demo import progress_printer
from gpudra_cli.standalone import cliargs, reports, session, state
from gpudra_cli.standalone.client import Client
from gpudra_cli.standalone.fleet import FLEETS, parse_fleet
from gpudra_cli.standalone.showcase import wait_for_pools
from gpudra_cli.standalone.system import System


async def _up(args: argparse.Namespace) -> int:
    path = cliargs.state_path(args)
    with state.owned(path):  # before anything starts: a second `up` is refused even then
        return await _up_owned(args, path)


async def _up_owned(args: argparse.Namespace, path: Path) -> int:
    # Every system that writes the state file owns it first, so a state file found now is left
    # by one that died without cleaning up (its pid may be another process's by now): `hold`
    # replaces it.
    fleet = parse_fleet(args.fleet)
    system = System(fleet, store_dir=args.store_dir, tracing=not args.no_tracing)
    show = progress_printer(True)
    try:
        system.start_nats(show)
        client = await Client.open(system.nats_url)
        samples = reports.Samples()
        try:
            await samples.subscribe(client.nc)
            await system.prepare_bus()
            await asyncio.to_thread(system.start_services, show)
            show("waiting for every node's ResourceSlices")
            await wait_for_pools(client, [n.name for n in fleet.nodes], system=system)
            print(
                f"gpudra is up: {len(fleet.nodes)} simulated nodes "
                f"({', '.join(f'{n} x {p}' for p, n in fleet.profiles.items())}), "
                f"NATS {system.nats_url}\nlogs: {system.log_dir}\nstate: {path}\n"
                "Try `gpudra apply -f examples/`, `gpudra get claims`; Ctrl-C stops everything.",
                file=sys.stderr,
            )
            await session.hold(system, path, samples)
        finally:
            await samples.unsubscribe()
            await client.close()
    finally:
        await asyncio.to_thread(system.stop)
    failed = {name: code for name, code in system.exit_codes.items() if code != 0}
    if failed:
        print(
            f"gpudra up: services exited uncleanly: {failed}; logs kept in {system.log_dir}",
            file=sys.stderr,
        )
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    with session.interrupts():
        return asyncio.run(_up(args))


def register(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser(
        "up", help="start gpudra on this machine (simulated fleet) and keep it running"
    )
    parser.add_argument(
        "--fleet",
        default="default",
        help=f"fleet: {', '.join(sorted(FLEETS))}, or a list like dgx-h100=2,l4-pcie=1",
    )
    parser.add_argument(
        "--store-dir",
        type=Path,
        default=None,
        help="NATS store, logs and kubelet directories (default: a temp dir removed at the end)",
    )
    parser.add_argument("--no-tracing", action="store_true", help="services export no spans")
    cliargs.add_state_file(parser)
    parser.set_defaults(func=run)
