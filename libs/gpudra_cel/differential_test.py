"""Differential test: gpudra_cel's closures against cel-python's own interpreter.

Many selector expressions are evaluated over hypothesis-generated GPU devices by both engines;
the outcome (true, false, or an error) must be identical. cel-python lacks Kubernetes' libraries
and deviates from cel-go in a few places, so the reference gets hand-written oracles for exactly
those (documented differences, each written from the CEL spec / Kubernetes docs):

- `quantity`, `semver`, `isQuantity`, `isSemver` and their methods, and DRA's `includes`:
  oracles over gpudra_api's Quantity/Semver (cel-python has no such types);
- `==`, `!=` and `in`: CEL's heterogeneous equality (`1 == 1.0` is true, `1 == "a"` is false)
  as cel-go implements it; cel-python raises "no matching overload" instead;
- `device.attributes[<unknown domain>]` yields an empty map, as Kubernetes' DRA environment does;
- `cel.bind(v, init, body)`: cel-python has no `cel.bind`, so the reference evaluates `body`
  with `v` replaced by `(init)`, which is equivalent for side-effect-free CEL.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from typing import Any, cast

import celpy
import pytest
from celpy import celtypes
from celpy.evaluation import CELEvalError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver
from gpudra_cel import CelEvaluationError, CompiledSelector, DeviceView, compile_selector
from gpudra_cel.celtime import Duration, Timestamp
from gpudra_cel.values import CelUint, equal

D = 'device.attributes["gpu.nvidia.com"]'
C = 'device.capacity["gpu.nvidia.com"]'

EXPRESSIONS = [
    'device.driver == "gpu.nvidia.com"',
    f'device.driver == "gpu.nvidia.com" && {D}.type == "gpu"',
    f'{D}.type == "mig" || {D}.index > 3',
    f"{D}.index >= 2 && {D}.index < 6",
    f'{D}.productName.startsWith("NVIDIA H")',
    f'{D}.productName.endsWith("HBM3")',
    f'{D}.productName.contains("80GB")',
    f'{D}.productName.matches("^NVIDIA (A|H)100")',
    f'{D}.architecture in ["Hopper", "Ampere"]',
    f"{D}.index in [0, 1, 2]",
    f"{D}.mixed == 1",
    f'{D}.mixed == "1"',
    f"{D}.flag != true",
    f"{D}.flag == 1",
    f'{D}.flag in [dyn(1), dyn("x"), dyn(false)]',  # Kubernetes wants literals homogeneous
    f'{D}.mixed in [dyn(1), dyn("x"), dyn(false)]',
    f"{D}.mixed > 0",
    f"{D}.mixed + 1 == 2",
    f'!({D}.type == "gpu")',
    f'{D}.type == "gpu" ? {D}.index % 2 == 0 : false',
    f"has({D}.nvlinkDomain)",
    f'has({D}.nvlinkDomain) && {D}.nvlinkDomain == "nvswitch-0"',
    f'{D}.nvlinkDomain == "nvswitch-0" || {D}.type == "gpu"',
    f'{D}.type == "gpu" || {D}.nvlinkDomain == "nvswitch-0"',
    f'{D}.nvlinkDomain == "nvswitch-0" && {D}.type == "mig"',
    f'{D}.type == "mig" && {D}.nvlinkDomain == "nvswitch-0"',
    f'{D}.tags.exists(t, t == "nvlink")',
    f"{D}.tags.all(t, t.size() > 2)",
    f'{D}.tags.exists_one(t, t.startsWith("n"))',
    f'{D}.tags.filter(t, t != "pcie").size() >= 1',
    f'{D}.tags.map(t, t + "!").exists(t, t == "nvlink!")',
    f"size({D}.tags) == 2",
    f'{D}.tags.includes("nvlink")',
    f'{D}.type.includes("gpu")',
    f"{D}.index * 2 - 1 == 5",
    f"{D}.index / 2 == 1",
    f"{D}.index / ({D}.index - 3) >= 0",
    f'string({D}.index) == "3"',
    f"int({D}.numaNode) + {D}.index == 3",
    f"{D}.numaNode == 1 && {D}.index < 4",
    f"{D}.uuid.size() > 4",
    'device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:10"',
    'device.attributes["unknown.example.com"].foo == 1',
    'device.attributes["unknown.example.com"].foo == 1 || true',
    'size(device.attributes["unknown.example.com"]) == 0',
    "device.allowMultipleAllocations",
    '!device.allowMultipleAllocations && device.driver.startsWith("gpu")',
    f'{C}.memory.isGreaterThan(quantity("40Gi"))',
    f'{C}.memory.compareTo(quantity("80Gi")) >= 0',
    f'{C}.memory.isLessThan(quantity("20G"))',
    f'{C}.memory.add(quantity("1Gi")).isGreaterThan(quantity("81Gi"))',
    f"{C}.memory.sub(1).isLessThan({C}.memory)",
    f"{C}.memory.asInteger() > 1000",
    f"{C}.memory.isInteger()",
    f"{C}.memory.sign() == 1",
    f'{C}.multiprocessors.compareTo(quantity("14")) == 0',
    f'{D}.cudaComputeCapability.isGreaterThan(semver("8.0.0"))',
    f'{D}.cudaComputeCapability.compareTo(semver("9.0.0")) == 0',
    f'{D}.driverVersion.isLessThan(semver("550.0.0")) || {D}.driverVersion.major() >= 560',
    f"{D}.cudaComputeCapability.minor() == 0 && {D}.cudaComputeCapability.patch() == 0",
    f"isSemver({D}.productName)",
    f"isQuantity({D}.type)",
    f'cel.bind(g, {D}, g.type == "gpu" && g.index < 4)',
    f'cel.bind(m, {C}.memory, m.isGreaterThan(quantity("10Gi")) && m.isLessThan(quantity("1Ti")))',
    f"[{D}.index, {D}.numaNode].all(i, i >= 0)",
    f'{{"a": {D}.index}}["a"] == 3',
    f"{D}.index == 3.0",
    f"{D}.index == 3u",
]


class _DefaultMap(celtypes.MapType):
    """The DRA environment's attributes/capacity map: an unknown domain is an empty map."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType()

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key]


