"""The subcommands. Add a module with `register(subparsers)` and list it in REGISTRY (sorted)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from gpudra_cli.commands import (
    allocate,
    apply,
    delete,
    demo,
    describe,
    drift,
    explain,
    get,
    profiles,
    slices,
    top,
    up,
    version,
)

Register = Callable[["argparse._SubParsersAction[Any]"], None]

REGISTRY: tuple[Register, ...] = (
    allocate.register,
    apply.register,
    delete.register,
    demo.register,
    describe.register,
    drift.register,
    explain.register,
    get.register,
    profiles.register,
    slices.register,
    top.register,
    up.register,
    version.register,
)

__all__ = ["REGISTRY", "Register"]
