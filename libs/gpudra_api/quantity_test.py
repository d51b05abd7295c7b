"""Table tests for Kubernetes quantity semantics (in the spirit of apimachinery's quantity tests)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpudra_api.errors import ApiError
from gpudra_api.quantity import Quantity, QuantityFormat, QuantityParseError


@pytest.mark.parametrize(
    ("text", "value", "canonical"),
    [
        pytest.param("0", Fraction(0), "0", id="zero"),
        pytest.param("-0", Fraction(0), "0", id="negative-zero"),
        pytest.param("0Mi", Fraction(0), "0", id="zero-binary"),
        pytest.param("1", Fraction(1), "1", id="one"),
        pytest.param("+1", Fraction(1), "1", id="plus-sign"),
        pytest.param("1000m", Fraction(1), "1", id="milli-to-unit"),
        pytest.param("0.5", Fraction(1, 2), "500m", id="half"),
        pytest.param(".5", Fraction(1, 2), "500m", id="no-leading-digit"),
        pytest.param("1.", Fraction(1), "1", id="trailing-dot"),
        pytest.param("1.G", Fraction(10**9), "1G", id="trailing-dot-suffix"),
        pytest.param("1024Mi", Fraction(2**30), "1Gi", id="mi-to-gi"),
        pytest.param("1Gi", Fraction(2**30), "1Gi", id="gi"),
        pytest.param("1.5Gi", Fraction(3 * 2**29), "1536Mi", id="fractional-gi"),
        pytest.param("0.5Ki", Fraction(512), "512", id="binary-below-1024"),
        pytest.param("1.5Ki", Fraction(1536), "1536", id="binary-not-divisible"),
        pytest.param("1025Ki", Fraction(1025 * 1024), "1025Ki", id="binary-odd"),
        pytest.param("80Gi", Fraction(80 * 2**30), "80Gi", id="gpu-memory"),
        pytest.param("1Ei", Fraction(2**60), "1Ei", id="exbi"),
        pytest.param("-1Gi", Fraction(-(2**30)), "-1Gi", id="negative-binary"),
        pytest.param("1k", Fraction(1000), "1k", id="kilo"),
        pytest.param("1000", Fraction(1000), "1k", id="thousand"),
        pytest.param("1500", Fraction(1500), "1500", id="fifteen-hundred"),
        pytest.param("10M", Fraction(10**7), "10M", id="ten-mega"),
        pytest.param("100M", Fraction(10**8), "100M", id="hundred-mega"),
        pytest.param("1E", Fraction(10**18), "1E", id="exa-uppercase-e"),
        pytest.param("1u", Fraction(1, 10**6), "1u", id="micro"),
        pytest.param("1n", Fraction(1, 10**9), "1n", id="nano"),
        pytest.param("0.1n", Fraction(1, 10**9), "1n", id="below-nano-rounds-up"),
        pytest.param("-0.1n", Fraction(-1, 10**9), "-1n", id="negative-rounds-away"),
        pytest.param("1.0001m", Fraction(1000100, 10**9), "1000100n", id="nano-mantissa"),
        pytest.param("1e3", Fraction(1000), "1e3", id="exponent"),
        pytest.param("1E3", Fraction(1000), "1e3", id="exponent-uppercase"),
        pytest.param("1e+3", Fraction(1000), "1e3", id="exponent-plus"),
        pytest.param("1.5e3", Fraction(1500), "1500", id="exponent-to-plain"),
        pytest.param("1e-3", Fraction(1, 1000), "1e-3", id="negative-exponent"),
        pytest.param("12e2", Fraction(1200), "1200", id="exponent-not-multiple-of-3"),
        pytest.param("100e21", Fraction(2**63 - 1), "9223372036854775807", id="exponent-capped"),
        pytest.param("20Ei", Fraction(2**63 - 1), "9223372036854775807", id="binary-capped"),
        pytest.param("007", Fraction(7), "7", id="leading-zeros"),
    ],
)
def test_parse_and_canonical_form(text: str, value: Fraction, canonical: str) -> None:
    q = Quantity.parse(text)
    assert q.value == value
    assert str(q) == canonical
    assert Quantity.parse(str(q)) == q  # the canonical form reads back as the same value


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param(" 1", id="leading-space"),
        pytest.param("1 ", id="trailing-space"),
        pytest.param("1.1.M", id="two-dots"),
        pytest.param("1+1.0M", id="plus-inside"),
        pytest.param("0.1mi", id="lowercase-mi"),
        pytest.param("0.1am", id="unknown-suffix"),
        pytest.param("aoeu", id="letters"),
        pytest.param(".5i", id="bare-i"),
        pytest.param("1i", id="one-i"),
        pytest.param("-3.01e-", id="exponent-without-digits"),
        pytest.param("1e", id="bare-e"),
        pytest.param("1KI", id="wrong-case-binary"),
        pytest.param("1K", id="uppercase-k"),
        pytest.param("-", id="bare-sign"),
        pytest.param(".", id="bare-dot"),
        pytest.param("1e99999", id="huge-exponent"),
        pytest.param("1" * 2000, id="too-long"),
    ],
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(QuantityParseError) as info:
        Quantity.parse(text)
    assert isinstance(info.value, ApiError)
    assert "quantity" in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("1Gi", 2**30, id="integral"),
        pytest.param("1500m", None, id="fraction"),
        pytest.param("-5", -5, id="negative"),
        pytest.param("9223372036854775807", 2**63 - 1, id="int64-max"),
        pytest.param("9223372036854775808", None, id="int64-overflow"),
        pytest.param("20Ei", 2**63 - 1, id="capped-binary"),
    ],
)
def test_as_int(text: str, expected: int | None) -> None:
    q = Quantity.parse(text)
    assert q.as_int() == expected
    assert q.is_integer() == (expected is not None)


@pytest.mark.parametrize(
    ("a", "b", "op", "expected"),
    [
        pytest.param("1Gi", "512Mi", "+", "1536Mi", id="add-binary"),
        pytest.param("1Gi", "1Gi", "-", "0", id="sub-to-zero"),
        pytest.param("0", "1Gi", "+", "1Gi", id="zero-takes-other-format"),
        pytest.param("1", "500m", "-", "500m", id="sub-decimal"),
        pytest.param("1k", "1Ki", "+", "2024", id="mixed-keeps-left-format"),
    ],
)
def test_arithmetic(a: str, b: str, op: str, expected: str) -> None:
    qa, qb = Quantity.parse(a), Quantity.parse(b)
    result = qa + qb if op == "+" else qa - qb
    assert str(result) == expected


def test_decimal_si_is_not_capped() -> None:
    # Kubernetes caps only binary-SI and exponent-form values at int64; decimal SI stays exact
    # and is written in exponent form when no SI suffix fits.
    q = Quantity.parse("1000E")
    assert q.value == 10**21
    assert str(q) == "1e21"
    assert q.as_int() is None


def test_equality_ignores_format_and_orders_by_value() -> None:
    assert Quantity.parse("1Ki") == Quantity.parse("1024")
    assert hash(Quantity.parse("1Ki")) == hash(Quantity.parse("1024"))
    assert Quantity.parse("1Gi") > Quantity.parse("1G")
    assert Quantity.parse("-1") < Quantity.parse("0")
    assert sorted([Quantity.parse(s) for s in ["2", "1m", "1k"]]) == [
        Quantity.parse("1m"),
        Quantity.parse("2"),
        Quantity.parse("1k"),
    ]
    assert Quantity.parse("1").compare(Quantity.parse("2")) == -1


def test_sign_zero_and_float() -> None:
    assert Quantity.parse("-3m").sign == -1
    assert Quantity.parse("0").sign == 0
    assert Quantity.parse("0").is_zero
    assert Quantity.parse("2k").sign == 1
    assert Quantity.parse("1500m").as_approximate_float() == 1.5
    assert -Quantity.parse("1Gi") == Quantity.parse("-1Gi")


def test_parse_int_and_bad_types() -> None:
    assert Quantity.parse(42) == Quantity.of(42)
    assert Quantity.of(5, QuantityFormat.BINARY_SI).format is QuantityFormat.BINARY_SI
    with pytest.raises(QuantityParseError):
        Quantity.parse(True)
    with pytest.raises(QuantityParseError):
        Quantity.parse(1.5)  # type: ignore[arg-type]


@given(st.text(alphabet="0123456789.+-eEinumkKMGTP ", max_size=12))
def test_parse_never_crashes(text: str) -> None:
    try:
        q = Quantity.parse(text)
    except QuantityParseError:
        return
    assert Quantity.parse(str(q)) == q


@given(
    st.integers(min_value=-(10**12), max_value=10**12),
    st.sampled_from(["", "m", "k", "Ki", "Mi", "Gi", "n", "e2", "u"]),
)
def test_canonical_round_trip(number: int, suffix: str) -> None:
    q = Quantity.parse(f"{number}{suffix}")
    assert Quantity.parse(str(q)) == q
