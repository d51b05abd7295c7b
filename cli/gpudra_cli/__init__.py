"""gpudra's one command-line interface: `./pants run //:gpudra -- <subcommand>`."""

from __future__ import annotations

from gpudra_cli.main import main

__all__ = ["main"]
