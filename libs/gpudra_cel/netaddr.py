"""IP addresses and prefixes as Go's `net/netip` parses, prints and classifies them (what
Kubernetes' CEL `ip()` and `cidr()` build on), with Go's error messages.

Promises: `parse_addr` accepts exactly what `netip.ParseAddr` accepts (dotted-quad IPv4 without
leading zeros, IPv6 with one `::`, an embedded IPv4 tail, a `%zone`); `parse_prefix` what
`netip.ParsePrefix` accepts (no zone, bits without sign or leading zero, host bits kept).
`str()` prints Go's canonical form (RFC 5952 lower-case hex, longest run of two or more zero
groups compressed, `::ffff:a.b.c.d` for IPv4-mapped addresses). Bad input raises
`CelEvaluationError` carrying Go's message (`ParseAddr("1.2.3"): IPv4 address too short`).
Python's `ipaddress` is not used: it differs from Go on zones, mapped addresses and messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.goquote import go_quote

__all__ = [
    "AddrSyntaxError",
    "IPAddr",
    "IPPrefix",
    "go_quote",
    "parse_addr",
    "parse_go_addr",
    "parse_prefix",
]

_V4_MAPPED = 0xFFFF << 32
_HEX = "0123456789abcdefABCDEF"
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"  # no leading zeros, as Go
_DOTTED_QUAD = re.compile(rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}")


@dataclass(frozen=True, slots=True)
class IPAddr:
    """An IPv4 (`bits` < 2**32, `v6` false) or IPv6 address, with an optional zone."""

    value: int
    v6: bool
    zone: str = ""

    @property
    def is4in6(self) -> bool:
        return self.v6 and self.value >> 32 == 0xFFFF

    @property
    def family(self) -> int:
        return 6 if self.v6 else 4

    @property
    def bit_len(self) -> int:
        return 128 if self.v6 else 32

    def octet(self, i: int) -> int:
        return (self.value >> (self.bit_len - 8 * (i + 1))) & 0xFF

    def group(self, i: int) -> int:
        """The i-th 16-bit group of an IPv6 address."""
        return (self.value >> (128 - 16 * (i + 1))) & 0xFFFF

    def is_unspecified(self) -> bool:
        return self.value == 0 and not self.zone

    def is_loopback(self) -> bool:
        if self.v6:
            return self.value == 1
        return self.octet(0) == 127

    def is_multicast(self) -> bool:
        return self.octet(0) == 0xFF if self.v6 else self.octet(0) & 0xF0 == 0xE0

    def is_link_local_multicast(self) -> bool:
        if self.v6:
            return self.group(0) & 0xFF0F == 0xFF02
        return self.value >> 8 == 0xE00000  # 224.0.0.0/24

    def is_link_local_unicast(self) -> bool:
        if self.v6:
            return self.group(0) & 0xFFC0 == 0xFE80
        return self.value >> 16 == 0xA9FE  # 169.254.0.0/16

    def is_global_unicast(self) -> bool:
        if not self.v6 and self.value in (0, 0xFFFFFFFF):
            return False
        return not (
            self.value == 0
            or self.is_loopback()
            or self.is_multicast()
            or self.is_link_local_unicast()
        )

    def __str__(self) -> str:
        if not self.v6:
            return ".".join(str(self.octet(i)) for i in range(4))
        zone = f"%{self.zone}" if self.zone else ""
        if self.is4in6:
            v4 = IPAddr(self.value & 0xFFFFFFFF, False)
            return f"::ffff:{v4}{zone}"
        groups = [self.group(i) for i in range(8)]
        best_start, best_len, i = -1, 0, 0
        while i < 8:  # the longest run of zero groups (the first one on a tie)
            if groups[i] == 0:
                j = i
                while j < 8 and groups[j] == 0:
                    j += 1
                if j - i > best_len:
                    best_start, best_len = i, j - i
                i = j
            else:
                i += 1
        if best_len < 2:
            return ":".join(f"{g:x}" for g in groups) + zone
        head = ":".join(f"{g:x}" for g in groups[:best_start])
        tail = ":".join(f"{g:x}" for g in groups[best_start + best_len :])
        return f"{head}::{tail}{zone}"


@dataclass(frozen=True, slots=True)
class IPPrefix:
    """An address and a prefix length; the address keeps its host bits (`masked()` clears
    them), as `netip.Prefix` does."""

    addr: IPAddr
    bits: int

    def masked(self) -> IPPrefix:
        host = self.addr.bit_len - self.bits
        value = (self.addr.value >> host) << host
        return IPPrefix(IPAddr(value, self.addr.v6), self.bits)

    def contains(self, ip: IPAddr) -> bool:
        if ip.v6 != self.addr.v6 or ip.zone:
            return False
        host = ip.bit_len - self.bits
        return ip.value >> host == self.addr.value >> host

    def overlaps(self, other: IPPrefix) -> bool:
        if self == other:
            return True
        if self.addr.v6 != other.addr.v6:
            return False
        host = self.addr.bit_len - min(self.bits, other.bits)
        return self.addr.value >> host == other.addr.value >> host

    def contains_prefix(self, other: IPPrefix) -> bool:
        """Kubernetes' `containsCIDR`: overlapping, and at most as long a prefix."""
        return self.overlaps(other) and self.bits <= other.bits

    def __str__(self) -> str:
        return f"{self.addr}/{self.bits}"


