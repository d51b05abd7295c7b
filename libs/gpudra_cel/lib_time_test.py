"""CEL's timestamp and duration functions: the results and errors cel-go gives (its interpreter
and validator tests, Go's `time.Parse(time.RFC3339)` / `time.ParseDuration` / `Format`), in the
environment Kubernetes configures (UTC by default, literal arguments validated)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra_cel import CelCompileError, CelEvaluationError, DeviceView, compile_selector
from gpudra_cel.celtime import Duration, Timestamp, parse_duration, parse_timestamp
from gpudra_cel.conftest import Matches
from gpudra_cel.lib_time import _zone_offset

_DEVICE = DeviceView(
    "gpu.nvidia.com",
    {
        "gpu.nvidia.com": {
            "built": "2024-03-01T12:30:00Z",
            "builtLocal": "2024-03-01T12:30:00.25+05:30",
            "seconds": 7506,
            "maxAge": "720h",
            "bad": "2024-13-01T00:00:00Z",
        }
    },
    {},
)
D = 'device.attributes["gpu.nvidia.com"]'
X = '(timestamp(7506) + duration("1ms"))'  # cel-go's TestDefaultUTCTimeZone value, in UTC

EVALUATIONS = [
    # conversions and printing (Go's RFC3339Nano, FormatFloat(seconds, 'f', -1) + "s")
    pytest.param(
        'string(timestamp("2009-02-13T23:31:30Z")) == "2009-02-13T23:31:30Z"', True, id="str-ts"
    ),
    pytest.param(
        'string(timestamp("2009-02-13T23:31:30.120Z")) == "2009-02-13T23:31:30.12Z"',
        True,
        id="str-ts-fraction",
    ),
    pytest.param(
        'string(timestamp("2024-01-01T00:00:00+05:30")) == "2024-01-01T00:00:00+05:30"',
        True,
        id="str-ts-keeps-offset",
    ),
    pytest.param(
        'string(timestamp("2024-01-01T00:00:00+00:00")) == "2024-01-01T00:00:00Z"',
        True,
        id="str-ts-zero-offset",
    ),
    pytest.param(
        'string(timestamp("2024-01-01T00:00:00,5Z")) == "2024-01-01T00:00:00.5Z"',
        True,
        id="ts-comma-fraction",
    ),
    pytest.param(
        'string(timestamp("2024-01-01T00:00:00.1234567891Z")) == "2024-01-01T00:00:00.123456789Z"',
        True,
        id="ts-fraction-truncated",
    ),
    pytest.param(
        'string(timestamp("2024-01-01T1:02:03Z")) == "2024-01-01T01:02:03Z"',
        True,
        id="ts-one-digit-hour",
    ),
    pytest.param('int(timestamp("2009-02-13T23:31:30Z")) == 1234567890', True, id="int-ts"),
    pytest.param('int(timestamp("1969-12-31T23:59:59.5Z")) == -1', True, id="int-ts-floor"),
    pytest.param('string(timestamp(0)) == "1970-01-01T00:00:00Z"', True, id="ts-from-int"),
    pytest.param("timestamp(timestamp(5)) == timestamp(5)", True, id="ts-from-ts"),
    pytest.param('string(duration("1h30m")) == "5400s"', True, id="str-dur"),
    pytest.param('string(duration("1.5s")) == "1.5s"', True, id="str-dur-fraction"),
    pytest.param('string(duration("-1ns")) == "-0.000000001s"', True, id="str-dur-ns"),
    pytest.param('string(duration("0")) == "0s"', True, id="str-dur-zero"),
    pytest.param('int(duration("1s")) == 1000000000', True, id="int-dur"),
    pytest.param('duration("1h") == duration("60m")', True, id="dur-eq"),
    pytest.param('duration("1.5h") == duration("1h30m")', True, id="dur-fraction-hours"),
    pytest.param('duration("1\u00b5s") == duration("1us")', True, id="dur-micro-sign"),
    pytest.param('duration("1\u03bcs") == duration("1000ns")', True, id="dur-mu"),
    pytest.param('duration("-2562047h47m16.854775808s") < duration("0")', True, id="dur-min"),
    pytest.param("duration(duration('3s')) == duration('3s')", True, id="dur-from-dur"),
    # operators
    pytest.param(
        'timestamp("2023-01-01T00:00:00Z") + duration("24h1m2s") == '
        'timestamp("2023-01-02T00:01:02Z")',
        True,
        id="ts-plus-dur",
    ),
    pytest.param(
        'duration("24h") + timestamp("2023-01-01T00:00:00Z") == timestamp("2023-01-02T00:00:00Z")',
        True,
        id="dur-plus-ts",
    ),
    pytest.param(
        'timestamp("2023-01-10T12:00:00Z") - duration("12h") == timestamp("2023-01-10T00:00:00Z")',
        True,
        id="ts-minus-dur",
    ),
    pytest.param(
        'timestamp("2023-01-10T12:00:00Z") - timestamp("2023-01-10T00:00:00Z") == duration("12h")',
        True,
        id="ts-minus-ts",
    ),
    pytest.param('duration("1m") - duration("1s") == duration("59s")', True, id="dur-minus-dur"),
    pytest.param('duration("1m") + duration("1s") == duration("61s")', True, id="dur-plus-dur"),
    pytest.param(
        'string(timestamp("2024-01-01T00:00:00+05:30") + duration("1h")) == '
        '"2024-01-01T01:00:00+05:30"',
        True,
        id="sum-keeps-offset",
    ),
    pytest.param(
        'timestamp("2024-01-01T05:30:00+05:30") == timestamp("2024-01-01T00:00:00Z")',
        True,
        id="eq-ignores-offset",
    ),
    pytest.param(
        'timestamp("2001-01-01T02:03:04Z") < timestamp("2002-02-02T02:03:04Z")', True, id="ts-lt"
    ),
    pytest.param('duration("1ms") > duration("1us")', True, id="dur-gt"),
    pytest.param('duration("60s") >= duration("1m")', True, id="dur-ge"),
    pytest.param('-dyn(duration("1s")) == duration("-1s")', True, id="dur-negate-dyn"),
    pytest.param("timestamp(1) in [timestamp(1), timestamp(2)]", True, id="ts-in-list"),
    pytest.param("dyn(timestamp(1)) == dyn(1)", False, id="ts-eq-int-dyn"),
    pytest.param("timestamp(1) != null", True, id="ts-ne-null"),
    # accessors: UTC by default (cel-go's TestDefaultUTCTimeZone, enabled)
    pytest.param(
        f"{X}.getFullYear() == 1970 && {X}.getMonth() == 0 && {X}.getDayOfYear() == 0 && "
        f"{X}.getDayOfMonth() == 0 && {X}.getDate() == 1 && {X}.getDayOfWeek() == 4 && "
        f"{X}.getHours() == 2 && {X}.getMinutes() == 5 && {X}.getSeconds() == 6 && "
        f"{X}.getMilliseconds() == 1",
        True,
        id="accessors-utc",
    ),
    pytest.param(
        f"{X}.getFullYear('-07:30') == 1969 && {X}.getDayOfYear('-07:30') == 364 && "
        f"{X}.getMonth('-07:30') == 11 && {X}.getDayOfMonth('-07:30') == 30 && "
        f"{X}.getDate('-07:30') == 31 && {X}.getDayOfWeek('-07:30') == 3 && "
        f"{X}.getHours('-07:30') == 18 && {X}.getMinutes('-07:30') == 35 && "
        f"{X}.getSeconds('-07:30') == 6 && {X}.getMilliseconds('-07:30') == 1",
        True,
        id="accessors-negative-offset",
    ),
    pytest.param(
        f"{X}.getFullYear('23:15') == 1970 && {X}.getDayOfYear('23:15') == 1 && "
        f"{X}.getMonth('23:15') == 0 && {X}.getDayOfMonth('23:15') == 1 && "
        f"{X}.getDate('23:15') == 2 && {X}.getDayOfWeek('23:15') == 5 && "
        f"{X}.getHours('23:15') == 1 && {X}.getMinutes('23:15') == 20",
        True,
        id="accessors-unsigned-offset",
    ),
    pytest.param(
        'timestamp("2024-07-01T12:00:00Z").getHours("Europe/Berlin") == 14 && '
        'timestamp("2024-01-01T12:00:00Z").getHours("Europe/Berlin") == 13',
        True,
        id="accessors-iana-dst",
    ),
    pytest.param(
        'timestamp("2024-01-01T00:00:00+05:30").getHours() == 18', True, id="accessor-utc-default"
    ),
    pytest.param(
        'timestamp("2024-12-31T12:00:00Z").getDayOfYear() == 365', True, id="leap-day-of-year"
    ),
    pytest.param(f"{X}.getHours('Am/Ph') == 2", "unknown time zone Am/Ph", id="bad-zone"),
    pytest.param(f"{X}.getHours(':xx') == 2", "invalid syntax", id="bad-offset"),
    pytest.param(
        f"{X}.getHours('" + "1" * 5000 + ":00') == 2", "value out of range", id="huge-offset"
    ),
    pytest.param(
        'duration("2h0m35s").getHours() == 2 && duration("2h0m35s").getMinutes() == 120 && '
        'duration("2h0m35s").getSeconds() == 7235 && '
        'duration("2h0m35s").getMilliseconds() == 7235000',
        True,
        id="duration-accessors",
    ),
    pytest.param(
        'duration("-90m").getHours() == -1 && duration("-1.5s").getMilliseconds() == -1500',
        True,
        id="duration-accessors-negative",
    ),
    # device attributes (strings) and run-time errors
    pytest.param(
        f'timestamp({D}.built) > timestamp("2024-01-01T00:00:00Z")', True, id="attribute-ts"
    ),
    pytest.param(
        f"timestamp({D}.builtLocal).getHours() == 7 && "
        f"timestamp({D}.builtLocal).getMilliseconds() == 250",
        True,
        id="attribute-ts-offset",
    ),
    pytest.param(
        f"timestamp({D}.seconds) == timestamp('1970-01-01T02:05:06Z')", True, id="attribute-int"
    ),
    pytest.param(
        f'timestamp({D}.built) - timestamp("2024-02-01T12:30:00Z") < duration({D}.maxAge)',
        True,
        id="attribute-age",
    ),
    pytest.param(
        f"timestamp({D}.bad) > timestamp(0)",
        "type conversion error from 'string' to 'google.protobuf.Timestamp'",
        id="attribute-bad-ts",
    ),
    pytest.param(
        f"duration({D}.built) > duration('1s')",
        "type conversion error from 'string' to 'google.protobuf.Duration'",
        id="attribute-bad-duration",
    ),
    pytest.param(
        'timestamp("9999-12-31T23:59:59Z") + duration("1s") > timestamp(0)',
        "timestamp overflow",
        id="overflow-max",
    ),
    pytest.param(
        'timestamp("0001-01-01T00:00:00Z") - duration("1ns") < timestamp(0)',
        "timestamp overflow",
        id="overflow-min",
    ),
    pytest.param(
        'duration("2562047h") + duration("2562047h") > duration("0")',
        "integer overflow",
        id="duration-overflow",
    ),
    pytest.param(
        'timestamp("9999-01-01T00:00:00Z") - timestamp("0001-01-01T00:00:00Z") > duration("0")',
        "integer overflow",
        id="difference-overflow",
    ),
    pytest.param(
        'timestamp(0) - duration("-2562047h47m16.854775808s") > timestamp(0)',
        "integer overflow",
        id="negate-min-duration",
    ),
    pytest.param(
        '-dyn(duration("-2562047h47m16.854775808s")) > duration("0")',
        "integer overflow",
        id="negate-dyn-min-duration",
    ),
]


@pytest.mark.parametrize(("expression", "expected"), EVALUATIONS)
def test_time_functions(expression: str, expected: bool | str, matches: Matches) -> None:
    matches(compile_selector(expression), _DEVICE, expected)


REJECTED = [
    # cel-go's ValidateDurationLiterals / ValidateTimestampLiterals tests
    pytest.param("duration('1') > duration('0')", "invalid duration argument", id="dur-no-unit"),
    pytest.param("duration('1d') > duration('0')", "invalid duration argument", id="dur-day"),
    pytest.param(
        "duration('1us') < duration('1nns')", "invalid duration argument", id="dur-bad-unit"
    ),
    pytest.param("duration('') > duration('0')", "invalid duration argument", id="dur-empty"),
    pytest.param("duration('.s') > duration('0')", "invalid duration argument", id="dur-dot"),
    pytest.param(
        "duration('9223372036854775808ns') > duration('0')",
        "invalid duration argument",
        id="dur-too-long",
    ),
    pytest.param(
        "timestamp('1000-00-00T00:00:00Z') > timestamp(0)",
        "invalid timestamp argument",
        id="ts-month-zero",
    ),
    pytest.param(
        "timestamp('1000-01-01T00:00:00ZZ') > timestamp(0)",
        "invalid timestamp argument",
        id="ts-trailing",
    ),
    pytest.param(
        "timestamp(-62135596801) > timestamp(0)", "invalid timestamp argument", id="ts-int-range"
    ),
    pytest.param(
        "timestamp('2023-02-29T00:00:00Z') > timestamp(0)",
        "invalid timestamp argument",
        id="ts-not-leap",
    ),
    pytest.param(
        "timestamp('2024-01-01t00:00:00Z') > timestamp(0)",
        "invalid timestamp argument",
        id="ts-lowercase-t",
    ),
    pytest.param(
        "timestamp('2024-01-01T00:00:00') > timestamp(0)",
        "invalid timestamp argument",
        id="ts-no-zone",
    ),
    pytest.param(
        "timestamp('10000-01-01T00:00:00Z') > timestamp(0)",
        "invalid timestamp argument",
        id="ts-five-digit-year",
    ),
    pytest.param(
        "duration('" + "9" * 5000 + "s') > duration('0')",
        "invalid duration argument",
        id="dur-huge-number",
    ),
    # types: what cel-go's checker refuses
    pytest.param(
        "timestamp(0) + timestamp(1) > timestamp(0)",
        "no matching overload for '_\\+_'",
        id="ts-plus-ts",
    ),
    pytest.param("-duration('1s') < duration('0')", "no matching overload", id="dur-negate"),
    pytest.param("timestamp(0) < duration('1s')", "no matching overload", id="ts-lt-dur"),
    pytest.param("duration(1) > duration('0')", "no matching overload", id="dur-from-int"),
    pytest.param("timestamp(1.5) > timestamp(0)", "no matching overload", id="ts-from-double"),
]


@pytest.mark.parametrize(("expression", "message"), REJECTED)
def test_time_compile_errors(expression: str, message: str) -> None:
    with pytest.raises(CelCompileError, match=message):
        compile_selector(expression)


@pytest.mark.parametrize(
    ("expression", "accepted"),
    [
        pytest.param("timestamp('1000-01-01T00:00:00Z') > timestamp(0)", False, id="ts-ok"),
        pytest.param("timestamp(-62135596800) < timestamp(0)", True, id="ts-min"),
        pytest.param("duration('2h3m4s5us') > duration('0')", True, id="dur-ok"),
        pytest.param("timestamp('0000-12-31T20:00:00-05:00') < timestamp(0)", True, id="year-0"),
    ],
)
def test_time_literals_accepted(expression: str, accepted: bool) -> None:
    assert compile_selector(expression).matches(_DEVICE) is accepted


def test_cost_is_metered() -> None:
    """Timestamp calls cost 1 each, as cel-go prices them, in the estimate and at run time."""
    expression = f'timestamp({D}.built) > timestamp("2024-01-01T00:00:00Z")'
    plain = compile_selector(expression)
    counting = compile_selector(expression, cost_limit=1)
    assert plain.max_cost == counting.max_cost > 1
    assert counting.counts_cost
    with pytest.raises(Exception, match="actual cost limit exceeded"):
        counting.matches(_DEVICE)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param(
            '"%s".format([timestamp("2024-01-01T00:00:00+05:30")]) == '
            '"2024-01-01T00:00:00+05:30"',
            True,
            id="format-timestamp",
        ),
        pytest.param('"%s".format([duration("90s")]) == "90s"', True, id="format-duration"),
        pytest.param(
            '"%s".format([[timestamp(0), timestamp(1)]]) == '
            '\'[timestamp("1970-01-01T00:00:00Z"), timestamp("1970-01-01T00:00:01Z")]\'',
            True,
            id="format-list-of-timestamps",
        ),
        pytest.param(
            '"%s".format([{"a": duration("1ms")}]) == \'{"a":duration("0.001s")}\'',
            True,
            id="format-map-of-durations",
        ),
    ],
)
def test_format_prints_time_values(expression: str, expected: bool) -> None:
    """cel-go's strings extension (version 2, as Kubernetes declares it): `%s` prints a
    timestamp or duration as `string()` does, and as a CEL literal inside a list or map."""
    assert compile_selector(expression).matches(_DEVICE) is expected


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789.+-:TZzsmhnuµμ,/ aAE", max_size=40))
def test_parsers_fail_only_with_cel_errors(text: str) -> None:
    """Whatever the text, the parsers and the zone reader answer or raise `CelEvaluationError`."""
    for parse in (parse_duration, parse_timestamp, lambda t: _zone_offset(Timestamp(0), t)):
        with contextlib.suppress(CelEvaluationError):
            parse(text)


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        pytest.param("1.000000001s", 1_000_000_001, id="ns-precision"),
        pytest.param("0.5h", 1_800_000_000_000, id="half-hour"),
        pytest.param("+.5s", 500_000_000, id="leading-dot"),
        pytest.param("5.s", 5_000_000_000, id="trailing-dot"),
        pytest.param("1h1h", 7_200_000_000_000, id="repeated-unit"),
        pytest.param("-0", 0, id="negative-zero"),
        pytest.param("9223372036.854775807s", (1 << 63) - 1, id="max"),
        pytest.param("0.1234567890123456789012345s", 123_456_789, id="long-fraction"),
    ],
)
def test_go_duration_syntax(text: str, nanos: int) -> None:
    assert parse_duration(text) == Duration(nanos)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param("[duration('1s'), duration('2m')].sum() == duration('121s')", True, id="sum"),
        pytest.param("[timestamp(3), timestamp(1)].min() == timestamp(1)", True, id="min"),
        pytest.param("[duration('1s'), duration('2s')].max() == duration('2s')", True, id="max"),
        pytest.param("[timestamp(1), timestamp(3)].isSorted()", True, id="isSorted"),
        pytest.param(
            "[duration('2562047h'), duration('2562047h')].sum() > duration('0')",
            "integer overflow",
            id="sum-overflow",
        ),
    ],
)
def test_kubernetes_list_library(expression: str, expected: bool | str, matches: Matches) -> None:
    """Kubernetes' list library declares `sum()` for durations too, and `min()` / `max()` /
    `isSorted()` for timestamps and durations among its comparable types."""
    matches(compile_selector(expression), _DEVICE, expected)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param("!optional.ofNonZeroValue(duration('0s')).hasValue()", True, id="zero-dur"),
        pytest.param("optional.ofNonZeroValue(duration('1ns')).hasValue()", True, id="dur"),
        # Go's Time.IsZero: January 1, year 1, 00:00:00 UTC (not the Unix epoch)
        pytest.param(
            "!optional.ofNonZeroValue(timestamp('0001-01-01T00:00:00Z')).hasValue()",
            True,
            id="zero-ts",
        ),
        pytest.param("optional.ofNonZeroValue(timestamp(0)).hasValue()", True, id="epoch"),
    ],
)
def test_zero_values(expression: str, expected: bool) -> None:
    assert compile_selector(expression).matches(_DEVICE) is expected
