"""URLs as Go's `net/url` parses them for Kubernetes' CEL `url()`: `url.ParseRequestURI` decides
validity (an absolute URI or an absolute path; `*` too), `url.Parse` (which splits off the
`#fragment`) gives the parts, and the accessors answer as `URL.Hostname`, `Port`, `EscapedPath`
and `Query` do, with Go's error messages (`parse "../x": invalid URI for request`).

Edge cases kept from Go: a scheme is lower-cased, text after `scheme:` without a `/` is opaque
(no host, no path), `//host` without a scheme is a path for `ParseRequestURI` but a host for
`Parse`, a host is `[IPv6]` (validated, as Go does since 2025: an IPv6 address, no IPv4; for
`http`/`https` no second colon outside brackets) or a reg-name or IPv4, with an optional numeric
`:port` (empty allowed), `%XX` escapes in hosts only for non-ASCII bytes (and
`%25` before a zone), control characters anywhere are errors, and `?k=a&k=b` keeps both values
(a `;` in a pair drops that pair). Go works on bytes; text here is handled as UTF-8 bytes and
results that are not valid UTF-8 are decoded with replacement characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.netaddr import AddrSyntaxError, go_quote, parse_go_addr

__all__ = ["ParsedURL", "is_url", "parse_url", "request_uri_error"]

_ALNUM = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_HEXDIGITS = frozenset(b"0123456789abcdefABCDEF")
_HOST_OK = frozenset(b"!$&'()*+,;=:[]<>\"")
_RESERVED = frozenset(b"$&+,/:;=?@")
_USERINFO_OK = _ALNUM | frozenset(b"-._:~!$&'()*+,;=%@")
_VALID_ENCODED = frozenset(b"!$&'()*+,;=:@[]%")
_PATH, _HOST, _ZONE, _QUERY = "path", "host", "zone", "query"
_CONTROL = re.compile(rb"[\x00-\x1f\x7f]")


class _Error(Exception):
    """A parse failure with Go's message."""


@dataclass(frozen=True, slots=True)
class ParsedURL:
    """The parts Kubernetes' accessors read; `raw` is what `url()` was given."""

    raw: str
    scheme: str = ""
    opaque: str = ""
    host: bytes = b""
    path: bytes = b""
    raw_path: bytes = b""
    raw_query: bytes = b""
    user: tuple[bytes, ...] = field(default=())
    fragment: bytes = b""

    def __str__(self) -> str:
        return self.raw

    def key(self) -> tuple[object, ...]:
        """What Go's `URL.String()` is built from: equal keys, equal URLs (`==`)."""
        parts = (self.scheme, self.opaque, self.user, self.host, self.escaped_path())
        return (*parts, self.raw_query, self.fragment)

    def get_host(self) -> str:
        return _text(self.host)

    def get_hostname(self) -> str:
        return _text(_split_host_port(self.host)[0])

    def get_port(self) -> str:
        return _text(_split_host_port(self.host)[1])

    def escaped_path(self) -> str:
        if self.raw_path and _valid_encoded(self.raw_path):
            try:
                if _unescape(self.raw_path, _PATH) == self.path:
                    return _text(self.raw_path)
            except _Error:
                pass
        if self.path == b"*":
            return "*"
        return _text(_escape(self.path))

    def query(self) -> dict[str, tuple[str, ...]]:
        found: dict[str, list[str]] = {}
        for pair in self.raw_query.split(b"&"):
            if not pair or b";" in pair:
                continue
            key, _, value = pair.partition(b"=")
            try:
                k, v = _unescape(key, _QUERY), _unescape(value, _QUERY)
            except _Error:
                continue
            found.setdefault(_text(k), []).append(_text(v))
        return {k: tuple(v) for k, v in found.items()}


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def parse_url(text: str) -> ParsedURL:
    """Kubernetes' `url(text)`: `CelEvaluationError` unless `url.ParseRequestURI` accepts it."""
    data = text.encode("utf-8", errors="surrogatepass")
    try:
        _parse(data, via_request=True)
    except _Error as exc:
        raise CelEvaluationError(f"parse {go_quote(text)}: {exc}") from None
    head, _, fragment = data.partition(b"#")
    try:
        parsed = _parse(head, via_request=False, raw=text)
    except _Error as exc:  # Parse is laxer than ParseRequestURI: not expected
        raise CelEvaluationError(f"parse {go_quote(_text(head))}: {exc}") from None
    try:  # a query may hold a bad escape; a fragment may not
        return replace(parsed, fragment=_unescape(fragment, "fragment"))
    except _Error as exc:
        raise CelEvaluationError(f"parse {go_quote(text)}: {exc}") from None