def _to_celpy(value: object) -> Any:
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, CelUint):
        return celtypes.UintType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, tuple):
        return celtypes.ListType([_to_celpy(v) for v in value])
    return value  # Quantity / Semver travel as opaque objects the oracles understand


def _from_celpy(value: object) -> object:
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.UintType):
        return CelUint(value)
    if isinstance(value, celtypes.IntType):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    if isinstance(value, celtypes.BytesType):
        return bytes(value)
    if isinstance(value, list):  # celtypes.ListType, or a plain list from list `+`
        return tuple(_from_celpy(v) for v in value)
    if isinstance(value, celtypes.MapType):
        return {_from_celpy(k): _from_celpy(v) for k, v in value.items()}
    if isinstance(value, celtypes.TimestampType):  # microseconds, as cel-python keeps them
        since = cast(datetime.datetime, value) - _EPOCH
        seconds = since.days * 86400 + since.seconds
        return Timestamp(seconds, since.microseconds * 1000)
    if isinstance(value, celtypes.DurationType):
        return Duration(
            (value.days * 86400 + value.seconds) * 1_000_000_000 + value.microseconds * 1000
        )
    return value


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _activation(device: DeviceView) -> dict[str, Any]:
    def domains(table: Any) -> Any:
        return _DefaultMap(
            {
                celtypes.StringType(domain): celtypes.MapType(
                    {celtypes.StringType(k): _to_celpy(v) for k, v in values.items()}
                )
                for domain, values in table.items()
            }
        )

    return {
        "device": celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(device.driver),
                celtypes.StringType("attributes"): domains(device.attributes),
                celtypes.StringType("capacity"): domains(device.capacity),
                celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                    device.allow_multiple_allocations
                ),
            }
        )
    }


def _oracle(fn: Callable[..., object]) -> Callable[..., object]:
    """Wrap an oracle: arguments arrive as celpy values, errors leave as ValueError."""

    def call(*args: object) -> object:
        for arg in args:
            if isinstance(arg, CELEvalError):
                return arg  # errors propagate through plain functions, as in CEL
        return _to_celpy(fn(*[_from_celpy(a) for a in args]))

    return call


def _quantity(text: str) -> Quantity:
    return Quantity.parse(text)  # QuantityParseError is a ValueError, which celpy reports


def _is(parse: Callable[[str], object]) -> Callable[[str], bool]:
    def check(text: str) -> bool:
        try:
            parse(text)
        except ValueError:
            return False
        return True

    return check


def _cmp(a: Quantity | Semver, b: Quantity | Semver) -> int:
    if type(a) is not type(b):
        raise ValueError("no matching overload")
    return a.compare(b)  # type: ignore[arg-type]


def _as_q(x: object) -> Quantity:
    if isinstance(x, Quantity):
        return x
    if isinstance(x, int) and not isinstance(x, bool):
        return Quantity.of(x)
    raise ValueError("no matching overload")


