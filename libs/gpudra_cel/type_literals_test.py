"""`type(x)`, the type identifiers of cel-go's standard environment (`int`, `uint`, `double`,
`bool`, `string`, `bytes`, `list`, `map`, `null_type`, `type`, `google.protobuf.Timestamp`,
`google.protobuf.Duration`, and `optional_type` from its optional library) and `dyn()`, with the
results cel-go gives."""

from __future__ import annotations

import pytest

from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver
from gpudra_cel import CelCompileError, DeviceView, compile_selector
from gpudra_cel.conftest import Matches

_DEVICE = DeviceView(
    "gpu.nvidia.com",
    {
        "gpu.nvidia.com": {
            "index": 3,
            "model": "H100",
            "flag": True,
            "tags": ("a", "b"),
            "version": Semver.parse("1.2.3"),
        }
    },
    {"gpu.nvidia.com": {"memory": Quantity.parse("80Gi")}},
)
D = 'device.attributes["gpu.nvidia.com"]'

EVALUATIONS = [
    pytest.param("type(1) == int", True, id="int"),
    pytest.param("type(1u) == uint", True, id="uint"),
    pytest.param("type(1.0) == double", True, id="double"),
    pytest.param("type(true) == bool", True, id="bool"),
    pytest.param("type('a') == string", True, id="string"),
    pytest.param("type(b'a') == bytes", True, id="bytes"),
    pytest.param("type([1]) == list", True, id="list"),
    pytest.param("type({'a': 1}) == map", True, id="map"),
    pytest.param("type(null) == null_type", True, id="null"),
    pytest.param("type(int) == type", True, id="type-of-type"),
    pytest.param("type(type) == type", True, id="type-of-type-type"),
    pytest.param("type(optional.of(1)) == optional_type", True, id="optional"),
    pytest.param("type(timestamp(0)) == google.protobuf.Timestamp", True, id="timestamp"),
    pytest.param("type(duration('1s')) == google.protobuf.Duration", True, id="duration"),
    pytest.param("type(1) == string", False, id="int-is-not-string"),
    pytest.param("type(1) != type(1u)", True, id="int-is-not-uint"),
    pytest.param("type([1]) == type(['a'])", True, id="list-kind-only"),
    pytest.param("int != string", True, id="literals-differ"),
    pytest.param("type(dyn(1)) == int", True, id="dyn-keeps-runtime-type"),
    pytest.param(f"type({D}.index) == int", True, id="attr-int"),
    pytest.param(f"type({D}.model) == string", True, id="attr-string"),
    pytest.param(f"type({D}.flag) == bool", True, id="attr-bool"),
    pytest.param(f"type({D}.tags) == list", True, id="attr-list"),
    pytest.param(f"type({D}.version) == type(semver('1.0.0'))", True, id="attr-semver"),
    pytest.param(f"type({D}.version) != type(quantity('1'))", True, id="semver-not-quantity"),
    pytest.param(
        "type(device.capacity['gpu.nvidia.com'].memory) == type(quantity('1'))",
        True,
        id="capacity-quantity",
    ),
    pytest.param(f"type({D}.missing) == int", "no such key", id="missing-attribute"),
    pytest.param(f"{D}.index == 3 && type({D}.index) in [int]", True, id="type-in-list"),
    pytest.param("dyn(1) == 1.0", True, id="dyn-heterogeneous-equality"),
    pytest.param("[1, 2].all(int, int > 0)", True, id="variable-shadows-type-name"),
    pytest.param("cel.bind(string, 'a', string == 'a')", True, id="bind-shadows-type-name"),
    pytest.param("'%s'.format([int]) == 'int'", True, id="format-type"),
    pytest.param("'%s'.format([[int, type(1)]]) == '[int, int]'", True, id="format-list-of-types"),
    pytest.param(
        "'%s'.format([google.protobuf.Duration]) == 'google.protobuf.Duration'",
        True,
        id="format-qualified-type",
    ),
]


@pytest.mark.parametrize(("expression", "expected"), EVALUATIONS)
def test_types(expression: str, expected: bool | str, matches: Matches) -> None:
    matches(compile_selector(expression), _DEVICE, expected)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        pytest.param("type(1) == 1", "no matching overload", id="type-vs-int"),
        pytest.param("int < string", "no matching overload", id="types-unordered"),
        pytest.param("dyn == int", "undeclared reference to 'dyn'", id="dyn-is-no-type"),
        pytest.param("type(1, 2) == int", "no matching overload", id="type-arity"),
        # cel-go's homogeneous literals compare type(int) and type(uint) exactly
        pytest.param(
            "type(1) in [int, uint]",
            r"expected type 'type\(int\)' but found 'type\(uint\)'",
            id="homogeneous",
        ),
        pytest.param("google.protobuf.Any == int", "undeclared reference", id="unknown-qualified"),
        pytest.param("int", "must evaluate to bool", id="type-not-bool"),
    ],
)
def test_type_compile_errors(expression: str, message: str) -> None:
    with pytest.raises(CelCompileError, match=message):
        compile_selector(expression)