def is_url(text: str) -> bool:
    try:
        _parse(text.encode("utf-8", errors="surrogatepass"), via_request=True)
    except _Error:
        return False
    return True


def request_uri_error(text: str) -> str | None:
    """Go's `url.ParseRequestURI(text)` error as Go prints it (`parse "x": invalid URI for
    request`), or None when it accepts the text (the `uri` format of `lib_format_k8s`)."""
    try:
        _parse(text.encode("utf-8", errors="surrogatepass"), via_request=True)
    except _Error as exc:
        return f"parse {go_quote(text)}: {exc}"
    return None


def _scheme(data: bytes) -> tuple[bytes, bytes]:
    for i, c in enumerate(data):
        if c in _ALNUM and not 0x30 <= c <= 0x39:
            continue
        if 0x30 <= c <= 0x39 or c in b"+-.":
            if i == 0:
                return b"", data
            continue
        if c == 0x3A:  # ':'
            if i == 0:
                raise _Error("missing protocol scheme")
            return data[:i], data[i + 1 :]
        return b"", data
    return b"", data


def _parse(data: bytes, *, via_request: bool, raw: str = "") -> ParsedURL:
    if _CONTROL.search(data):
        raise _Error("net/url: invalid control character in URL")
    if not data and via_request:
        raise _Error("empty url")
    if data == b"*":
        return ParsedURL(raw, path=b"*")
    scheme_bytes, rest = _scheme(data)
    scheme = scheme_bytes.decode("ascii").lower()
    raw_query = b""
    if rest.endswith(b"?") and rest.count(b"?") == 1:
        rest = rest[:-1]
    else:
        rest, _, raw_query = rest.partition(b"?")
    if not rest.startswith(b"/"):
        if scheme:
            return ParsedURL(raw, scheme, opaque=_text(rest), raw_query=raw_query)
        if via_request:
            raise _Error("invalid URI for request")
        if b":" in rest.partition(b"/")[0]:
            raise _Error("first path segment in URL cannot contain colon")
    host = b""
    user: tuple[bytes, ...] = ()
    authority_form = scheme or (not via_request and not rest.startswith(b"///"))
    if authority_form and rest.startswith(b"//"):
        authority, slash, tail = rest[2:].partition(b"/")
        rest = slash + tail
        user, host = _parse_authority(authority, scheme)
    path = _unescape(rest, _PATH)
    raw_path = b"" if _escape(path) == rest else rest
    return ParsedURL(raw, scheme, "", host, path, raw_path, raw_query, user)


def _parse_authority(authority: bytes, scheme: str) -> tuple[tuple[bytes, ...], bytes]:
    at = authority.rfind(b"@")
    host = _parse_host(authority[at + 1 :] if at >= 0 else authority, scheme)
    if at < 0:
        return (), host
    userinfo = authority[:at]
    if not all(c in _USERINFO_OK for c in userinfo):  # non-ASCII included, as in Go
        raise _Error("net/url: invalid userinfo")
    parts = userinfo.split(b":", 1)
    return tuple(_unescape(p, "userinfo") for p in parts), host


def _valid_port(port: bytes) -> bool:
    if not port:
        return True
    return port[0] == 0x3A and all(0x30 <= c <= 0x39 for c in port[1:])


