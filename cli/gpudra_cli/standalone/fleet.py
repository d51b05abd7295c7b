"""Simulated fleets for standalone mode: which nodes run, and which simulator profile each runs.

A fleet is a named list of (profile, count); node names are `<profile>-<i>` (valid DNS names, so
they are valid node names and NATS subject tokens). Nodes of the `gb200-nvl72-tray` profile share
the profile's fabric clique, so two or more of them form one GB200 NVLink clique. `parse_fleet`
accepts a fleet name or an inline `profile=count,...` list; anything else is a `FleetError` naming
what was wrong and what is available.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpudra_cli.standalone.errors import FleetError
from gpudra_nvml import profile_names

FLEETS: dict[str, tuple[tuple[str, int], ...]] = {
    # The demo's fleet: two DGX H100, one HGX B200, one A100 with MIG, one L4 node and a GB200
    # clique of two trays. Driver versions differ between profiles, so the drift report has
    # something to say.
    "default": (
        ("dgx-h100", 2),
        ("hgx-b200", 1),
        ("a100-mig", 1),
        ("l4-pcie", 1),
        ("gb200-nvl72-tray", 2),
    ),
    # One node of each kind that the examples need, for quick runs on a small machine.
    "small": (("dgx-h100", 1), ("hgx-b200", 1), ("a100-mig", 1), ("l4-pcie", 1)),
}


@dataclass(frozen=True)
class Node:
    name: str
    profile: str


@dataclass(frozen=True)
class Fleet:
    name: str
    nodes: tuple[Node, ...]

    @property
    def profiles(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.profile] = counts.get(node.profile, 0) + 1
        return counts


def build(name: str, spec: Iterable[tuple[str, int]]) -> Fleet:
    known = set(profile_names())
    nodes: list[Node] = []
    for profile, count in spec:
        if profile not in known:
            raise FleetError(
                f"unknown simulator profile {profile!r} (known: {', '.join(sorted(known))})"
            )
        if not 1 <= count <= 64:
            raise FleetError(f"{profile}: node count {count} is not between 1 and 64")
        start = sum(1 for n in nodes if n.profile == profile)
        nodes.extend(Node(f"{profile}-{start + i}", profile) for i in range(count))
    if not nodes:
        raise FleetError(f"fleet {name!r} has no nodes")
    return Fleet(name, tuple(nodes))


def parse_fleet(text: str) -> Fleet:
    """A fleet by name (`default`, `small`) or inline: `dgx-h100=2,l4-pcie=1`."""
    text = text.strip()
    if text in FLEETS:
        return build(text, FLEETS[text])
    if "=" not in text:
        raise FleetError(
            f"unknown fleet {text!r}: use one of {', '.join(sorted(FLEETS))} "
            "or a list like dgx-h100=2,l4-pcie=1"
        )
    spec: list[tuple[str, int]] = []
    for part in text.split(","):
        profile, sep, count = part.strip().partition("=")
        if not sep or not profile:
            raise FleetError(f"fleet entry {part!r} is not <profile>=<count>")
        try:
            spec.append((profile.strip(), int(count)))
        except ValueError as exc:
            raise FleetError(f"fleet entry {part!r}: {count!r} is not a number") from exc
    return build(text, spec)
