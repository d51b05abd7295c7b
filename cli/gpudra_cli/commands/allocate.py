"""`gpudra allocate`: the allocation-problem contract, JSON Lines in and out.

Reads one problem per line on stdin and answers each on stdout, in order, with the same `id`
(README, "Allocation problems"); a line that is not UTF-8 is answered with an `error`. Exits 0
when every line was answered — `error` outcomes included — and non-zero only when stdin cannot be
read at all.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO, TextIO

from gpudra_alloc import run_lines
from gpudra_cli.errors import CliError

POLICIES = ("topology", "first-fit")


def _lines(stdin: TextIO) -> Iterator[str | UnicodeDecodeError]:
    """Each line of stdin, decoded as UTF-8 (what JSON is) on its own, or why it is not UTF-8.
    Not through stdin's own decoder: that follows the locale, which either fails the whole
    stream at one bad byte (UTF-8 locales: strict) or lets the bytes through as surrogates into
    ids and names (C.UTF-8: surrogateescape)."""
    buffer: BinaryIO | None = getattr(stdin, "buffer", None)
    if buffer is None:  # already text (embedded use, tests)
        yield from stdin
        return
    for raw in buffer:
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield exc


def run(args: argparse.Namespace) -> int:
    policy = args.policy or "topology"
    try:
        for line in _lines(sys.stdin):
            if isinstance(line, UnicodeDecodeError):
                answer = {"id": None, "outcome": "error", "error": f"not UTF-8: {line}"}
                sys.stdout.write(json.dumps(answer, separators=(",", ":")) + "\n")
                sys.stdout.flush()
            else:
                run_lines(io.StringIO(line), sys.stdout, policy)
    except BrokenPipeError:
        raise  # stdout, not stdin: the reader went away (`main` ends quietly)
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