def _parse_host(host: bytes, scheme: str) -> bytes:
    """Go's `parseHost` (with its checks of 2025: only an IPv6 address in brackets, and for
    http/https one colon at most outside them)."""
    open_bracket = host.rfind(b"[")
    if open_bracket > 0:
        raise _Error("invalid IP-literal")
    if open_bracket == 0:
        close = host.rfind(b"]")
        if close < 0:
            raise _Error("missing ']' in host")
        colon_port = host[close + 1 :]
        if not _valid_port(colon_port):
            raise _Error(f"invalid port {go_quote(_text(colon_port))} after host")
        port = _unescape(colon_port, _HOST)
        literal = host[1:close]
        zone = literal.find(b"%25")
        if zone >= 0:
            name = _unescape(literal[:zone], _HOST) + _unescape(literal[zone:], _ZONE)
        else:
            name = _unescape(literal, _HOST)
        try:
            addr = parse_go_addr(_text(name))
        except AddrSyntaxError as exc:
            raise _Error(f"invalid host: {exc}") from None
        if not addr.v6:
            raise _Error("invalid IP-literal")
        return b"[" + name + b"]" + port
    colon = host.find(b":")
    if colon >= 0:
        last = host.rfind(b":")
        if last != colon and scheme not in ("http", "https"):
            colon = last
        if not _valid_port(host[colon:]):
            raise _Error(f"invalid port {go_quote(_text(host[colon:]))} after host")
    return _unescape(host, _HOST)


def _should_escape(c: int, mode: str) -> bool:
    """Go's `shouldEscape` for the modes used here."""
    if c in _ALNUM:
        return False
    if mode in (_HOST, _ZONE) and c in _HOST_OK:
        return False
    if c in b"-_.~":
        return False
    if c in _RESERVED:
        if mode == _PATH:
            return c == 0x3F  # '?'
        if mode == "userinfo":
            return c in b"@/?:"
        if mode == _QUERY:
            return True
    return True


def _unescape(data: bytes, mode: str) -> bytes:
    plain = b"%" not in data and not (mode == _QUERY and b"+" in data)
    if plain and (mode not in (_HOST, _ZONE) or not data.translate(None, _HOST_PLAIN)):
        return data  # the common case: nothing to check or decode
    i, n = 0, len(data)
    while i < n:
        c = data[i]
        if c == 0x25:  # '%'
            if i + 2 >= n or data[i + 1] not in _HEXDIGITS or data[i + 2] not in _HEXDIGITS:
                raise _Error(f"invalid URL escape {go_quote(_text(data[i : i + 3]))}")
            escape = data[i : i + 3]
            if mode == _HOST and int(escape[1:2], 16) < 8 and escape != b"%25":
                raise _Error(f"invalid URL escape {go_quote(_text(escape))}")
            if mode == _ZONE:
                v = int(escape[1:], 16)
                if escape != b"%25" and v != 0x20 and _should_escape(v, _HOST):
                    raise _Error(f"invalid URL escape {go_quote(_text(escape))}")
            i += 3
            continue
        if mode in (_HOST, _ZONE) and c < 0x80 and _should_escape(c, mode):
            raise _Error(f"invalid character {go_quote(chr(c))} in host name")
        i += 1
    out = bytearray()
    i = 0
    while i < n:
        c = data[i]
        if c == 0x25:
            out.append(int(data[i + 1 : i + 3], 16))
            i += 3
            continue
        out.append(0x20 if c == 0x2B and mode == _QUERY else c)
        i += 1
    return bytes(out)


def _escape(data: bytes) -> bytes:
    """Go's `escape(s, encodePath)`."""
    if not data.translate(None, _PATH_PLAIN):
        return data
    out = bytearray()
    for c in data:
        if _should_escape(c, _PATH):
            out += f"%{c:02X}".encode("ascii")
        else:
            out.append(c)
    return bytes(out)


def _valid_encoded(data: bytes) -> bool:
    return all(c in _VALID_ENCODED or not _should_escape(c, _PATH) for c in data)


def _split_host_port(host: bytes) -> tuple[bytes, bytes]:
    port = b""
    colon = host.rfind(b":")
    if colon >= 0 and _valid_port(host[colon:]):
        host, port = host[:colon], host[colon + 1 :]
    if host.startswith(b"[") and host.endswith(b"]"):
        host = host[1:-1]
    return host, port


# bytes that pass through unchanged (fast paths of `_unescape` and `_escape`)
_HOST_PLAIN = bytes(c for c in range(256) if c >= 0x80 or not _should_escape(c, _HOST))
_PATH_PLAIN = bytes(c for c in range(256) if not _should_escape(c, _PATH))
