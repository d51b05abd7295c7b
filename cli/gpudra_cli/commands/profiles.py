"""`gpudra profiles`: the simulator profiles gpudra ships (simulated machines, not hardware)."""

from __future__ import annotations

import argparse
from typing import Any

from gpudra_cli.errors import CliError
from gpudra_nvml import ProfileError, load_profile, profile_names


def lines() -> list[str]:
    out = []
    for name in profile_names():
        try:
            profile = load_profile(name)
        except ProfileError as exc:
            raise CliError(str(exc)) from exc
        out.append(
            f"{name:<18} {len(profile.gpus)} x {profile.model.name:<24} {profile.description}"
        )
    return out


def run(args: argparse.Namespace) -> int:
    print("\n".join(lines()))
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser("profiles", help="list the node-agent's simulator profiles")
    parser.set_defaults(func=run)