def _as_integer(q: Quantity) -> int:
    value = q.as_int()
    if value is None:
        raise ValueError("cannot convert value to integer")
    return value


def _in(item: object, container: object) -> bool:
    if isinstance(container, dict):
        return any(equal(k, item) for k in container)
    if isinstance(container, tuple):
        return any(equal(x, item) for x in container)
    raise ValueError("no matching overload for in")


def _includes(target: object, item: object) -> bool:
    if isinstance(target, tuple):
        return any(equal(x, item) for x in target)
    return equal(target, item)


ORACLES: dict[str, Any] = {
    "quantity": _oracle(_quantity),
    "semver": _oracle(Semver.parse),
    "isQuantity": _oracle(_is(Quantity.parse)),
    "isSemver": _oracle(_is(Semver.parse)),
    "compareTo": _oracle(_cmp),
    "isGreaterThan": _oracle(lambda a, b: _cmp(a, b) > 0),
    "isLessThan": _oracle(lambda a, b: _cmp(a, b) < 0),
    "add": _oracle(lambda q, x: q + _as_q(x)),
    "sub": _oracle(lambda q, x: q - _as_q(x)),
    "asInteger": _oracle(_as_integer),
    "isInteger": _oracle(lambda q: q.as_int() is not None),
    "sign": _oracle(lambda q: q.sign),
    "major": _oracle(lambda v: v.major),
    "minor": _oracle(lambda v: v.minor),
    "patch": _oracle(lambda v: v.patch),
    "includes": _oracle(_includes),
    "_==_": _oracle(equal),
    "_!=_": _oracle(lambda a, b: not equal(a, b)),
    "_in_": _oracle(_in),
}

_BIND = re.compile(r"cel\.bind\((\w+), ([^,]+), (.*)\)$")


def _without_bind(expression: str) -> str:
    match = _BIND.fullmatch(expression)
    if match is None:
        return expression
    var, init, body = match.groups()
    return re.sub(rf"\b{var}\b", f"({init})", body)


_ENV = celpy.Environment()
_PROGRAMS = {
    e: _ENV.program(_ENV.compile(_without_bind(e)), functions=ORACLES) for e in EXPRESSIONS
}
_COMPILED = {e: compile_selector(e) for e in EXPRESSIONS}


def _reference_outcome(program: Any, device: DeviceView) -> object:
    try:
        result: object = program.evaluate(_activation(device))
    except CELEvalError:
        return "error"
    if isinstance(result, celtypes.BoolType):
        return bool(result)
    return "error"  # a non-bool result is an error for a selector


def _reference_program(expression: str) -> Callable[[DeviceView], object]:
    """cel-python's outcome for `expression` on a device: True, False or "error"."""
    program = _ENV.program(_ENV.compile(_without_bind(expression)), functions=ORACLES)
    return lambda device: _reference_outcome(program, device)


def _reference(expression: str, device: DeviceView) -> object:
    return _reference_outcome(_PROGRAMS[expression], device)


def _ours_selector(selector: CompiledSelector, device: DeviceView) -> object:
    try:
        return selector.matches(device)
    except CelEvaluationError:
        return "error"


def _ours(expression: str, device: DeviceView) -> object:
    return _ours_selector(_COMPILED[expression], device)


_SEMVERS = st.sampled_from(["8.0.0", "9.0.0", "12.4.0", "550.54.15", "560.1.0", "9.0.0-rc.1"])
_QUANTITIES = st.sampled_from(["80Gi", "40Gi", "10Gi", "0", "1500m", "20G", "1Ti", "14", "7"])
# cel-python's bool is an int subclass, so it orders and adds bools like ints where CEL has no
# such overload; bools therefore appear only in `flag`, which is used with `==`/`in` alone.
_MIXED = st.one_of(st.integers(-2, 2), st.sampled_from(["1", "x", ""]))
_FLAG = st.one_of(st.booleans(), st.integers(0, 1), st.sampled_from(["true"]))


