"""The subcommands. Add a module with `register(subparsers)` and list it in REGISTRY (sorted)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from gpudra_cli.commands import allocate, profiles, slices, version

Register = Callable[["argparse._SubParsersAction[Any]"], None]

REGISTRY: tuple[Register, ...] = (
    allocate.register,
    profiles.register,
    slices.register,
    version.register,
)

__all__ = ["REGISTRY", "Register"]
