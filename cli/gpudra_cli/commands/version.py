"""`gpudra version`: the gpudra version and the versions of the parts it stands on."""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
from typing import Any

VERSION = "0.1.0"
_PARTS = ("nats-py", "grpcio", "protobuf", "cel-python", "kubernetes-asyncio", "nvidia-ml-py")


def _installed(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def lines() -> list[str]:
    out = [f"gpudra {VERSION} (Python {platform.python_version()})"]
    out.extend(f"  {dist:<20} {_installed(dist)}" for dist in _PARTS)
    return out


def run(args: argparse.Namespace) -> int:
    print("\n".join(lines()))
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser("version", help="print gpudra's version and its dependencies'")
    parser.set_defaults(func=run)
