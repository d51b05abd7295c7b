"""Kubernetes' CEL format library compiled into selectors (`lib_format_k8s`, `k8s_formats`):
the cases of Kubernetes' format library test and of the apimachinery / strfmt validators it
calls (in this project's words and data), every validator's boundaries, compile-time type
errors, `format` as a namespace beside variables and the strings `format()`, selectors over
generated devices, and costs.

cel-python cannot serve as the oracle here (it has no format library), so expected answers are
upstream's documented ones, and generated devices are checked against plain-Python restatements
of the rules (character classes and lengths, no regular expressions).
"""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra_cel import (
    AttributeValue,
    CelCompileError,
    CelEvaluationError,
    CountingSelector,
    DeviceView,
    compile_selector,
)
from gpudra_cel.checker import check
from gpudra_cel.cost import estimate_cost
from gpudra_cel.k8s_formats import FORMATS
from gpudra_cel.lib_format_k8s import FORMAT_RUNTIME_PRICES, validate
from gpudra_cel.runtime_cost import compile_counting
from gpudra_cel.syntax import parse

DRV = "fmt.example.com"
A = f'device.attributes["{DRV}"]'


def _device(**attributes: AttributeValue) -> DeviceView:
    return DeviceView(DRV, {DRV: attributes}, {}, False)


def _messages(name: str, text: str) -> list[str] | None:
    """What `format.<name>().validate(text)` gives through a compiled selector: None for
    `optional.none()`, else the messages (read back by comparing with the expected join)."""
    device = _device(s=text)
    if compile_selector(f"!format.{name}().validate({A}.s).hasValue()").matches(device):
        return None
    joined = "\n".join(validate(FORMATS[name], text).value)  # type: ignore[arg-type]
    expression = f'format.{name}().validate({A}.s).value().join("\\n") == {A}.j'
    assert compile_selector(expression).matches(_device(s=text, j=joined))
    return joined.split("\n")


LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
QNAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
LONG63 = "a" * 63
OK = None


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        # Kubernetes' format_test.go: the documented examples are valid
        pytest.param("dns1123Label", "my-label-name", OK, id="up-label"),
        pytest.param("dns1123Subdomain", "apiextensions.k8s.io", OK, id="up-subdomain"),
        pytest.param("dns1035Label", "my-label-name", OK, id="up-1035"),
        pytest.param("qualifiedName", "apiextensions.k8s.io/v1beta1", OK, id="up-qname"),
        pytest.param("qualifiedName", "my.name", OK, id="up-qname-plain"),
        pytest.param("dns1123LabelPrefix", "my-label-prefix-", OK, id="up-label-prefix"),
        pytest.param("dns1123SubdomainPrefix", "mysubdomain.prefix.-", OK, id="up-sub-prefix"),
        pytest.param("dns1035LabelPrefix", "my-label-prefix-", OK, id="up-1035-prefix"),
        pytest.param("uri", "http://example.com", OK, id="up-uri"),
        pytest.param("uuid", "123e4567-e89b-12d3-a456-426614174000", OK, id="up-uuid"),
        pytest.param("byte", "aGVsbG8=", OK, id="up-byte"),
        pytest.param("date", "2021-01-01", OK, id="up-date"),
        pytest.param("datetime", "2021-01-01T00:00:00Z", OK, id="up-datetime"),
        pytest.param("labelValue", "my-cool-label-Value", OK, id="up-label-value"),
        # ... and their failures, with upstream's messages
        pytest.param("dns1123Label", "contains a space", [LABEL_MSG], id="up-label-bad"),
        pytest.param("dns1123Subdomain", "contains a space", [SUBDOMAIN_MSG], id="up-sub-bad"),
        pytest.param("dns1035Label", "contains a space", [DNS1035_MSG], id="up-1035-bad"),
        pytest.param(
            "qualifiedName", "contains a space", ["name part " + QNAME_MSG], id="up-qname-bad"
        ),
        pytest.param("dns1123LabelPrefix", "contains a space-", [LABEL_MSG], id="up-lp-bad"),
        pytest.param(
            "dns1123SubdomainPrefix", "contains a space-", [SUBDOMAIN_MSG], id="up-sp-bad"
        ),
        pytest.param("dns1035LabelPrefix", "contains a space-", [DNS1035_MSG], id="up-1035p-bad"),
        pytest.param("byte", "aGVsbG8", ["invalid base64"], id="up-byte-bad"),
        pytest.param("date", "2020-01-32", ["invalid date"], id="up-date-bad"),
        pytest.param("datetime", "2020-01-32T00:00:00Z", ["invalid datetime"], id="up-dt-bad"),
        pytest.param(
            "labelValue", "my-cool-label-Value!!\n\n!!!", [LABEL_VALUE_MSG], id="up-lv-bad"
        ),
        # DNS-1123 labels: 63 bytes, alphanumeric ends, dots are a separate message
        pytest.param("dns1123Label", LONG63, OK, id="label-63"),
        pytest.param(
            "dns1123Label", LONG63 + "a", ["must be no more than 63 characters"], id="label-64"
        ),
        pytest.param(
            "dns1123Label",
            "a." + LONG63,
            ["must be no more than 63 characters", "must not contain dots"],
            id="label-long-dots",
        ),
        pytest.param("dns1123Label", "1", OK, id="label-digit"),
        pytest.param("dns1123Label", "", [LABEL_MSG], id="label-empty"),
        pytest.param("dns1123Label", "-a", [LABEL_MSG], id="label-leading-dash"),
        pytest.param("dns1123Label", "a-", [LABEL_MSG], id="label-trailing-dash"),
        pytest.param("dns1123Label", "Abc", [LABEL_MSG], id="label-upper"),
        pytest.param("dns1123Label", "a.b", ["must not contain dots"], id="label-dots"),
        pytest.param("dns1123Label", "é", [LABEL_MSG], id="label-non-ascii"),
        # the generateName variants: the trailing '-' allowed, as Kubernetes masks it
        pytest.param("dns1123LabelPrefix", "a-", OK, id="lp-trailing-dash"),
        pytest.param("dns1123LabelPrefix", "-", [LABEL_MSG], id="lp-only-dash"),
        pytest.param("dns1123LabelPrefix", "a--", OK, id="lp-two-dashes"),
        pytest.param("dns1123LabelPrefix", "a.-", OK, id="lp-dot-masked-away"),
        pytest.param("dns1123LabelPrefix", "-a-", [LABEL_MSG], id="lp-leading-dash"),
        pytest.param("dns1123LabelPrefix", LONG63 + "-", OK, id="lp-64-masked-to-63"),
        pytest.param(
            "dns1123LabelPrefix",
            LONG63 + "a-",
            ["must be no more than 63 characters"],
            id="lp-65",
        ),
        pytest.param("dns1123LabelPrefix", "a_b-", [LABEL_MSG], id="lp-bad-char"),
        pytest.param("dns1123LabelPrefix", "ab_-", OK, id="lp-char-before-dash-masked"),
        # DNS-1123 subdomains: 253 bytes, labels of any length
        pytest.param("dns1123Subdomain", ("a" * 63 + ".") * 3 + "a" * 61, OK, id="sub-253"),
        pytest.param(
            "dns1123Subdomain",
            ("a" * 63 + ".") * 3 + "a" * 62,
            ["must be no more than 253 characters"],
            id="sub-254",
        ),
        pytest.param("dns1123Subdomain", "a" * 100, OK, id="sub-long-label"),
        pytest.param("dns1123Subdomain", "a..b", [SUBDOMAIN_MSG], id="sub-empty-label"),
        pytest.param("dns1123Subdomain", ".a", [SUBDOMAIN_MSG], id="sub-leading-dot"),
        pytest.param("dns1123Subdomain", "a.", [SUBDOMAIN_MSG], id="sub-trailing-dot"),
        pytest.param("dns1123Subdomain", "a.-b", [SUBDOMAIN_MSG], id="sub-label-dash"),
        pytest.param("dns1123SubdomainPrefix", "a.b-", OK, id="sp-trailing-dash"),
        pytest.param("dns1123SubdomainPrefix", "a.", [SUBDOMAIN_MSG], id="sp-trailing-dot"),
        # DNS-1035 labels: start with a letter
        pytest.param("dns1035Label", "1abc", [DNS1035_MSG], id="1035-digit-first"),
        pytest.param("dns1035Label", "abc1", OK, id="1035-digit-last"),
        pytest.param("dns1035Label", "a.b", [DNS1035_MSG], id="1035-dots"),
        pytest.param(
            "dns1035Label", "a" * 64, ["must be no more than 63 characters"], id="1035-64"
        ),
        pytest.param("dns1035LabelPrefix", "a-", OK, id="1035p-trailing-dash"),
        pytest.param("dns1035LabelPrefix", "1a-", [DNS1035_MSG], id="1035p-digit-first"),
        pytest.param("dns1035LabelPrefix", "1-", OK, id="1035p-digit-masked-away"),
        # qualified names: prefix / name
        pytest.param("qualifiedName", "example.com/MyName", OK, id="qn-prefixed"),
        pytest.param("qualifiedName", "a_b.c-D", OK, id="qn-mixed"),
        pytest.param("qualifiedName", "a" * 63, OK, id="qn-63"),
        pytest.param(
            "qualifiedName",
            "a" * 64,
            ["name part must be no more than 63 characters"],
            id="qn-64",
        ),
        pytest.param(
            "qualifiedName",
            "",
            ["name part must be non-empty", "name part " + QNAME_MSG],
            id="qn-empty",
        ),
        pytest.param(
            "qualifiedName",
            "/a",
            ["prefix part must be non-empty"],
            id="qn-empty-prefix",
        ),
        pytest.param(
            "qualifiedName",
            "Example.com/a",
            ["prefix part " + SUBDOMAIN_MSG],
            id="qn-bad-prefix",
        ),
        pytest.param(
            "qualifiedName",
            "a/b/c",
            [
                "a qualified name "
                + QNAME_MSG
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ],
            id="qn-two-slashes",
        ),
        pytest.param("qualifiedName", "_a", ["name part " + QNAME_MSG], id="qn-leading-under"),
        # label values: empty allowed, 63 bytes, alphanumeric ends
        pytest.param("labelValue", "", OK, id="lv-empty"),
        pytest.param("labelValue", "a" * 63, OK, id="lv-63"),
        pytest.param("labelValue", "a" * 64, ["must be no more than 63 characters"], id="lv-64"),
        pytest.param(
            "labelValue",
            "é" * 32,
            ["must be no more than 63 characters", LABEL_VALUE_MSG],
            id="lv-64-bytes",
        ),  # fmt: skip
        pytest.param("labelValue", "a.", [LABEL_VALUE_MSG], id="lv-trailing-dot"),
        pytest.param("labelValue", "A_1", OK, id="lv-mixed"),
        # uri: Go's ParseRequestURI and its messages
        pytest.param("uri", "/absolute/path", OK, id="uri-path"),
        pytest.param("uri", "*", OK, id="uri-star"),
        pytest.param("uri", "mailto:a@b", OK, id="uri-opaque"),
        pytest.param("uri", "", ['parse "": empty url'], id="uri-empty"),
        pytest.param(
            "uri", "relative/x", ['parse "relative/x": invalid URI for request'], id="uri-rel"
        ),
        pytest.param("uri", ":x", ['parse ":x": missing protocol scheme'], id="uri-missing-scheme"),
        pytest.param(
            "uri",
            "http://a\nb",
            ['parse "http://a\\nb": net/url: invalid control character in URL'],
            id="uri-control",
        ),
        # uuid: 32 hex digits, dashes optional in their places, any case
        pytest.param("uuid", "123E4567E89B12D3A456426614174000", OK, id="uuid-no-dashes"),
        pytest.param("uuid", "123e4567-e89b12d3-a456-426614174000", OK, id="uuid-some-dashes"),
        pytest.param(
            "uuid",
            "123e4567-e89b-12d3-a456-42661417400",
            ["does not match the UUID format"],
            id="uuid-short",
        ),  # fmt: skip
        pytest.param(
            "uuid",
            "{123e4567-e89b-12d3-a456-426614174000}",
            ["does not match the UUID format"],
            id="uuid-braces",
        ),  # fmt: skip
        pytest.param(
            "uuid",
            "g23e4567-e89b-12d3-a456-426614174000",
            ["does not match the UUID format"],
            id="uuid-not-hex",
        ),  # fmt: skip
        # byte: padded standard base64, at least one group
        pytest.param("byte", "aGVsbG8h", OK, id="b64-no-padding-needed"),
        pytest.param("byte", "aGk=", OK, id="b64-one-pad"),
        pytest.param("byte", "aA==", OK, id="b64-two-pad"),
        pytest.param("byte", "+/+/", OK, id="b64-std-alphabet"),
        pytest.param("byte", "-_-_", ["invalid base64"], id="b64-url-alphabet"),
        pytest.param("byte", "", ["invalid base64"], id="b64-empty"),
        pytest.param("byte", "a===", ["invalid base64"], id="b64-three-pad"),
        # date: a real day of the Gregorian calendar
        pytest.param("date", "2024-02-29", OK, id="date-leap"),
        pytest.param("date", "2023-02-29", ["invalid date"], id="date-not-leap"),
        pytest.param("date", "1900-02-29", ["invalid date"], id="date-century"),
        pytest.param("date", "2000-02-29", OK, id="date-400"),
        pytest.param("date", "0000-01-01", OK, id="date-year-0"),
        pytest.param("date", "2021-04-31", ["invalid date"], id="date-april-31"),
        pytest.param("date", "2021-13-01", ["invalid date"], id="date-month-13"),
        pytest.param("date", "2021-1-01", ["invalid date"], id="date-one-digit"),
        pytest.param("date", "2021-01-01 ", ["invalid date"], id="date-extra"),
        # datetime: date T time, fraction and zone
        pytest.param("datetime", "2021-01-01t23:59:59.123+05:30", OK, id="dt-offset"),
        pytest.param("datetime", "2021-01-01T00:00:00", ["invalid datetime"], id="dt-no-zone"),
        pytest.param("datetime", "2021-01-01T24:00:00Z", ["invalid datetime"], id="dt-hour-24"),
        pytest.param("datetime", "2021-01-01T00:60:00Z", ["invalid datetime"], id="dt-min-60"),
        pytest.param("datetime", "2021-01-01", ["invalid datetime"], id="dt-date-only"),
        pytest.param("datetime", "2021-01-01T00:00:00Zt", OK, id="dt-after-second-t-ignored"),
        pytest.param("datetime", "2021-01-01T00:00:00é5Z", OK, id="dt-any-char-before-fraction"),
    ],
)
def test_validate(name: str, text: str, expected: list[str] | None) -> None:
    assert _messages(name, text) == expected


