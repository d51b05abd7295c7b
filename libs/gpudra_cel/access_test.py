"""The device where the type checker has lost track of it (`dyn(device)`, mixed lists, bound
maps): the map of four fields Kubernetes evaluates selectors on, with `attributes` / `capacity`
yielding an empty map for an unknown domain on lookup (not on `in`, `size` or iteration). Never a
bare Python exception."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from gpudra_api.quantity import Quantity
from gpudra_cel import CelEvaluationError, DeviceView, compile_selector
from gpudra_cel.access import has_field, index_value, select_value
from gpudra_cel.values import DefaultingMap, contains, equal, map_lookup

if TYPE_CHECKING:
    from gpudra_cel.conftest import Matches

DRV = "gpu.nvidia.com"
DEVICE = DeviceView(
    DRV, {DRV: {"type": "gpu", "tags": ("a", "b")}}, {DRV: {"memory": Quantity.parse("1Gi")}}
)
D = "dyn(device)"
BOUND = "cel.bind(a, device.attributes, {})"


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param(f"{D}.foo == 1", "no such key: foo", id="unknown-field"),
        pytest.param(f"{D}['foo'] == 1", "no such key: 'foo'", id="unknown-index"),
        pytest.param(f"{D}[1] == 1", "no such key: 1", id="int-index"),
        pytest.param(f"{D}['driver'] == '{DRV}'", True, id="index-a-field"),
        pytest.param(f"{D}.allowMultipleAllocations == false", True, id="select-a-field"),
        pytest.param(f"'driver' in {D} && !('foo' in {D})", True, id="in"),
        pytest.param(f"size({D}) == 4", True, id="size"),
        pytest.param(f"{D}.filter(k, k.startsWith('a')).size() == 2", True, id="iterate-keys"),
        pytest.param(f"{D} == {D} && [{D}][0] == device", True, id="equal"),
        pytest.param(f"has({D}.driver) && !has({D}.foo)", True, id="has"),
        pytest.param(f"{D}.?foo.hasValue() || {D}[?'foo'].hasValue()", False, id="optional"),
        pytest.param(f"{D}.attributes.nope.size() == 0", True, id="unknown-domain-is-empty"),
        pytest.param(f"{D}.capacity['{DRV}'].memory.isGreaterThan(quantity('1'))", True),
        pytest.param(f"{D}.attributes['{DRV}'].nope", "no such key: nope", id="unknown-name"),
        pytest.param(BOUND.format("a.nope.size() == 0"), True, id="bound-unknown-domain"),
        pytest.param(BOUND.format("has(a.nope) && a[?'nope'].hasValue()"), True, id="bound-has"),
        pytest.param(BOUND.format("!('nope' in a) && size(a) == 1"), True, id="bound-in-size"),
        pytest.param(BOUND.format("a.all(d, d == '" + DRV + "')"), True, id="bound-iterate"),
        pytest.param(BOUND.format("a.nope.x"), "no such key: x", id="bound-unknown-name"),
        pytest.param("[dyn(device), dyn(1)][0].nope", "no such key: nope", id="mixed-list"),
        # a macro or cel.bind variable named `device` shadows the device, as in cel-go
        pytest.param(
            "[{'attributes': {'d': {'x': 5}}}].all(device, device.attributes['d'].x == 5)",
            True,
            id="shadowed-by-a-macro",
        ),
        pytest.param(
            "cel.bind(device, {'driver': 'q'}, device.driver == 'q')", True, id="shadowed-by-bind"
        ),
        pytest.param(
            "cel.bind(device, {'attributes': {}}, !device.attributes[?'x'].hasValue())",
            True,
            id="shadowed-map-has-no-default",
        ),
        # device.attributes[?d] is always present (an unknown domain is an empty map)
        pytest.param(f"device.attributes[?'{DRV}'].?type.orValue('') == 'gpu'", True),
        pytest.param("device.attributes[?'nope'].?type.orValue('none') == 'none'", True),
        pytest.param("device.attributes[?'nope'].hasValue()", True, id="optional-domain"),
        pytest.param("device.attributes[dyn(1)].size() == 0", True, id="int-domain-fused"),
        pytest.param(f"{D}.attributes[1].size() == 0", True, id="int-domain-generic"),
        pytest.param("device.capacity[?'nope'].value().size() == 0", True, id="optional-capacity"),
    ],
)
def test_device_as_a_map(expression: str, expected: bool | str, matches: Matches) -> None:
    matches(compile_selector(expression), DEVICE, expected)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        pytest.param("driver", DRV, id="driver"),
        pytest.param("allowMultipleAllocations", False, id="allow"),
        pytest.param("attributes", {DRV: {"type": "gpu", "tags": ("a", "b")}}, id="attributes"),
        pytest.param("foo", None, id="unknown"),
        pytest.param(3, None, id="not-a-string"),
        pytest.param(None, None, id="null"),
    ],
)
def test_device_fields_by_select_and_index(key: object, expected: object) -> None:
    if expected is None:
        with pytest.raises(CelEvaluationError, match="no such key"):
            index_value(DEVICE, key)
        assert has_field(DEVICE, str(key)) is False
    else:
        assert index_value(DEVICE, key) == expected
        assert select_value(DEVICE, str(key)) == expected
        assert has_field(DEVICE, str(key)) is True


def test_defaulting_map_finds_every_key_but_contains_only_its_entries() -> None:
    m = DefaultingMap({"a": 1})
    assert map_lookup(m, "a") == (True, 1)
    assert map_lookup(m, "b") == (True, {})
    assert map_lookup(m, 7) == (True, {})
    assert (contains(m, "a"), contains(m, "b")) == (True, False)
    assert (len(m), list(m)) == (1, ["a"])
    assert has_field(m, "b") is True
    assert equal(m, {"a": 1})
    assert equal({"a": 1}, m)
