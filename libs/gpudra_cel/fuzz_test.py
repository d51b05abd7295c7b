"""Fuzzing: whatever text arrives, `compile_selector` answers with a selector or a `CelError`,
and a compiled selector answers with a bool or a `CelEvaluationError` — never another exception.
The token soup includes CEL's optional syntax (`.?`, `[?`, `?` entries) beside the conditional."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra_api.quantity import Quantity
from gpudra_cel import CelError, CelEvaluationError, DeviceView, compile_selector

_DEVICE = DeviceView(
    "gpu.nvidia.com",
    {"gpu.nvidia.com": {"type": "gpu", "index": 1, "tags": ("a", "b")}},
    {"gpu.nvidia.com": {"memory": Quantity.parse("1Gi")}},
)

_TOKENS = st.sampled_from(
    [
        "device",
        ".",
        "driver",
        "attributes",
        "capacity",
        "allowMultipleAllocations",
        '["gpu.nvidia.com"]',
        ".type",
        ".index",
        ".tags",
        ".memory",
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        ",",
        ":",
        "?",
        "!",
        "-",
        "+",
        "*",
        "/",
        "%",
        "==",
        "!=",
        "<",
        ">=",
        "&&",
        "||",
        " in ",
        "1",
        "0",
        "-1",
        "1u",
        "2.5",
        "9223372036854775807",
        '"gpu"',
        '""',
        "'a'",
        'b"x"',
        "true",
        "false",
        "null",
        "x",
        "has",
        "all",
        "exists",
        "exists_one",
        "map",
        "filter",
        "size",
        "int",
        "uint",
        "double",
        "string",
        "bool",
        "bytes",
        "dyn",
        "quantity",
        "semver",
        "isQuantity",
        "matches",
        "startsWith",
        "split",
        "substring",
        "includes",
        "cel.bind",
        "optional.of",
        "optional.none",
        "optional.ofNonZeroValue",
        ".orValue",
        ".hasValue",
        ".value()",
        ".or",
        ".optMap",
        ".optFlatMap",
        ".?",
        "[?",
        ".?type",
        ".?memory",
        '[?"gpu.nvidia.com"]',
        "?",
        ".isGreaterThan",
        ".compareTo",
        ".asInteger",
        ".sign",
        '"1Gi"',
        '"1.2.3"',
        '"[a-"',
        " ",
        ".foo",
        "'driver'",
        "'foo'",
        "[0]",
        "strings.quote",
        ".format",
        "sets.contains",
        "lists.range",
        ".transformList",
        ".sortBy",
        ".sort()",
        ".first()",
        ".distinct()",
        ".slice",
        ".flatten",
        ".size()",
        "v",
        "k",
        "%",
        "timestamp",
        "duration",
        '"2024-01-01T00:00:00Z"',
        '"1h30m"',
        '"+05:30"',
        '"Europe/Berlin"',
        ".getHours",
        ".getFullYear",
        ".getDayOfWeek",
        ".getMilliseconds",
        "253402300799",
        "type",
        "null_type",
        "list",
        "google.protobuf.Duration",
    ]
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_TOKENS, max_size=14).map("".join))
def test_token_soup_never_crashes(expression: str) -> None:
    _exercise(expression)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_random_text_never_crashes(expression: str) -> None:
    _exercise(expression)


def _exercise(expression: str) -> None:
    try:
        selector = compile_selector(expression)
    except CelError:
        return
    try:
        result = selector.matches(_DEVICE)
    except CelEvaluationError:
        return
    assert result is True or result is False