class AddrSyntaxError(Exception):
    """`netip.ParseAddr`'s error (internal: `parse_addr` raises `CelEvaluationError`)."""

    def __init__(self, text: str, message: str, at: str | None = None) -> None:
        where = f" (at {go_quote(at)})" if at is not None else ""
        super().__init__(f"ParseAddr({go_quote(text)}): {message}{where}")


def parse_addr(text: str) -> IPAddr:
    """`netip.ParseAddr`."""
    try:
        return parse_go_addr(text)
    except AddrSyntaxError as exc:
        raise CelEvaluationError(str(exc)) from None


def parse_go_addr(text: str) -> IPAddr:
    """`netip.ParseAddr`, raising `AddrSyntaxError`."""
    quad = _DOTTED_QUAD.fullmatch(text)
    if quad is not None:  # the common case, without the general parser's loop
        a, b, c, d = (int(x) for x in quad.groups())
        return IPAddr((a << 24) | (b << 16) | (c << 8) | d, False)
    for ch in text:
        if ch == ".":
            return IPAddr(_ipv4_fields(text, text), False)
        if ch == ":":
            return _parse_ipv6(text)
        if ch == "%":
            raise AddrSyntaxError(text, "missing IPv6 address")
    raise AddrSyntaxError(text, "unable to parse IP")


def _ipv4_fields(whole: str, s: str) -> int:
    """Parse dotted-quad `s` (part of `whole`, which error messages name) to a 32-bit value."""
    fields: list[int] = []
    value, digits = 0, 0
    for i, ch in enumerate(s):
        if "0" <= ch <= "9":
            if digits == 1 and value == 0:
                raise AddrSyntaxError(whole, "IPv4 field has octet with leading zero")
            value = value * 10 + ord(ch) - 48
            digits += 1
            if value > 255:
                raise AddrSyntaxError(whole, "IPv4 field has value >255")
        elif ch == ".":
            if i == 0 or i == len(s) - 1 or s[i - 1] == ".":
                raise AddrSyntaxError(whole, "IPv4 field must have at least one digit", s[i:])
            if len(fields) == 3:
                raise AddrSyntaxError(whole, "IPv4 address too long")
            fields.append(value)
            value, digits = 0, 0
        else:
            raise AddrSyntaxError(whole, "unexpected character", s[i:])
    if len(fields) < 3:
        raise AddrSyntaxError(whole, "IPv4 address too short")
    fields.append(value)
    return int.from_bytes(bytes(fields), "big")