@st.composite
def devices(draw: st.DrawFn) -> DeviceView:
    fields: dict[str, st.SearchStrategy[Any]] = {
        "type": st.sampled_from(["gpu", "mig"]),
        "index": st.integers(0, 7),
        "numaNode": st.integers(0, 1),
        "productName": st.sampled_from(
            ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA L4", "1.2.3"]
        ),
        "architecture": st.sampled_from(["Hopper", "Ampere", "Ada Lovelace"]),
        "uuid": st.sampled_from(["GPU-6f1e", "GPU-1", "MIG-abc"]),
        "nvlinkDomain": st.sampled_from(["nvswitch-0", "nvlink-1"]),
        "cudaComputeCapability": _SEMVERS.map(Semver.parse),
        "driverVersion": _SEMVERS.map(Semver.parse),
        "tags": st.lists(st.sampled_from(["nvlink", "pcie", "nv", "x"]), max_size=3).map(tuple),
        "mixed": _MIXED,
        "flag": _FLAG,
    }
    gpu: dict[str, Any] = {}
    for name, strategy in fields.items():
        if draw(st.integers(0, 9)) < 8:  # most devices have most attributes
            gpu[name] = draw(strategy)
    attributes: dict[str, dict[str, Any]] = {"gpu.nvidia.com": gpu}
    if draw(st.booleans()):
        attributes["resource.kubernetes.io"] = {
            "pcieRoot": draw(st.sampled_from(["pci0000:10", "pci0000:20"]))
        }
    capacity: dict[str, dict[str, Quantity]] = {"gpu.nvidia.com": {}}
    for name in ("memory", "multiprocessors"):
        if draw(st.integers(0, 9)) < 8:
            capacity["gpu.nvidia.com"][name] = Quantity.parse(draw(_QUANTITIES))
    return DeviceView(
        driver=draw(st.sampled_from(["gpu.nvidia.com", "other.example.com"])),
        attributes=attributes,
        capacity=capacity,
        allow_multiple_allocations=draw(st.booleans()),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(devices())
def test_closures_agree_with_cel_python(device: DeviceView) -> None:
    mismatches = {}
    for expression in EXPRESSIONS:
        ours, reference = _ours(expression, device), _reference(expression, device)
        if ours != reference:
            mismatches[expression] = (ours, reference)
    assert not mismatches, mismatches


# Device-independent expressions over CEL's core semantics, where cel-python follows the spec.
# Known cel-python deviations left out on purpose: `int("0x10")` (it accepts hex; cel-go does
# not), `string(true)` (it prints "True"), `[1, 2][-1]` (Python negative indexing), cross-type
# ordering `2 < 1.5` (it has no overload; Kubernetes enables cross-type numeric comparisons),
# and the three-argument `map` macro (unsupported); for timestamps and durations, `timestamp(int)`
# and `int(duration)` (it has neither), invalid literals (Kubernetes refuses them when
# compiling, see `lib_time_test`) and `type()` (its type values do not compare as cel-go's).
CORE_EXPRESSIONS = [
    "[3, 0].all(i, 10 / i > 0)",
    "[0, 3].exists(i, 10 / i == 3)",
    "[3, 0].exists_one(i, 10 / i == 3)",
    "[1, 2].all(i, i > 5)",
    "9223372036854775807 + 1 > 0",
    "-9223372036854775808 - 1 < 0",
    "5 % -3 == 2",
    "-5 / 2 == -2",
    "-5 % 3 == -2",
    "1u - 2u > 0u",
    "2u * 3u == 6u",
    '"abc" < "abd"',
    'b"abc" == b"abc"',
    "[1, 2] + [3] == [1, 2, 3]",
    '{"a": 1, "b": 2}.exists(k, k == "b")',
    '"a" in {"a": 1}',
    '"héllo".size() == 5 && size("héllo") == 5',
    "1.0 / 0.0 > 1000.0",
    "int(2.9) == 2 && int(-2.9) == -2",
    'double("1e3") == 1000.0',
    'bool("t") && !bool("false")',
    "[1, 2, 3].map(x, x * 2).filter(x, x > 2) == [4, 6]",
    'has({"a": 1}.a) && !has({"a": 1}.b)',
    '{"a": 1}.b == 1',
    "[1, 2][2] == 1",
    "(1 == 1) == true",
    "dyn(1) == 1.0",
    "1u < 2",
    "null == null",
    "[] == [] && {} == {}",
    '[dyn(1), dyn("a")] == [dyn(1), dyn("a")]',
    '"abc".startsWith("ab") && "abc".endsWith("bc") && "abc".contains("b")',
    '"abc".matches("^a.c$")',
    "true ? false : true",
    "false ? 1 / 0 == 1 : true",
    "(1 / 0 == 1) || true",
    "(1 / 0 == 1) && false",
    "!(1 / 0 == 1) || false",
    "[[1], [2, 3]].exists(l, l.all(x, x > 1))",
    '{"k": [1, 2]}["k"][1] == 2',
    "[1, 2, 3].filter(x, x % 2 == 1).size() == 2",
    'int("-12") == -12 && uint("12") == 12u',
    '"x" in ["a", "x"] && !(3 in [1, 2])',
    'timestamp("2024-01-01T00:00:00Z") < timestamp("2024-01-02T00:00:00Z")',
    'timestamp("2024-01-01T00:00:00Z") + duration("1h") == timestamp("2024-01-01T01:00:00Z")',
    'timestamp("2024-01-02T00:00:00Z") - timestamp("2024-01-01T00:00:00Z") == duration("24h")',
    'timestamp("2024-01-01T10:00:00+05:30") == timestamp("2024-01-01T04:30:00Z")',
    'duration("1h30m") == duration("90m") && duration("1.5h") == duration("5400s")',
    'duration("-1m") < duration("1ns")',
    'timestamp("2024-03-01T12:30:45.250Z").getHours() == 12'
    ' && timestamp("2024-03-01T12:30:45.250Z").getMinutes() == 30'
    ' && timestamp("2024-03-01T12:30:45.250Z").getSeconds() == 45'
    ' && timestamp("2024-03-01T12:30:45.250Z").getMilliseconds() == 250',
    'timestamp("2024-03-01T12:30:45Z").getDayOfWeek() == 5'
    ' && timestamp("2024-03-01T12:30:45Z").getDayOfYear() == 60',
    'timestamp("2024-03-01T12:30:45Z").getMonth() == 2'
    ' && timestamp("2024-03-01T12:30:45Z").getDate() == 1'
    ' && timestamp("2024-03-01T12:30:45Z").getDayOfMonth() == 0',
    'timestamp("2024-01-01T02:00:00Z").getFullYear("America/New_York") == 2023',
    'timestamp("2024-07-01T12:00:00Z").getHours("Europe/Berlin") == 14',
    'timestamp("2024-01-01T00:00:00Z").getHours("+05:30") == 5',
    'int(timestamp("1970-01-01T00:01:00Z")) == 60',
    'duration("3723s").getMinutes() == 62 && duration("3723s").getHours() == 1',
    'string(duration("1m")) == "60s"',
    'string(timestamp("2024-01-01T00:00:00Z")) == "2024-01-01T00:00:00Z"',
    'timestamp("9999-12-31T23:59:59Z") + duration("1s") > timestamp("1970-01-01T00:00:00Z")',
]

_CORE_DEVICE = DeviceView("gpu.nvidia.com", {}, {})


@pytest.mark.parametrize("expression", CORE_EXPRESSIONS)
def test_core_semantics_agree_with_cel_python(expression: str) -> None:
    program = _ENV.program(_ENV.compile(expression), functions=ORACLES)
    try:
        result = program.evaluate(_activation(_CORE_DEVICE))
        reference: object = bool(result) if isinstance(result, celtypes.BoolType) else "error"
    except CELEvalError:
        reference = "error"
    try:
        ours: object = compile_selector(expression).matches(_CORE_DEVICE)
    except CelEvaluationError:
        ours = "error"
    assert ours == reference


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_every_expression_is_exercised(expression: str) -> None:
    # Guards the differential test against expressions that are always errors or constant.
    outcomes = {_ours(expression, device) for device in _SAMPLE_DEVICES}
    assert len(outcomes) >= 1
    assert outcomes != {"error"} or "unknown.example.com" in expression, outcomes


_SAMPLE_DEVICES = [
    DeviceView(
        "gpu.nvidia.com",
        {
            "gpu.nvidia.com": {
                "type": "gpu",
                "index": 3,
                "numaNode": 0,
                "productName": "NVIDIA H100 80GB HBM3",
                "architecture": "Hopper",
                "uuid": "GPU-6f1e",
                "nvlinkDomain": "nvswitch-0",
                "cudaComputeCapability": Semver.parse("9.0.0"),
                "driverVersion": Semver.parse("550.54.15"),
                "tags": ("nvlink", "pcie"),
                "mixed": 1,
                "flag": True,
            },
            "resource.kubernetes.io": {"pcieRoot": "pci0000:10"},
        },
        {"gpu.nvidia.com": {"memory": Quantity.parse("80Gi"), "multiprocessors": Quantity.of(14)}},
        True,
    ),
    DeviceView(
        "other.example.com",
        {"gpu.nvidia.com": {"type": "mig", "index": 0, "tags": (), "mixed": "x", "flag": 0}},
        {"gpu.nvidia.com": {"memory": Quantity.parse("1500m")}},
        False,
    ),
]
