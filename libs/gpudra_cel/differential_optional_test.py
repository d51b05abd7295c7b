"""Differential test of CEL optionals, where cel-python cannot be the oracle as it stands: its
grammar has no optional syntax (`a.?b`, `m[?k]`, `[?x]`, `{?k: v}`) and it has no optional
library.

The oracle is therefore cel-python evaluating the same selector *desugared by hand* into plain
CEL, by the definitions cel-go implements (and the cel-spec conformance file pins down):

- `m.?f.hasValue()` is `has(m.f)`, `m[?"f"].hasValue()` is `"f" in m`;
- `m.?f.orValue(d)` is `(has(m.f) ? m.f : d)` (`d` is evaluated only when `f` is absent),
  `m.?f.value()` is `m.f` (an error when absent);
- `m.?f.optMap(v, e).orValue(d)` is `(has(m.f) ? e[v := m.f] : d)`;
- `[?m.?f, ...]` has the element only when `has(m.f)`; `{?k: m.?f}` likewise.

Both sides run on the same hypothesis-generated devices (`differential_test.devices`, where
about one attribute in five is missing) and must give the same outcome: true, false or error.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra_cel import CelCompileError, DeviceView, compile_selector
from gpudra_cel.differential_test import (
    _SAMPLE_DEVICES,
    _ours_selector,
    _reference_program,
    devices,
)

D = 'device.attributes["gpu.nvidia.com"]'
C = 'device.capacity["gpu.nvidia.com"]'


def _or(name: str, default: str, table: str = D) -> tuple[str, str]:
    """`<table>.?name.orValue(default)` and its desugared form."""
    return (
        f"{table}.?{name}.orValue({default})",
        f"(has({table}.{name}) ? {table}.{name} : {default})",
    )


_TYPE, _TYPE_REF = _or("type", '"none"')
_INDEX, _INDEX_REF = _or("index", "-1")
_MEM, _MEM_REF = _or("memory", 'quantity("0")', C)
_TAGS, _TAGS_REF = _or("tags", "[]")
_MIXED, _MIXED_REF = _or("mixed", "0")
_CC, _CC_REF = _or("cudaComputeCapability", 'semver("0.0.0")')

PAIRS: list[tuple[str, str]] = [
    (f'{_TYPE} == "gpu"', f'{_TYPE_REF} == "gpu"'),
    (f"{_INDEX} >= 2", f"{_INDEX_REF} >= 2"),
    (f'{D}[?"nvlinkDomain"].hasValue()', f'"nvlinkDomain" in {D}'),
    (f"{D}.?nvlinkDomain.hasValue()", f"has({D}.nvlinkDomain)"),
    (f'{D}.?nvlinkDomain.value() == "nvswitch-0"', f'{D}.nvlinkDomain == "nvswitch-0"'),
    (
        f'{_MEM}.isGreaterThan(quantity("40Gi"))',
        f'{_MEM_REF}.isGreaterThan(quantity("40Gi"))',
    ),
    (f'{_TAGS}.exists(t, t == "nvlink")', f'{_TAGS_REF}.exists(t, t == "nvlink")'),
    (
        f"{D}.?index.optMap(i, i * 2).orValue(0) > 4",
        f"(has({D}.index) ? {D}.index * 2 : 0) > 4",
    ),
    (
        'device.attributes["unknown.example.com"].?foo.hasValue()',
        'has(device.attributes["unknown.example.com"].foo)',
    ),
    (
        f"[?{D}.?type, ?{D}.?architecture].size() == 2",
        f"has({D}.type) && has({D}.architecture)",
    ),
    (f'{{?"t": {D}.?type}}.size() == 1', f"has({D}.type)"),
    (f"{_MIXED} == 1", f"{_MIXED_REF} == 1"),
    (f'{_CC}.isGreaterThan(semver("8.0.0"))', f'{_CC_REF}.isGreaterThan(semver("8.0.0"))'),
    (
        f'cel.bind(p, {D}.?productName, p.hasValue() && p.value().startsWith("NVIDIA"))',
        f'has({D}.productName) && {D}.productName.startsWith("NVIDIA")',
    ),
    (
        f'{D}.?tags[0].orValue("") == "nvlink"',
        f'(has({D}.tags) && size({D}.tags) > 0 ? {D}.tags[0] : "") == "nvlink"',
    ),
    (  # orValue short-circuits: the failing default matters only when the value is absent
        f"{D}.?index.orValue({D}.numaNode / 0) >= 2",
        f"(has({D}.index) ? {D}.index : {D}.numaNode / 0) >= 2",
    ),
    (
        f'{D}.?type.orValue("") == "gpu" && {D}.index < 4',
        f'(has({D}.type) ? {D}.type : "") == "gpu" && {D}.index < 4',
    ),
]

_COMPILED = {ours: compile_selector(ours) for ours, _ in PAIRS}
_REFERENCE = {ours: _reference_program(ref) for ours, ref in PAIRS}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(devices())
def test_optionals_agree_with_their_desugared_form(device: DeviceView) -> None:
    mismatches = {}
    for ours, _ in PAIRS:
        mine, reference = _ours_selector(_COMPILED[ours], device), _REFERENCE[ours](device)
        if mine != reference:
            mismatches[ours] = (mine, reference)
    assert not mismatches, mismatches


@pytest.mark.parametrize(("ours", "reference"), PAIRS)
def test_pairs_are_exercised(ours: str, reference: str) -> None:
    # Guards against pairs that agree only because both always fail.
    outcomes = {_ours_selector(_COMPILED[ours], d) for d in _SAMPLE_DEVICES}
    assert outcomes != {"error"}, (ours, reference)


# Generated: random boolean combinations of optional leaves, each with its desugared twin.
_ATTRS = st.sampled_from(["type", "index", "mixed", "flag", "nvlinkDomain", "tags", "nope"])
_DEFAULTS = st.sampled_from(["0", "1", '"gpu"', '""', "true", "[]"])
_VALUES = st.sampled_from(["0", "1", "3", '"gpu"', '"x"', "true", "false"])


def _leaf() -> st.SearchStrategy[tuple[str, str]]:
    return st.one_of(
        st.tuples(_ATTRS, _DEFAULTS, _VALUES).map(
            lambda t: (
                f"{D}.?{t[0]}.orValue({t[1]}) == {t[2]}",
                f"(has({D}.{t[0]}) ? {D}.{t[0]} : {t[1]}) == {t[2]}",
            )
        ),
        _ATTRS.map(lambda a: (f"{D}.?{a}.hasValue()", f"has({D}.{a})")),
        _ATTRS.map(lambda a: (f'{D}[?"{a}"].hasValue()', f'"{a}" in {D}')),
        st.tuples(_ATTRS, _VALUES).map(
            lambda t: (f"{D}.?{t[0]}.value() == {t[1]}", f"{D}.{t[0]} == {t[1]}")
        ),
        st.tuples(st.sampled_from(["index", "numaNode", "mixed"]), st.integers(-1, 5)).map(
            lambda t: (
                f"{D}.?{t[0]}.optMap(v, v + 1).orValue(0) > {t[1]}",
                f"(has({D}.{t[0]}) ? {D}.{t[0]} + 1 : 0) > {t[1]}",
            )
        ),
    )


def _pairs() -> st.SearchStrategy[tuple[str, str]]:
    return st.recursive(
        _leaf(),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["&&", "||"]), inner).map(
                lambda t: (f"({t[0][0]} {t[1]} {t[2][0]})", f"({t[0][1]} {t[1]} {t[2][1]})")
            ),
            inner.map(lambda p: (f"!({p[0]})", f"!({p[1]})")),
        ),
        max_leaves=4,
    )


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(_pairs(), st.lists(devices(), min_size=1, max_size=4))
def test_generated_optionals_agree(pair: tuple[str, str], sample: list[DeviceView]) -> None:
    ours, reference = pair
    try:
        selector = compile_selector(ours)
    except CelCompileError:
        # Statically ill-typed, e.g. `....orValue(true) == 1` compares bool with int: cel-go
        # refuses it too; cel-python (no type checker) has nothing to compare with.
        return
    program = _reference_program(reference)
    for device in sample:
        assert _ours_selector(selector, device) == program(device), (ours, reference, device)