def _hex_group(whole: str, s: str) -> tuple[int, int]:
    """The hex number at the start of `s`: (value, digits)."""
    value, off = 0, 0
    while off < len(s) and s[off] in _HEX:
        value = (value << 4) + int(s[off], 16)
        if off > 3:
            raise AddrSyntaxError(whole, "each group must have 4 or less digits", s)
        off += 1
    if off == 0:
        raise AddrSyntaxError(whole, "each colon-separated field must have at least one digit", s)
    return value, off


def _parse_ipv6(text: str) -> IPAddr:
    s, zone = text, ""
    if "%" in s:
        s, _, zone = s.partition("%")
        if not zone:
            raise AddrSyntaxError(text, "zone must be a non-empty string")
    out = bytearray(16)
    ellipsis = -1
    if s.startswith("::"):
        ellipsis, s = 0, s[2:]
        if not s:
            return IPAddr(0, True, zone)
    i = 0
    while i < 16:
        value, off = _hex_group(text, s)
        if off < len(s) and s[off] == ".":
            if ellipsis < 0 and i != 12:
                raise AddrSyntaxError(
                    text, "embedded IPv4 address must replace the final 2 fields of the address", s
                )
            if i + 4 > 16:
                raise AddrSyntaxError(
                    text,
                    "too many hex fields to fit an embedded IPv4 at the end of the address",
                    s,
                )
            out[i : i + 4] = _ipv4_fields(text, s).to_bytes(4, "big")
            s, i = "", i + 4
            break
        out[i], out[i + 1] = value >> 8, value & 0xFF
        i += 2
        s = s[off:]
        if not s:
            break
        if s[0] != ":":
            raise AddrSyntaxError(text, "unexpected character, want colon", s)
        if len(s) == 1:
            raise AddrSyntaxError(text, "colon must be followed by more characters", s)
        s = s[1:]
        if s[0] == ":":
            if ellipsis >= 0:
                raise AddrSyntaxError(text, "multiple :: in address", s)
            ellipsis, s = i, s[1:]
            if not s:
                break
    if s:
        raise AddrSyntaxError(text, "trailing garbage after address", s)
    if i < 16:
        if ellipsis < 0:
            raise AddrSyntaxError(text, "address string too short")
        n = 16 - i
        out[ellipsis + n : 16] = out[ellipsis:i]
        out[ellipsis : ellipsis + n] = bytes(n)
    elif ellipsis >= 0:
        raise AddrSyntaxError(text, "the :: must expand to at least one field of zeros")
    return IPAddr(int.from_bytes(out, "big"), True, zone)


def parse_prefix(text: str) -> IPPrefix:
    """`netip.ParsePrefix`."""

    def fail(message: str) -> CelEvaluationError:
        return CelEvaluationError(f"netip.ParsePrefix({go_quote(text)}): {message}")

    slash = text.rfind("/")
    if slash < 0:
        raise fail("no '/'")
    try:
        addr = parse_go_addr(text[:slash])
    except AddrSyntaxError as exc:
        raise fail(str(exc)) from None
    if addr.v6 and addr.zone:
        raise fail("IPv6 zones cannot be present in a prefix")
    bits_text = text[slash + 1 :]
    valid = bits_text.isascii() and bits_text.isdigit()
    if not valid or (len(bits_text) > 1 and bits_text[0] == "0"):
        raise fail(f"bad bits after slash: {go_quote(bits_text)}")
    bits = int(bits_text) if len(bits_text) <= 19 else 1 << 63
    if bits >= 1 << 63:  # beyond int64: strconv.Atoi fails
        raise fail(f"bad bits after slash: {go_quote(bits_text)}")
    if bits > addr.bit_len:
        raise fail("prefix length out of range")
    return IPPrefix(addr, bits)
