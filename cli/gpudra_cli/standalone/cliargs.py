"""Arguments shared by the standalone commands: where the state file of a running system is."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpudra_cli.standalone import state


def add_state_file(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-file",
        type=Path,
        default=None,
        help=f"state file of the running system (default ${state.ENV} or ~/.gpudra/standalone.json)",
    )


def state_path(args: argparse.Namespace) -> Path:
    path: Path | None = getattr(args, "state_file", None)
    return path or state.default_path()
