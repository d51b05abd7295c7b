"""Entry point: builds the argument parser from the command modules and runs one subcommand.

Each module in `gpudra_cli.commands` contributes one subcommand through
`register(subparsers) -> None`, which sets `func=<callable(args) -> int>` on its parser. When the
first argument names a command, only that command's module is imported and registered (start-up
cost is that command's own); otherwise (no command, `--help`, a typo) the full parser is built.
Errors a person can act on are `CliError`: one readable line on stderr and exit code 1, never a
traceback. A closed stdout (`gpudra ... | head`) ends the command quietly with 141, as SIGPIPE
ends other tools.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import sys
from collections.abc import Sequence

from gpudra_cli import commands
from gpudra_cli.errors import CliError

SIGPIPE_EXIT = 128 + signal.SIGPIPE  # what a shell reports for a tool ended by SIGPIPE

DESCRIPTION = """\
gpudra: Kubernetes Dynamic Resource Allocation for GPU clusters.
Structured GPU devices (MIG, NVLink, fabric cliques) published as ResourceSlices, claims selected with
CEL, allocation that is Kubernetes-exact and topology-aware."""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of command `only` alone."""
    parser = argparse.ArgumentParser(
        prog="gpudra",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    for name in (only,) if only is not None else commands.NAMES:
        commands.load(name)(sub)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`parser.parse_args(argv)`, but names may follow the flags, as kubectl takes them:
    argparse gives a `names` list after another positional only the words before the first flag
    (`get claims -o wide a b` left `a b` unrecognized)."""
    args, extra = parser.parse_known_args(argv)
    names = getattr(args, "names", None)
    if extra and isinstance(names, list) and not any(w.startswith("-") for w in extra):
        names.extend(extra)
        extra = []
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if parser is None:
        named = argv[0] if argv and argv[0] in commands.NAMES else None
        parser = build_parser(named)
    args = _parse(parser, argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    try:
        code: int = func(args)
    except CliError as exc:
        print(f"gpudra {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"gpudra {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        if not _stdout_gone():
            raise  # another pipe or socket: a real error, not the reader of our output
        # The reader went away (`gpudra ... | head`): end as a process killed by SIGPIPE does,
        # quietly. stdout goes to /dev/null first, or the interpreter's last flush fails again.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return SIGPIPE_EXIT
    return code


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (poll reports an error on it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (OSError, ValueError):
        return False
