"""The DRA CEL environment's function table: every overload by name, from all libraries."""

from __future__ import annotations

from types import MappingProxyType

from gpudra_cel.functions import Overload
from gpudra_cel.lib_core import CORE_OVERLOADS
from gpudra_cel.lib_format_k8s import FORMAT_OVERLOADS
from gpudra_cel.lib_kube import KUBE_OVERLOADS
from gpudra_cel.lib_lists import LIST_OVERLOADS
from gpudra_cel.lib_net import NET_OVERLOADS
from gpudra_cel.lib_strings import STRING_OVERLOADS
from gpudra_cel.lib_time import TIME_OVERLOADS

__all__ = ["FUNCTIONS"]


def _index(*groups: tuple[Overload, ...]) -> MappingProxyType[str, tuple[Overload, ...]]:
    table: dict[str, list[Overload]] = {}
    for group in groups:
        for ov in group:
            table.setdefault(ov.name, []).append(ov)
    return MappingProxyType({name: tuple(ovs) for name, ovs in table.items()})


FUNCTIONS = _index(
    CORE_OVERLOADS,
    STRING_OVERLOADS,
    KUBE_OVERLOADS,
    LIST_OVERLOADS,
    NET_OVERLOADS,
    FORMAT_OVERLOADS,
    TIME_OVERLOADS,
)
