"""Go `net/url` parsing as Kubernetes' `url()` uses it (`neturl`): the cases of Kubernetes' URL
library documentation and CRD validation tests, and Go's own edge cases (opaque URLs, bracketed
hosts, empty ports, escapes, fragments), messages included."""

from __future__ import annotations

import pytest

from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.neturl import is_url, parse_url

K8S = "https://user:pass@kubernetes.io:80/docs/home?k1=a&k2=b&k2=c#anchor"


@pytest.mark.parametrize(
    ("text", "scheme", "host", "hostname", "port", "path", "query"),
    [
        pytest.param(K8S, "https", "kubernetes.io:80", "kubernetes.io", "80", "/docs/home",
                     {"k1": ("a",), "k2": ("b", "c")}, id="kubernetes-test-url"),  # fmt: skip
        pytest.param("/path", "", "", "", "", "/path", {}, id="absolute-path"),
        pytest.param("https://example.com/", "https", "example.com", "example.com", "", "/", {},
                     id="no-port"),  # fmt: skip
        pytest.param("https://[::1]:80/", "https", "[::1]:80", "::1", "80", "/", {}, id="v6-port"),
        pytest.param("https://[::1]/", "https", "[::1]", "::1", "", "/", {}, id="v6"),
        pytest.param("https://127.0.0.1/", "https", "127.0.0.1", "127.0.0.1", "", "/", {},
                     id="v4"),  # fmt: skip
        pytest.param("https://example.com:/", "https", "example.com:", "example.com", "", "/", {},
                     id="empty-port"),  # fmt: skip
        pytest.param("https://example.com", "https", "example.com", "example.com", "", "", {},
                     id="no-path"),  # fmt: skip
        pytest.param("HTTPS://Example.COM/", "https", "Example.COM", "Example.COM", "", "/", {},
                     id="scheme-lower-cased-host-kept"),  # fmt: skip
        pytest.param("https:://kubernetes.io/", "https", "", "", "", "", {}, id="opaque"),
        pytest.param("mailto:someone@example.com", "mailto", "", "", "", "", {}, id="mailto"),
        pytest.param("*", "", "", "", "", "*", {}, id="asterisk"),
        pytest.param("//example.com/p", "", "example.com", "example.com", "", "/p", {},
                     id="scheme-relative-is-host-for-parse"),  # fmt: skip
        pytest.param("https://[fe80::1%25en0]:8080/", "https", "[fe80::1%en0]:8080",
                     "fe80::1%en0", "8080", "/", {}, id="v6-zone"),  # fmt: skip
        pytest.param("https://[::ffff:1.2.3.4]/", "https", "[::ffff:1.2.3.4]", "::ffff:1.2.3.4",
                     "", "/", {}, id="v4-mapped-in-brackets"),  # fmt: skip
        pytest.param("https://%C3%A9.example/", "https", "é.example", "é.example", "", "/", {},
                     id="escaped-non-ascii-host"),  # fmt: skip
        pytest.param("mongodb://h1:1,h2:2/", "mongodb", "h1:1,h2:2", "h1:1,h2", "2", "/", {},
                     id="colons-in-non-http-host"),  # fmt: skip
    ],
)
def test_parts(
    text: str,
    scheme: str,
    host: str,
    hostname: str,
    port: str,
    path: str,
    query: dict[str, tuple[str, ...]],
) -> None:
    u = parse_url(text)
    assert (u.scheme, u.get_host(), u.get_hostname(), u.get_port()) == (
        scheme,
        host,
        hostname,
        port,
    )
    assert (u.escaped_path(), u.query()) == (path, query)
    assert is_url(text)


@pytest.mark.parametrize(
    ("text", "path"),
    [
        pytest.param("https://example.com/with space/", "/with%20space/", id="space-escaped"),
        pytest.param("https://example.com/a%2Fb", "/a%2Fb", id="escaped-slash-kept"),
        pytest.param("https://example.com/%7Efoo", "/%7Efoo", id="redundant-escape-kept"),
        pytest.param("https://example.com/a%20b", "/a%20b", id="escaped-space"),
        pytest.param("https://example.com/ü", "/%C3%BC", id="non-ascii-escaped"),
        pytest.param("https://example.com/a:b@c;d", "/a:b@c;d", id="sub-delims"),
        pytest.param("https://example.com/p#frag", "/p", id="fragment-dropped"),
    ],
)
def test_escaped_path(text: str, path: str) -> None:
    assert parse_url(text).escaped_path() == path


