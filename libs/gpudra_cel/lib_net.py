"""Kubernetes' URL, IP and CIDR CEL libraries (`k8s.io/apiserver/pkg/cel/library` urls.go,
ip.go, cidr.go), part of the base environment Kubernetes gives DRA selectors.

- URL: `url(s)` (an absolute URI or an absolute path, else an evaluation error), `isURL(s)`,
  `getScheme()`, `getHost()` (`[::1]:80`), `getHostname()` (`::1`), `getPort()` (`""` when
  absent or empty), `getEscapedPath()`, `getQuery()` (`map(string, list(string))`); see `neturl`.
- IP: `ip(s)`, `isIP(s)`, `ip.isCanonical(s)` (an error for a non-IP), `family()`,
  `isUnspecified()`, `isLoopback()`, `isLinkLocalMulticast()`, `isLinkLocalUnicast()`,
  `isGlobalUnicast()`, `string(ip)`, `==`. Zones (`fe80::1%eth0`) and IPv4-mapped IPv6
  (`::ffff:1.2.3.4`) are rejected, IPv4 octets with leading zeros too; see `netaddr`.
- CIDR: `cidr(s)` (host bits allowed: `cidr("10.0.0.1/8").ip()` is `10.0.0.1`), `isCIDR(s)`,
  `containsIP(ip | string)`, `containsCIDR(cidr | string)`, `ip()`, `masked()`,
  `prefixLength()`, `string(cidr)`, `==` (host bits count: `cidr("10.0.0.1/8") !=
  cidr("10.0.0.0/8")`).

Error messages are Kubernetes' (`IP Address "x" parse error during conversion from string:
ParseAddr("x"): unable to parse IP`). Costs are priced in `net_cost`.
"""

from __future__ import annotations

from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.functions import Overload, overload
from gpudra_cel.netaddr import IPAddr, IPPrefix, go_quote, parse_addr, parse_prefix
from gpudra_cel.neturl import ParsedURL, is_url, parse_url
from gpudra_cel.types import BOOL, CIDR, INT, IP, STRING, URL, list_of, map_of

__all__ = ["NET_OVERLOADS", "cidr", "ip", "url"]


# ---------------------------------------------------------------------------- IP
def ip(text: str) -> IPAddr:
    """Kubernetes' `ip(text)`."""
    try:
        addr = parse_addr(text)
    except CelEvaluationError as exc:
        raise CelEvaluationError(
            f"IP Address {go_quote(text)} parse error during conversion from string: {exc}"
        ) from None
    if addr.zone:
        raise CelEvaluationError(f"IP address {go_quote(text)} with zone value is not allowed")
    if addr.is4in6:
        raise CelEvaluationError(f"IPv4-mapped IPv6 address {go_quote(text)} is not allowed")
    return addr


def _is_ip(text: str) -> bool:
    try:
        ip(text)
    except CelEvaluationError:
        return False
    return True


def _is_canonical(text: str) -> bool:
    return str(ip(text)) == text


# ---------------------------------------------------------------------------- CIDR
_CIDR_ERROR = "network address parse error during conversion from string"


def cidr(text: str) -> IPPrefix:
    """Kubernetes' `cidr(text)` (its messages repeat their prefix, as Kubernetes' do)."""
    try:
        prefix = parse_prefix(text)
    except CelEvaluationError as exc:
        raise CelEvaluationError(f"{_CIDR_ERROR}: {_CIDR_ERROR}: {exc}") from None
    if prefix.addr.is4in6:
        raise CelEvaluationError(
            f"{_CIDR_ERROR}: IPv4-mapped IPv6 address {go_quote(text)} is not allowed"
        )
    return prefix


def _is_cidr(text: str) -> bool:
    try:
        cidr(text)
    except CelEvaluationError:
        return False
    return True


# ---------------------------------------------------------------------------- URL
def url(text: str) -> ParsedURL:
    """Kubernetes' `url(text)`."""
    try:
        return parse_url(text)
    except CelEvaluationError as exc:
        raise CelEvaluationError(f"URL parse error during conversion from string: {exc}") from None


_QUERY = map_of(STRING, list_of(STRING))

NET_OVERLOADS: tuple[Overload, ...] = (
    overload("url", None, (STRING,), URL, url),
    overload("isURL", None, (STRING,), BOOL, is_url),
    overload("getScheme", URL, (), STRING, lambda u: u.scheme),
    overload("getHost", URL, (), STRING, ParsedURL.get_host),
    overload("getHostname", URL, (), STRING, ParsedURL.get_hostname),
    overload("getPort", URL, (), STRING, ParsedURL.get_port),
    overload("getEscapedPath", URL, (), STRING, ParsedURL.escaped_path),
    overload("getQuery", URL, (), _QUERY, ParsedURL.query),
    overload("ip", None, (STRING,), IP, ip),
    overload("isIP", None, (STRING,), BOOL, _is_ip),
    overload("ip.isCanonical", None, (STRING,), BOOL, _is_canonical),
    overload("family", IP, (), INT, lambda a: a.family),
    overload("isUnspecified", IP, (), BOOL, IPAddr.is_unspecified),
    overload("isLoopback", IP, (), BOOL, IPAddr.is_loopback),
    overload("isLinkLocalMulticast", IP, (), BOOL, IPAddr.is_link_local_multicast),
    overload("isLinkLocalUnicast", IP, (), BOOL, IPAddr.is_link_local_unicast),
    overload("isGlobalUnicast", IP, (), BOOL, IPAddr.is_global_unicast),
    overload("string", None, (IP,), STRING, str),
    overload("cidr", None, (STRING,), CIDR, cidr),
    overload("isCIDR", None, (STRING,), BOOL, _is_cidr),
    overload("containsIP", CIDR, (IP,), BOOL, IPPrefix.contains),
    overload("containsIP", CIDR, (STRING,), BOOL, lambda c, s: c.contains(ip(s))),
    overload("containsCIDR", CIDR, (CIDR,), BOOL, IPPrefix.contains_prefix),
    overload("containsCIDR", CIDR, (STRING,), BOOL, lambda c, s: c.contains_prefix(cidr(s))),
    overload("ip", CIDR, (), IP, lambda c: c.addr),
    overload("masked", CIDR, (), CIDR, IPPrefix.masked),
    overload("prefixLength", CIDR, (), INT, lambda c: c.bits),
    overload("string", None, (CIDR,), STRING, str),
)
