"""`gpudra allocate`: the allocation-problem contract, JSON Lines in and out.

Reads one problem per line on stdin and answers each on stdout, in order, with the same `id`
(README, "Allocation problems"). Exits 0 when every line was answered — `error` outcomes included — and
non-zero only when stdin cannot be read at all.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpudra_alloc import run_lines
from gpudra_cli.errors import CliError

POLICIES = ("topology", "first-fit")


def run(args: argparse.Namespace) -> int:
    try:
        run_lines(sys.stdin, sys.stdout, args.policy or "topology")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read the problems on stdin: {exc}") from exc
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser(
        "allocate",
        help="solve allocation problems (JSON Lines on stdin, results on stdout)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--policy",
        choices=POLICIES,
        default=None,
        help="placement policy for problems that name none (default: each problem's own, "
        "else topology)",
    )
    parser.set_defaults(func=run)
