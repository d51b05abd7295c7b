"""Generated `&&`/`||` chains: CEL's commutative error semantics, inlined comparisons on every
kind of map the allocator may hand over, and operands that are not bools."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

import pytest

from gpudra_cel import DeviceView, compile_selector

if TYPE_CHECKING:
    from gpudra_cel.conftest import Matches

D = 'device.attributes["d"]'
PLAIN = DeviceView("drv", {"d": {"s": "x", "n": 3, "b": True, "l": ("a",)}}, {})
PROXY = DeviceView(
    "drv", MappingProxyType({"d": MappingProxyType({"s": "x", "n": 3, "b": True, "l": ("a",)})}), {}
)


@pytest.mark.parametrize("device", [PLAIN, PROXY], ids=["dict", "mapping-proxy"])
@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param(f'{D}.s == "x" && {D}.n == 3 && {D}.n < 4', True, id="and-all-true"),
        pytest.param(f'{D}.s == "x" && {D}.n > 3', False, id="and-one-false"),
        pytest.param(f'{D}.missing == "x" && {D}.n > 3', False, id="and-error-then-false"),
        pytest.param(f'{D}.n > 3 && {D}.missing == "x"', False, id="and-false-then-error"),
        pytest.param(
            f'{D}.missing == "x" && {D}.n == 3', "no such key: missing", id="and-error-wins"
        ),
        pytest.param(f"{D}.n == 3 && {D}.s", "_&&_", id="and-non-bool"),
        pytest.param(f"{D}.s && false", False, id="and-non-bool-absorbed"),
        pytest.param(f"{D}.a == 1 && {D}.b2 == 1", "no such key: a", id="and-first-error"),
        pytest.param(f'{D}.missing == "x" || {D}.n == 3', True, id="or-error-then-true"),
        pytest.param(f'{D}.n == 4 || {D}.s == "y"', False, id="or-all-false"),
        pytest.param(
            f'{D}.n == 4 || {D}.missing == "y"', "no such key: missing", id="or-error-wins"
        ),
        pytest.param(f"{D}.s || true", True, id="or-non-bool-absorbed"),
        pytest.param(f'{D}.n in ["3"] || {D}.s in ["x", "y"]', True, id="in-strings"),
        pytest.param(f'{D}.n == "3" || {D}.s != "x"', False, id="str-literal-vs-int"),
        pytest.param(f"{D}.s < 4", "_<_", id="int-compare-on-string"),
        pytest.param(f"{D}.s < 4 || true", True, id="int-compare-error-absorbed"),
        pytest.param(f'({D}.n == 3 || {D}.s == "z") && !({D}.b && false)', True, id="nested"),
        pytest.param(
            f'cel.bind(a, {D}, a.s == "x" && a.n >= 3 && has(a.l) && !has(a.z))', True, id="bind"
        ),
        pytest.param(f'cel.bind(a, {D}.s, a.x == "x" || true)', True, id="bind-non-map-absorbed"),
        pytest.param(
            f'cel.bind(a, {D}.s, a.x == "x" && true)', "does not support field", id="bind-non-map"
        ),
        pytest.param(f"cel.bind(a, {D}.n, has(a.x) && true)", "has no fields", id="has-on-int"),
        pytest.param(f'[{D}].exists(m, m.s == "x" && m.n == 3)', True, id="macro-var"),
        pytest.param(
            f"cel.bind(v, {D}.missing, false && v.s == 'x')", False, id="bind-error-unused"
        ),
        pytest.param(
            f"cel.bind(v, {D}.missing, v.s == 'x' && true)",
            "no such key: missing",
            id="bind-error-used",
        ),
        pytest.param(f"cel.bind(v, {D}.missing, v == 1 || true)", True, id="bind-error-absorbed"),
        pytest.param(
            f"cel.bind(v, {D}.missing, !(v == 1))", "no such key: missing", id="bind-error-closure"
        ),
        pytest.param(f"cel.bind(v, {D}.missing, 1 == 1)", True, id="bind-error-ignored"),
        pytest.param('device.driver == "drv" && device.driver != "x"', True, id="driver"),
    ],
)
def test_chain(device: DeviceView, expression: str, expected: bool | str, matches: Matches) -> None:
    matches(compile_selector(expression), device, expected)