def test_named_formats_match_their_functions_and_differ_from_each_other() -> None:
    # format_test.go: every name is found, equals its function, and differs from the others
    names = sorted(FORMATS)
    assert len(names) == 13
    for left in names:
        assert compile_selector(f'format.named("{left}").hasValue()').matches(_device())
        same = f'format.named("{left}").value() == format.{left}()'
        assert compile_selector(same).matches(_device())
        for right in names:
            if right != left:
                assert not compile_selector(f"format.{left}() == format.{right}()").matches(
                    _device()
                )


@pytest.mark.parametrize(
    ("expression", "outcome"),
    [
        pytest.param('format.named("unknown").hasValue()', False, id="unknown-name"),
        pytest.param('format.named("DNS1123Label").hasValue()', False, id="names-case-matter"),
        pytest.param(f"format.named({A}.n).hasValue()", True, id="name-from-attribute"),
        pytest.param(
            f'format.named({A}.n).orValue(format.uri()).validate("Bad").hasValue()',
            True,
            id="or-value",
        ),
        pytest.param(f"format.named({A}.missing).hasValue()", "no such key", id="missing-key"),
        pytest.param(
            f"format.dns1123Label().validate({A}.i).hasValue()",
            "no matching overload",
            id="dyn-int-at-run-time",
        ),
        pytest.param('cel.bind(format, "abc", format.size() == 3)', True, id="bound-variable-wins"),
        pytest.param('["ab"].all(format, format.size() == 2)', True, id="macro-variable-wins"),
        pytest.param('"%s-%d".format(["a", 1]) == "a-1"', True, id="strings-format-kept"),
        pytest.param(
            'format.uri().validate("%s".format(["/x"])) == optional.none()',
            True,
            id="both-formats",
        ),
        pytest.param(
            "format.named('byte').value().validate('aGk=').orValue([]).size() == 0",
            True,
            id="chained-optional",
        ),
    ],
)
def test_selectors(expression: str, outcome: bool | str) -> None:
    device = _device(n="dns1123Label", i=1)
    selector = compile_selector(expression)
    if isinstance(outcome, bool):
        assert selector.matches(device) is outcome
    else:
        with pytest.raises(CelEvaluationError, match=outcome):
            selector.matches(device)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        pytest.param("format.named(1).hasValue()", "'format.named' applied to (int)", id="named"),
        pytest.param(
            "format.dns1123Label(1) == format.uri()",
            "'format.dns1123Label' applied to (int)",
            id="constant-with-arg",
        ),
        pytest.param(
            "format.uri().validate(1).hasValue()",
            "'validate' applied to kubernetes.NamedFormat.(int)",
            id="validate-int",
        ),
        pytest.param(
            'format.named("uri").validate("x").hasValue()',
            "'validate' applied to optional_type(kubernetes.NamedFormat).(string)",
            id="validate-on-optional",
        ),
        pytest.param('format.nope().validate("x").hasValue()', "'format.nope'", id="unknown"),
        pytest.param('format.uri().validate("x")', "must evaluate to bool", id="not-bool"),
        pytest.param("format.uri() < format.uuid()", "'_<_'", id="no-ordering"),
        pytest.param('format.uri() == "uri"', "'_==_'", id="no-string-equality"),
        pytest.param("format == 1", "undeclared reference to 'format'", id="not-a-variable"),
        pytest.param('"x".validate("y").hasValue()', "'validate' applied to string", id="str"),
    ],
)
def test_type_errors_at_compile_time(expression: str, message: str) -> None:
    with pytest.raises(CelCompileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compile_selector(expression)


# ---------------------------------------------------------------------------- generated devices
def _label_shaped(s: str, first: str) -> bool:
    alnum = "abcdefghijklmnopqrstuvwxyz0123456789"
    return bool(s) and s[0] in first and s[-1] in alnum and all(c in alnum + "-" for c in s)


def _reference(name: str, s: str) -> bool:
    """The rules restated without regular expressions."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    if name == "dns1123Label":
        return len(s) <= 63 and _label_shaped(s, letters + "0123456789")
    if name == "dns1035Label":
        return len(s) <= 63 and _label_shaped(s, letters)
    if name == "dns1123Subdomain":
        parts = s.split(".")
        return len(s) <= 253 and all(_label_shaped(p, letters + "0123456789") for p in parts)
    if name == "date":
        try:
            datetime.date.fromisoformat(s)
        except ValueError:
            return False
        return len(s) == 10 and s.isascii()
    raise AssertionError(name)


_NAMEISH = st.text(alphabet="abz019-.A_ ", max_size=70)
_DATEISH = st.builds(
    lambda y, m, d: f"{y:04d}-{m:02d}-{d:02d}",
    st.integers(1, 9999),
    st.integers(0, 13),
    st.integers(0, 32),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_NAMEISH, _DATEISH), min_size=1, max_size=6))
def test_generated_devices_agree_with_the_rules(values: list[str]) -> None:
    fleet = [_device(s=v) for v in values]
    for name in ("dns1123Label", "dns1035Label", "dns1123Subdomain", "date"):
        selector = compile_selector(f"!format.{name}().validate({A}.s).hasValue()")
        chosen = [d for d in fleet if selector.matches(d)]
        expected = [d for d, v in zip(fleet, values, strict=True) if _reference(name, v)]
        assert chosen == expected, name


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=80), _NAMEISH, _DATEISH), st.sampled_from(sorted(FORMATS)))
def test_any_text_validates_or_lists_messages(text: str, name: str) -> None:
    # never a crash: valid, or a non-empty list of non-empty messages
    result = validate(FORMATS[name], text)
    if result.has_value:
        messages = result.value
        assert isinstance(messages, tuple)
        assert messages
        assert all(isinstance(m, str) and m for m in messages)
    plain = FORMATS.get(name.removesuffix("Prefix"))
    if name.endswith("Prefix") and plain is not None and not validate(plain, text).has_value:
        # a valid name, one more character and the dash is a valid generateName prefix: Kubernetes
        # masks the last two characters into an 'a' (whatever the one before the dash was)
        room = 253 if "Subdomain" in name else 63
        if len(text) < room:
            assert not validate(FORMATS[name], text + "_-").has_value, text


# ---------------------------------------------------------------------------- costs
def _metered(expression: str) -> CountingSelector:
    tree = parse(expression)
    checked = check(tree, expression)
    estimate = estimate_cost(tree, checked)
    fn, slots = compile_counting(tree, checked, expression, estimate)
    return CountingSelector(expression, fn, slots, estimate, estimate)


WORST = _device(s="é" * 64, n="uri", u="ftp://" + "h" * 58)
COSTED = [
    f"format.dns1123Label().validate({A}.s).hasValue()",
    f"format.uri().validate({A}.s).value().join(',').size() > 10",
    f"format.named({A}.n).value().validate({A}.s).orValue([]).exists(m, m.size() > 3)",
    f"format.named({A}.n).value() == format.uri() && !format.uri().validate({A}.u).hasValue()",
    f"format.qualifiedName().validate({A}.s).value().all(m, m.contains('part'))",
    f"[format.uuid(), format.byte(), format.date(), format.datetime()].all(f, f.validate({A}.s).hasValue())",  # fmt: skip
]


@pytest.mark.parametrize("expression", [pytest.param(e, id=e[:50]) for e in COSTED])
def test_actual_cost_within_estimate_and_metered_agrees(expression: str) -> None:
    plain = compile_selector(expression)
    metered = _metered(expression)
    assert metered.matches(WORST) is plain.matches(WORST) is True
    assert 0 < metered.actual_cost(WORST) <= plain.max_cost


@pytest.mark.parametrize(
    ("name", "text", "price"),
    [
        # Kubernetes' cost.go: ceil((1 + len) / 10) * ceil(regexSize / 4)
        pytest.param("dns1123Label", "my-label-name", 2 * 8, id="label"),
        pytest.param("dns1123Subdomain", "", 1 * 15, id="subdomain-empty"),
        pytest.param("labelValue", "x" * 9, 1 * 10, id="label-value"),
        pytest.param("uri", "http://example.com", 2 * 276, id="uri"),
        pytest.param("uuid", "é" * 19, 2 * 18, id="runes-not-bytes"),
    ],
)
def test_run_time_prices_follow_kubernetes(name: str, text: str, price: int) -> None:
    assert FORMAT_RUNTIME_PRICES["validate"]((FORMATS[name], text), None) == price


def test_estimate_uses_the_known_format() -> None:
    label = compile_selector(f"format.dns1123Label().validate({A}.s).hasValue()").max_cost
    unknown = compile_selector(f"format.named({A}.n).value().validate({A}.s).hasValue()")
    assert label < unknown.max_cost
