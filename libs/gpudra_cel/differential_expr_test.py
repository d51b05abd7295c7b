"""Differential test over generated expressions: hypothesis builds selectors from a grammar of
comparisons, logic, ternaries, integer arithmetic, `in`, `has` and macros over generated devices,
and gpudra_cel must agree with cel-python's interpreter on every outcome (true, false, error).

The grammar stays inside what cel-python implements like cel-go (see differential_test for the
oracles it is given); `flag` (the only attribute that may be a bool) is only compared with `==`,
since cel-python orders and adds bools like ints.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra_cel import CelCompileError, DeviceView, compile_selector
from gpudra_cel.differential_test import _ENV, ORACLES, _ours_selector, _reference_program, devices

D = 'device.attributes["gpu.nvidia.com"]'
C = 'device.capacity["gpu.nvidia.com"]'

_INT_ATTRS = st.sampled_from(["index", "numaNode", "mixed"])
_STR_ATTRS = st.sampled_from(["type", "architecture", "uuid", "nvlinkDomain", "mixed"])
_ANY_ATTRS = st.sampled_from(["type", "index", "mixed", "flag", "nvlinkDomain", "tags", "nope"])
_INTS = st.integers(-3, 8).map(str)
_STRS = st.sampled_from(['"gpu"', '"mig"', '"Hopper"', '"nvswitch-0"', '"1"', '""'])
_CMP = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])


def _int_expr() -> st.SearchStrategy[str]:
    leaves = st.one_of(_INTS, _INT_ATTRS.map(lambda a: f"{D}.{a}"), st.just(f"size({D}.tags)"))
    return st.recursive(
        leaves,
        lambda inner: st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        max_leaves=4,
    )


def _bool_leaf() -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(_int_expr(), _CMP, _int_expr()).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(_STR_ATTRS, st.sampled_from(["==", "!="]), _STRS).map(
            lambda t: f"{D}.{t[0]} {t[1]} {t[2]}"
        ),
        st.tuples(st.sampled_from(["true", "false", "1", '"x"']), _ANY_ATTRS).map(
            lambda t: f"{D}.{t[1]} == {t[0]}"
        ),
        _ANY_ATTRS.map(lambda a: f"has({D}.{a})"),
        st.tuples(
            st.sampled_from(["memory", "multiprocessors"]),
            st.sampled_from(["isGreaterThan", "isLessThan"]),
            st.sampled_from(["40Gi", "80Gi", "1500m", "14", "0"]),
        ).map(lambda t: f'{C}.{t[0]}.{t[1]}(quantity("{t[2]}"))'),
        st.tuples(st.sampled_from(["memory", "multiprocessors"]), _CMP).map(
            lambda t: f'{C}.{t[0]}.compareTo(quantity("20G")) {t[1]} 0'
        ),
        st.tuples(
            st.sampled_from(["cudaComputeCapability", "driverVersion", "type"]),
            st.sampled_from(["isGreaterThan", "isLessThan"]),
            st.sampled_from(["9.0.0", "12.4.0", "9.0.0-rc.1"]),
        ).map(lambda t: f'{D}.{t[0]}.{t[1]}(semver("{t[2]}"))'),
        st.tuples(st.sampled_from(["cudaComputeCapability", "driverVersion"]), _CMP, _INTS).map(
            lambda t: f"{D}.{t[0]}.major() {t[1]} {t[2]}"
        ),
        st.tuples(
            _STR_ATTRS,
            st.sampled_from(["startsWith", "endsWith", "contains", "matches"]),
            st.sampled_from(['"n"', '"0"', '"^[a-z]+$"', '"Hop"', '""']),
        ).map(lambda t: f"{D}.{t[0]}.{t[1]}({t[2]})"),
        _STR_ATTRS.map(lambda a: f'{D}.{a} in ["gpu", "Hopper", "nvlink-1"]'),
        st.sampled_from(
            [
                f'{D}.tags.exists(t, t == "nvlink")',
                f'{D}.tags.all(t, t.startsWith("n"))',
                f"{D}.tags.exists_one(t, t.size() == 2)",
                f'{D}.tags.filter(t, t != "x").size() > 0',
                'device.driver == "gpu.nvidia.com"',
                "device.allowMultipleAllocations",
                "true",
                "false",
            ]
        ),
    )


def _bool_expr() -> st.SearchStrategy[str]:
    return st.recursive(
        _bool_leaf(),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["&&", "||"]), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"
            ),
            inner.map(lambda e: f"!({e})"),
            st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
        ),
        max_leaves=6,
    )


def _selector() -> st.SearchStrategy[str]:
    # Also through cel.bind: the reference substitutes the bound expression textually, which is
    # exactly cel-go's semantics (an error in the bound value surfaces only where it is used).
    return st.one_of(
        _bool_expr(),
        _bool_expr().map(lambda e: f"cel.bind(g, {D}, {e.replace(D, 'g')})"),
        st.tuples(_bool_expr(), st.sampled_from(["index", "nope", "mixed"])).map(
            lambda t: f"cel.bind(v, {D}.{t[1]}, v == 1 || {t[0]})"
        ),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(_selector(), st.lists(devices(), min_size=1, max_size=4))
def test_generated_expressions_agree(expression: str, sample: list[DeviceView]) -> None:
    try:
        selector = compile_selector(expression)
    except CelCompileError:
        # Statically ill-typed (e.g. `device.driver == 1`): cel-go refuses these too, while
        # cel-python has no type checker to compare with.
        return
    program = _reference_program(expression)
    for device in sample:
        assert _ours_selector(selector, device) == program(device), (expression, device)


def test_reference_environment_is_shared() -> None:
    # The generated test relies on the same oracles as the fixed-expression test.
    assert _ENV is not None
    assert "_==_" in ORACLES