@pytest.mark.parametrize(
    ("text", "query"),
    [
        pytest.param(
            "https://e.com/p?k1=a&k2=b&k2=c", {"k1": ("a",), "k2": ("b", "c")}, id="repeated"
        ),  # fmt: skip
        pytest.param(
            "https://e.com/p?key with spaces=value with spaces",
            {"key with spaces": ("value with spaces",)},
            id="spaces",
        ),  # fmt: skip
        pytest.param("https://e.com/p?", {}, id="empty"),
        pytest.param("https://e.com/p", {}, id="none"),
        pytest.param("https://e.com/p?a+b=c%20d", {"a b": ("c d",)}, id="plus-and-escape"),
        pytest.param("https://e.com/p?a=1;b=2&c=3", {"c": ("3",)}, id="semicolon-pair-dropped"),
        pytest.param("https://e.com/p?a=%zz&b=1", {"b": ("1",)}, id="bad-escape-pair-dropped"),
        pytest.param("https://e.com/p?flag&x=", {"flag": ("",), "x": ("",)}, id="no-values"),
        pytest.param("https://e.com/p?q=1#frag", {"q": ("1",)}, id="fragment-dropped"),
        pytest.param("https://e.com/p#x?q=1", {}, id="query-in-fragment"),
    ],
)
def test_query(text: str, query: dict[str, tuple[str, ...]]) -> None:
    assert parse_url(text).query() == query


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("https://a:b:c/", 'invalid port ":b:c" after host', id="two-colons-http"),
        pytest.param("../relative-path", "invalid URI for request", id="relative"),
        pytest.param("example.com/p", "invalid URI for request", id="no-scheme"),
        pytest.param("", "empty url", id="empty"),
        pytest.param(":foo", "missing protocol scheme", id="colon-first"),
        pytest.param(
            "https://example.com#frag",
            'invalid character "#" in host name',
            id="fragment-right-after-host",
        ),  # fmt: skip
        pytest.param("https://exa mple.com/", 'invalid character " " in host name', id="space"),
        pytest.param("https://[::1/", "missing ']' in host", id="unclosed-bracket"),
        pytest.param("https://[1.2.3.4]/", "invalid IP-literal", id="v4-in-brackets"),
        pytest.param("https://a[::1]/", "invalid IP-literal", id="bracket-inside"),
        pytest.param("https://[::1]x/", 'invalid port "x" after host', id="junk-after-bracket"),
        pytest.param(
            "https://[example]/",
            'invalid host: ParseAddr("example"): unable to parse IP',
            id="name-in-brackets",
        ),  # fmt: skip
        pytest.param("https://example.com:8a/", 'invalid port ":8a" after host', id="bad-port"),
        pytest.param("https://example.com/%zz", 'invalid URL escape "%zz"', id="bad-path-escape"),
        pytest.param("https://%41.com/", 'invalid URL escape "%41"', id="ascii-escape-in-host"),
        pytest.param(
            "https://exa\nmple.com/",
            "net/url: invalid control character in URL",
            id="control-character",
        ),  # fmt: skip
        pytest.param("https://us er@example.com/", "net/url: invalid userinfo", id="userinfo"),
        pytest.param("https://e.com/p?q#%zz", 'invalid URL escape "%zz"', id="fragment-escape"),
    ],
)
def test_invalid(text: str, message: str) -> None:
    with pytest.raises(CelEvaluationError) as caught:
        parse_url(text)
    assert str(caught.value).endswith(f": {message}")
    assert str(caught.value).startswith("parse ")
    # the fragment is checked by Parse only: isURL (ParseRequestURI) accepts it, as upstream
    assert is_url(text) is ("#%zz" in text)
