"""The subcommands: one module per command, named as the command, each with
`register(subparsers)`. Add a module and list its name in NAMES (sorted).

Modules are imported only when needed (`load`): the CLI imports just the module of the command it
runs, so `gpudra version` does not pay for the Kubernetes client, NATS or the allocation core
that other commands import (kubernetes-asyncio alone costs well over half a second).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

Register = Callable[["argparse._SubParsersAction[Any]"], None]

NAMES: tuple[str, ...] = (
    "allocate",
    "apply",
    "delete",
    "demo",
    "describe",
    "drift",
    "explain",
    "get",
    "profiles",
    "slices",
    "top",
    "up",
    "version",
)


def load(name: str) -> Register:
    """The `register` function of command `name` (one of NAMES), importing its module."""
    if name not in NAMES:
        raise ValueError(f"no command {name!r}")
    register: Register = importlib.import_module(f"{__name__}.{name}").register
    return register


__all__ = ["NAMES", "Register", "load"]
