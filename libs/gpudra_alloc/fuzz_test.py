"""Fuzzing the contract: whatever a problem holds, the answer is an outcome, never a crash."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra_alloc import solve

OUTCOMES = {"allocated", "unschedulable", "error"}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)

names = st.sampled_from(["a", "b", "gpu-0", "gpu-1", "Bad_Name", ""])
quantities = st.sampled_from(["1", "2Gi", "80Gi", "500m", "-1", "1e3", "lots", 7])
expressions = st.sampled_from(
    [
        'device.driver == "d"',
        'device.attributes["d"].k == 1',
        'device.capacity["d"].m.compareTo(quantity("1Gi")) >= 0',
        "true",
        "noSuchVar",
        "1 +",
        'device.attributes["d"].missing',
    ]
)
attributes = st.dictionaries(
    st.sampled_from(["k", "d/k", "s", "bad name"]),
    st.one_of(
        st.builds(lambda v: {"int": v}, st.integers(-3, 3)),
        st.builds(lambda v: {"string": v}, st.sampled_from(["x", "y"])),
        st.builds(lambda v: {"version": v}, st.sampled_from(["1.0.0", "01.0"])),
        st.builds(lambda v: {"strings": v}, st.lists(st.sampled_from(["x", "y"]), max_size=2)),
        json_values,
    ),
    max_size=2,
)
devices = st.fixed_dictionaries(
    {"name": names},
    optional={
        "attributes": attributes,
        "capacity": st.dictionaries(
            st.sampled_from(["m", "c"]), st.builds(lambda q: {"value": q}, quantities), max_size=2
        ),
        "allowMultipleAllocations": st.booleans(),
        "taints": st.lists(
            st.fixed_dictionaries(
                {
                    "key": st.sampled_from(["k", ""]),
                    "effect": st.sampled_from(["NoSchedule", "None", "X"]),
                }
            ),
            max_size=1,
        ),
        "consumesCounters": st.lists(
            st.fixed_dictionaries(
                {
                    "counterSet": st.sampled_from(["cs", "other"]),
                    "counters": st.just({"m": {"value": "1"}}),
                }
            ),
            max_size=1,
        ),
    },
)
slices = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries({"name": names}),
        "spec": st.fixed_dictionaries(
            {
                "driver": st.sampled_from(["d", "e"]),
                "pool": st.fixed_dictionaries(
                    {
                        "name": st.sampled_from(["p", "q"]),
                        "generation": st.integers(0, 2),
                        "resourceSliceCount": st.integers(0, 2),
                    }
                ),
                "devices": st.lists(devices, max_size=3),
            },
            optional={
                "nodeName": st.sampled_from(["n1", "n2"]),
                "allNodes": st.booleans(),
                "perDeviceNodeSelection": st.booleans(),
            },
        ),
    }
)
requests = st.fixed_dictionaries(
    {"name": names},
    optional={
        "exactly": st.fixed_dictionaries(
            {"deviceClassName": st.sampled_from(["c", "missing"])},
            optional={
                "count": st.integers(-1, 40),
                "allocationMode": st.sampled_from(["ExactCount", "All", "Some"]),
                "adminAccess": st.booleans(),
                "selectors": st.lists(
                    st.builds(lambda e: {"cel": {"expression": e}}, expressions), max_size=2
                ),
                "capacity": st.builds(lambda q: {"requests": {"m": q}}, quantities),
            },
        ),
        "firstAvailable": st.lists(
            st.fixed_dictionaries(
                {"name": names, "deviceClassName": st.sampled_from(["c", "missing"])},
                optional={"count": st.integers(0, 3)},
            ),
            max_size=2,
        ),
    },
)
claims = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries({"name": names}),
        "spec": st.fixed_dictionaries(
            {"devices": st.fixed_dictionaries({"requests": st.lists(requests, max_size=2)})},
            optional={},
        ),
    }
)
problems = st.fixed_dictionaries(
    {
        "classes": st.just(
            [{"metadata": {"name": "c"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}]
        ),
        "slices": st.lists(slices, max_size=3),
        "claims": st.lists(claims, max_size=2),
    },
    optional={
        "node": st.sampled_from([{"name": "n1"}, {"name": "n2", "labels": {"a": "b"}}, "n1", 5]),
        "features": st.lists(
            st.sampled_from(
                [
                    "AdminAccess",
                    "PrioritizedList",
                    "ConsumableCapacity",
                    "PartitionableDevices",
                    "ListTypeAttributes",
                    "DeviceTaints",
                    "X",
                ]
            ),
            max_size=4,
        ),
        "allocatedDevices": st.lists(json_values, max_size=2),
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems)
def test_structured_problems_get_an_outcome(problem: dict[str, Any]) -> None:
    answer = solve(problem, "first-fit")
    assert answer["outcome"] in OUTCOMES
    if answer["outcome"] == "error":
        assert answer["error"]


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_arbitrary_json_gets_an_error(doc: Any) -> None:
    answer = solve(doc, "first-fit")
    assert answer["outcome"] == "error"
