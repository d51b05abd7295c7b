"""`gpudra delete claim NAME... | -f FILE|DIR`: delete ResourceClaims; the allocator frees their
devices once the claim-writer has seen the deletion. Every claim named is tried; those that could
not be deleted (not found) are reported together at the end, with exit code 1."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from gpudra_cli.errors import CliError
from gpudra_cli.standalone import cliargs
from gpudra_cli.standalone.connect import connected
from gpudra_cli.standalone.manifests import plan_files


def targets(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(namespace, name) of every claim to delete."""
    if args.filename:
        plan = plan_files(list(args.filename))
        return [(c["metadata"]["namespace"], c["metadata"]["name"]) for c in plan.claims]
    if args.kind not in ("claim", "claims", "resourceclaim", "resourceclaims"):
        raise CliError(f"cannot delete {args.kind!r}: only claims can be deleted")
    if not args.names:
        raise CliError("name the claims to delete, or pass -f FILE")
    return [(args.namespace, name) for name in args.names]


async def _delete(args: argparse.Namespace) -> int:
    wanted = targets(args)
    failed: list[str] = []
    async with connected(args) as (_, client):
        for namespace, name in wanted:
            # One claim that is gone (or cannot be deleted) must not keep the rest, as in
            # kubectl: `delete -f` after a claim was deleted by hand still deletes the others.
            try:
                await client.delete_claim(name, namespace)
            except CliError as exc:
                failed.append(str(exc))
                continue
            print(f'resourceclaim "{name}" deleted')
    if failed:
        raise CliError("; ".join(failed))
    return 0


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_delete(args))


def register(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser("delete", help="delete ResourceClaims")
    parser.add_argument("kind", nargs="?", default="claim", help="claim (the only kind)")
    parser.add_argument("names", nargs="*", help="claim names")
    parser.add_argument("-n", "--namespace", default="default", help="namespace of the claims")
    parser.add_argument(
        "-f", "--filename", type=Path, action="append", help="delete the claims of these manifests"
    )
    cliargs.add_state_file(parser)
    parser.set_defaults(func=run)
