"""Costs of the URL, IP and CIDR functions (`lib_net`), as Kubernetes' cost estimator and
run-time tracker price them (k8s.io/apiserver/pkg/cel/library cost.go).

Kubernetes: parsing (`url`, `ip(string)`, `cidr`, `isIP`, `isCIDR`) is a string traversal, a
tenth of a unit per character; `ip.isCanonical` two tenths; `containsIP` compares two 16-byte
addresses (estimate 4, actual 1) and `containsCIDR` also masks (estimate 7, actual 3), each plus
a traversal when the argument is a string; accessors (`getHost`, `family`, `masked`, `cidr.ip()`,
...) and `isURL` one unit; `==` between IPs or CIDRs one unit. The estimate here adds gpudra's
one unit per call on top (an upper bound either way) and gives each result a size: an IP or CIDR
prints in at most 43 characters, a URL's parts are at most as long as its text (its escaped path
three times), so `string(ip(...)).size()` and `url(s).getHost().contains(...)` stay bounded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from gpudra_cel.netaddr import IPPrefix

__all__ = ["NET_RUNTIME_PRICES", "NET_VALUE_SIZE", "net_estimate"]

NET_VALUE_SIZE = 43  # the longest printed IP or CIDR: 8 groups of 4 hex digits, 7 colons, /128
_PARSES = frozenset({"url", "cidr", "isIP", "isCIDR"})
_URL_PARTS = frozenset({"getScheme", "getHost", "getHostname", "getPort"})
_NOMINAL = frozenset(
    {
        "isURL",
        "family",
        "isUnspecified",
        "isLoopback",
        "isLinkLocalMulticast",
        "isLinkLocalUnicast",
        "isGlobalUnicast",
        "prefixLength",
    }
)
_IP_BYTES = 16


def _tenth(n: int) -> int:
    return math.ceil(n * 0.1)


def net_estimate(
    fn: str, member: bool, subject_size: int, arg_sizes: Sequence[int], takes_string: bool
) -> tuple[int, int, int] | None:
    """(cost beyond gpudra's unit per call, result size, element size) of a `lib_net` call;
    `subject_size` is the receiver's (member calls) or first argument's size, `takes_string`
    whether an overload the checker kept takes a string argument. None: not a `lib_net` call."""
    if fn in _PARSES or (fn == "ip" and not member):
        size = subject_size if fn == "url" else NET_VALUE_SIZE
        return _tenth(subject_size), size, 1
    if fn == "ip.isCanonical":
        return math.ceil(subject_size * 0.2), 1, 1
    if fn in ("containsIP", "containsCIDR"):
        cost = _tenth(2 * _IP_BYTES)
        if fn == "containsCIDR":
            cost += _tenth(_IP_BYTES) + 1
        if takes_string and arg_sizes:
            cost += _tenth(arg_sizes[0])
        return cost, 1, 1
    if fn in ("ip", "masked"):  # cidr.ip(), cidr.masked()
        return 0, NET_VALUE_SIZE, 1
    if fn in _URL_PARTS:
        return 0, subject_size, 1
    if fn == "getEscapedPath":
        return 0, 3 * subject_size, 1
    if fn == "getQuery":  # at most one key per two characters, each value list as long
        return 0, subject_size, subject_size
    if fn in _NOMINAL:
        return 0, 1, 1
    return None


def _size(value: object) -> int:
    return len(value) if isinstance(value, str) else 1


def _contains(extra: int) -> Callable[[Sequence[object], object], int]:
    def price(values: Sequence[object], result: object) -> int:
        # Kubernetes: a tenth of twice the CIDR's size (1 for an opaque value), plus `extra`,
        # plus the parse of a string argument
        return _tenth(2) + extra + (_tenth(len(values[1])) if isinstance(values[1], str) else 0)

    return price


# function -> run-time price from the operand values (receiver first) and the result; the
# functions not listed cost the one unit every call costs
NET_RUNTIME_PRICES: dict[str, Callable[[Sequence[object], object], int]] = {
    "url": lambda v, r: _tenth(_size(v[0])),
    "cidr": lambda v, r: _tenth(_size(v[0])),
    "isIP": lambda v, r: _tenth(_size(v[0])),
    "isCIDR": lambda v, r: _tenth(_size(v[0])),
    "ip": lambda v, r: 1 if isinstance(v[0], IPPrefix) else _tenth(_size(v[0])),
    "ip.isCanonical": lambda v, r: math.ceil(_size(v[0]) * 0.2),
    "containsIP": _contains(0),
    "containsCIDR": _contains(_tenth(1) + 1),
}
