"""`gpudra drift`: nodes whose driver or CUDA driver version differs from the fleet's majority, as
the inventory last summarised it, and the CEL selector that keeps claims off them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gpudra_cli.errors import CliError
from gpudra_cli.standalone import cliargs, render, reports, session, state


def run(args: argparse.Namespace) -> int:
    running = state.load(cliargs.state_path(args))
    path = session.drift_path(Path(running.run_dir))
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise CliError("no drift summary from the inventory yet; try again in a moment") from exc
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read the drift summary {path}: {exc}") from exc
    drift = reports.drift(summary)
    if args.output == "json":
        render.print_json(drift.as_json() if drift else None)
        return 0
    out = render.console()
    out.print(render.drift_table(drift))
    if drift is not None and drift.exclude_selector:
        out.print(f"Exclude the outliers with:\n  {drift.exclude_selector}", markup=False)
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser("drift", help="driver / CUDA version drift across the fleet")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    cliargs.add_state_file(parser)
    parser.set_defaults(func=run)
