"""Go `net/netip` parsing, printing and classification (`netaddr`), from netip's documented
behaviour and the cases Kubernetes' ip/cidr library tests rely on (messages included)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.netaddr import IPAddr, go_quote, parse_addr, parse_prefix


@pytest.mark.parametrize(
    ("text", "printed"),
    [
        pytest.param("192.168.0.1", "192.168.0.1", id="v4"),
        pytest.param("0.0.0.0", "0.0.0.0", id="v4-zero"),
        pytest.param("::", "::", id="v6-unspecified"),
        pytest.param("::1", "::1", id="v6-loopback"),
        pytest.param("2001:DB8::ABCD", "2001:db8::abcd", id="v6-lower-case"),
        pytest.param("2001:db8::0:0:0:abcd", "2001:db8::abcd", id="v6-compressed"),
        pytest.param("2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1", id="v6-single-zero-kept"),
        pytest.param("1:0:0:2:0:0:0:3", "1:0:0:2::3", id="v6-longest-run"),
        pytest.param("1:0:0:2:3:0:0:4", "1::2:3:0:0:4", id="v6-first-of-equal-runs"),
        pytest.param("0001:0db8::0068", "1:db8::68", id="v6-leading-zeros-in-groups"),
        pytest.param("::1.2.3.4", "::102:304", id="v6-embedded-v4"),
        pytest.param("::ffff:1.2.3.4", "::ffff:1.2.3.4", id="v4-mapped"),
        pytest.param("fe80::1%eth0", "fe80::1%eth0", id="zone"),
        pytest.param("1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8", id="v6-full"),
    ],
)
def test_parse_and_print(text: str, printed: str) -> None:
    assert str(parse_addr(text)) == printed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "unable to parse IP", id="empty"),
        pytest.param("abc", "unable to parse IP", id="no-separator"),
        pytest.param("%eth0", "missing IPv6 address", id="zone-only"),
        pytest.param("192.168.0.1.0", "IPv4 address too long", id="v4-too-long"),
        pytest.param("1.2.3", "IPv4 address too short", id="v4-too-short"),
        pytest.param("1.2.3.256", "IPv4 field has value >255", id="v4-octet-range"),
        pytest.param("010.1.1.1", "IPv4 field has octet with leading zero", id="v4-leading-0"),
        pytest.param(
            "1..2.3", 'IPv4 field must have at least one digit (at ".2.3")', id="v4-empty-field"
        ),
        pytest.param("1.2.3.4%x", 'unexpected character (at "%x")', id="v4-zone"),
        pytest.param(
            "2001:db8:::68",
            'each colon-separated field must have at least one digit (at ":68")',
            id="v6-triple-colon",
        ),
        pytest.param(
            ":::1", 'each colon-separated field must have at least one digit (at ":1")', id="v6-:::"
        ),
        pytest.param("1::2::3", 'multiple :: in address (at ":3")', id="v6-two-ellipses"),
        pytest.param("1:2:3:4:5:6:7", "address string too short", id="v6-short"),
        pytest.param("1:2:3:4:5:6:7:8:9", 'trailing garbage after address (at "9")', id="v6-long"),
        pytest.param(
            "1:2:3:4::5:6:7:8",
            "the :: must expand to at least one field of zeros",
            id="v6-ellipsis-of-nothing",
        ),
        pytest.param(
            "12345::", 'each group must have 4 or less digits (at "12345::")', id="v6-5-digits"
        ),
        pytest.param("fe80::1%", "zone must be a non-empty string", id="v6-empty-zone"),
        pytest.param(
            "1::3:4:5:6:7:8:1.2.3.4",
            'too many hex fields to fit an embedded IPv4 at the end of the address (at "1.2.3.4")',
            id="v6-embedded-v4-no-room",
        ),
        pytest.param(
            "1:2:3:1.2.3.4",
            "embedded IPv4 address must replace the final 2 fields of the address "
            '(at "1.2.3.4")',
            id="v6-embedded-v4-misplaced",
        ),
        pytest.param("1:2:", 'colon must be followed by more characters (at ":")', id="v6-colon"),
        pytest.param(
            "1:x", 'each colon-separated field must have at least one digit (at "x")', id="v6-x"
        ),
    ],
)
def test_parse_errors_carry_go_messages(text: str, message: str) -> None:
    with pytest.raises(CelEvaluationError) as caught:
        parse_addr(text)
    assert str(caught.value) == f"ParseAddr({go_quote(text)}): {message}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("0.0.0.0", "U", id="v4-unspecified"),
        pytest.param("::", "U", id="v6-unspecified"),
        pytest.param("127.0.0.1", "L", id="v4-loopback"),
        pytest.param("127.255.0.9", "L", id="v4-loopback-net"),
        pytest.param("::1", "L", id="v6-loopback"),
        pytest.param("224.0.0.1", "M", id="v4-ll-multicast"),
        pytest.param("224.0.1.1", "", id="v4-other-multicast"),
        pytest.param("ff02::1", "M", id="v6-ll-multicast"),
        pytest.param("ff12::1", "M", id="v6-ll-multicast-transient"),
        pytest.param("ff05::1", "", id="v6-site-multicast"),
        pytest.param("169.254.169.254", "K", id="v4-link-local"),
        pytest.param("fe80::1", "K", id="v6-link-local"),
        pytest.param("febf::1", "K", id="v6-link-local-end"),
        pytest.param("fec0::1", "G", id="v6-site-local-is-global"),
        pytest.param("fd00::1", "G", id="v6-ula-is-global"),
        pytest.param("192.168.0.1", "G", id="v4-private-is-global"),
        pytest.param("2001:db8::abcd", "G", id="v6-global"),
        pytest.param("255.255.255.255", "", id="v4-broadcast"),
        pytest.param("ff00::1", "", id="v6-multicast"),
    ],
)
def test_classification(text: str, expected: str) -> None:
    """U unspecified, L loopback, M link-local multicast, K link-local unicast, G global."""
    addr = parse_addr(text)
    flags = {
        "U": addr.is_unspecified(),
        "L": addr.is_loopback(),
        "M": addr.is_link_local_multicast(),
        "K": addr.is_link_local_unicast(),
        "G": addr.is_global_unicast(),
    }
    assert "".join(k for k, v in flags.items() if v) == expected


@pytest.mark.parametrize(
    ("text", "printed", "bits", "masked"),
    [
        pytest.param("192.168.0.0/24", "192.168.0.0/24", 24, "192.168.0.0/24", id="v4"),
        pytest.param("192.168.0.1/24", "192.168.0.1/24", 24, "192.168.0.0/24", id="host-bits"),
        pytest.param("0.0.0.0/0", "0.0.0.0/0", 0, "0.0.0.0/0", id="v4-all"),
        pytest.param("2001:db8:1::/32", "2001:db8:1::/32", 32, "2001:db8::/32", id="v6"),
        pytest.param("::1/128", "::1/128", 128, "::1/128", id="v6-host"),
    ],
)
def test_prefix(text: str, printed: str, bits: int, masked: str) -> None:
    prefix = parse_prefix(text)
    assert (str(prefix), prefix.bits, str(prefix.masked())) == (printed, bits, masked)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("192.168.0.0", "no '/'", id="no-slash"),
        pytest.param("192.168.0.0/", 'bad bits after slash: ""', id="empty-bits"),
        pytest.param("192.168.0.0/+8", 'bad bits after slash: "+8"', id="signed"),
        pytest.param("192.168.0.0/08", 'bad bits after slash: "08"', id="leading-zero"),
        pytest.param("192.168.0.0/33", "prefix length out of range", id="v4-too-long"),
        pytest.param("::1/129", "prefix length out of range", id="v6-too-long"),
        pytest.param("::1/9223372036854775807", "prefix length out of range", id="int64-max"),
        pytest.param(
            "::1/9223372036854775808", 'bad bits after slash: "9223372036854775808"', id="atoi"
        ),
        pytest.param(
            "::1/" + "9" * 5000,
            'bad bits after slash: "' + "9" * 5000 + '"',
            id="beyond-python-int-parsing-limit",
        ),  # fmt: skip
        pytest.param("fe80::1%eth0/64", "IPv6 zones cannot be present in a prefix", id="zone"),
        pytest.param("1.2.3/8", 'ParseAddr("1.2.3"): IPv4 address too short', id="bad-addr"),
    ],
)
def test_prefix_errors(text: str, message: str) -> None:
    with pytest.raises(CelEvaluationError) as caught:
        parse_prefix(text)
    assert str(caught.value) == f"netip.ParsePrefix({go_quote(text)}): {message}"


@pytest.mark.parametrize(
    ("outer", "inner", "contains"),
    [
        pytest.param("10.0.0.0/8", "10.1.0.0/16", True, id="narrower"),
        pytest.param("10.0.0.0/8", "10.0.0.0/8", True, id="same"),
        pytest.param("10.0.0.0/16", "10.0.0.0/8", False, id="wider"),
        pytest.param("10.0.0.0/8", "11.0.0.0/16", False, id="elsewhere"),
        pytest.param("0.0.0.0/0", "::/0", False, id="other-family"),
        pytest.param("10.9.9.9/8", "10.1.0.0/16", True, id="host-bits-ignored"),
    ],
)
def test_contains_prefix(outer: str, inner: str, contains: bool) -> None:
    assert parse_prefix(outer).contains_prefix(parse_prefix(inner)) is contains


@given(st.integers(min_value=0, max_value=(1 << 128) - 1))
def test_ipv6_printing_matches_rfc_5952(value: int) -> None:
    # Python's compressed form is RFC 5952's too, except for IPv4-mapped addresses
    addr = IPAddr(value, True)
    if not addr.is4in6:
        assert str(addr) == ipaddress.IPv6Address(value).compressed
    assert parse_addr(str(addr)) == addr


@given(st.integers(min_value=0, max_value=(1 << 32) - 1))
def test_ipv4_round_trip(value: int) -> None:
    addr = IPAddr(value, False)
    assert str(addr) == str(ipaddress.IPv4Address(value))
    assert parse_addr(str(addr)) == addr
