from __future__ import annotations

from typing import Any

import pytest

from gpudra_claim_writer.claims import (
    FINALIZER,
    SCHEDULING_GATE,
    TRACEPARENT_ANNOTATION,
    TRACESTATE_ANNOTATION,
    UNSCHEDULABLE_ANNOTATION,
    ClaimState,
    chained,
    class_names,
    gang_of,
    json_copy,
    pod_claim_names,
    ref_of,
    state_of,
    ungated,
    with_allocation,
    with_finalizer,
    with_reason,
    with_trace,
    without_finalizer,
)
from gpudra_claim_writer.events import gang_fields

ALLOC = {"devices": {"results": [{"request": "gpu", "driver": "d", "pool": "p", "device": "x"}]}}


def claim(**extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u-1", "generation": 2},
        "spec": {"devices": {"requests": []}},
    }
    for key, value in extra.items():
        if key == "meta":
            obj["metadata"].update(value)
        else:
            obj[key] = value
    return obj


@pytest.mark.parametrize(
    ("obj", "state"),
    [
        pytest.param(claim(), ClaimState.PENDING, id="pending"),
        pytest.param(claim(status={"allocation": ALLOC}), ClaimState.ALLOCATED, id="allocated"),
        pytest.param(
            claim(meta={"deletionTimestamp": "2026-01-01T00:00:00Z"}, status={"allocation": ALLOC}),
            ClaimState.DELETING,
            id="deleting-wins",
        ),
    ],
)
def test_state_of(obj: dict[str, Any], state: ClaimState) -> None:
    assert state_of(obj) == state


def test_ref_of() -> None:
    ref = ref_of(claim(meta={"resourceVersion": "7"}))
    assert (ref.namespace, ref.name, ref.uid, ref.generation, ref.resource_version) == (
        "ns",
        "c",
        "u-1",
        2,
        "7",
    )


def test_writes_return_none_when_nothing_changes() -> None:
    c = claim()
    fin = with_finalizer(c)
    assert fin is not None
    assert fin["metadata"]["finalizers"] == [FINALIZER]
    assert with_finalizer(fin) is None
    assert without_finalizer(c) is None
    stripped = without_finalizer(fin)
    assert stripped is not None
    assert "finalizers" not in stripped["metadata"]
    alloc = with_allocation(c, ALLOC)
    assert alloc is not None
    assert with_allocation(alloc, ALLOC) is None
    reasoned = with_reason(c, "no GPUs")
    assert reasoned is not None
    assert reasoned["metadata"]["annotations"][UNSCHEDULABLE_ANNOTATION] == "no GPUs"
    assert with_reason(reasoned, "no GPUs") is None
    assert with_reason(c, None) is None
    cleared = with_reason(reasoned, None)
    assert cleared is not None
    assert "annotations" not in cleared["metadata"]
    assert c == claim(), "inputs are never modified"


def pod(
    claims: list[dict[str, str]], statuses: list[dict[str, str]] | None = None, gates: bool = True
) -> dict[str, Any]:
    spec: dict[str, Any] = {"resourceClaims": claims, "containers": []}
    if gates:
        spec["schedulingGates"] = [{"name": SCHEDULING_GATE}, {"name": "other"}]
    return {"metadata": {"name": "p"}, "spec": spec, "status": {"resourceClaimStatuses": statuses}}


@pytest.mark.parametrize(
    ("p", "names"),
    [
        pytest.param(pod([{"name": "a", "resourceClaimName": "c1"}]), ["c1"], id="direct"),
        pytest.param(
            pod(
                [{"name": "a", "resourceClaimTemplateName": "t"}],
                [{"name": "a", "resourceClaimName": "p-a-xyz"}],
            ),
            ["p-a-xyz"],
            id="template-generated",
        ),
        pytest.param(
            pod([{"name": "a", "resourceClaimTemplateName": "t"}]), None, id="template-pending"
        ),
        # The API: "If this is unset, then generating a ResourceClaim was not necessary. The
        # pod.spec.resourceClaims entry can be ignored in this case" (kube-scheduler skips it).
        pytest.param(
            pod(
                [
                    {"name": "a", "resourceClaimTemplateName": "t"},
                    {"name": "b", "resourceClaimName": "c1"},
                ],
                [{"name": "a"}],
            ),
            ["c1"],
            id="template-claim-not-needed",
        ),
        pytest.param(
            pod([{"name": "a", "resourceClaimTemplateName": "t"}], [{"name": "other"}]),
            None,
            id="template-status-of-another-entry",
        ),
    ],
)
def test_pod_claim_names(p: dict[str, Any], names: list[str] | None) -> None:
    assert pod_claim_names(p) == names


@pytest.mark.parametrize(
    ("allocated", "gates", "lifted"),
    [
        pytest.param({"c1", "c2"}, True, True, id="all-allocated"),
        pytest.param({"c1"}, True, False, id="one-missing"),
        pytest.param({"c1", "c2"}, False, False, id="not-gated"),
    ],
)
def test_ungated(allocated: set[str], gates: bool, lifted: bool) -> None:
    p = pod(
        [{"name": "a", "resourceClaimName": "c1"}, {"name": "b", "resourceClaimName": "c2"}],
        gates=gates,
    )
    out = ungated(p, allocated.__contains__)
    assert (out is not None) == lifted
    if out is not None:
        assert out["spec"]["schedulingGates"] == [{"name": "other"}]


def test_ungated_without_claims_lifts_at_once() -> None:
    out = ungated(pod([]), lambda name: False)
    assert out is not None
    assert out["spec"]["schedulingGates"] == [{"name": "other"}]


PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(
    ("before", "carrier", "after"),
    [
        pytest.param({}, {"traceparent": PARENT}, {TRACEPARENT_ANNOTATION: PARENT}, id="parent"),
        pytest.param(
            {},
            {"traceparent": PARENT, "tracestate": "k=v"},
            {TRACEPARENT_ANNOTATION: PARENT, TRACESTATE_ANNOTATION: "k=v"},
            id="parent-and-state",
        ),
        pytest.param(
            {TRACEPARENT_ANNOTATION: "old", TRACESTATE_ANNOTATION: "old=1", "keep": "me"},
            {"traceparent": PARENT},
            {TRACEPARENT_ANNOTATION: PARENT, "keep": "me"},
            id="older-trace-replaced",
        ),
        pytest.param({TRACEPARENT_ANNOTATION: "old"}, {}, None, id="untraced-clears"),
    ],
)
def test_with_trace(
    before: dict[str, str], carrier: dict[str, str], after: dict[str, str] | None
) -> None:
    c = claim(meta={"annotations": before}) if before else claim()
    out = with_trace(c, carrier)
    assert out is not None
    assert out["metadata"].get("annotations") == after
    assert with_trace(out, carrier) is None


def test_chained_is_one_write() -> None:
    c = claim()
    out = chained(c, with_finalizer, lambda d: with_trace(d, {"traceparent": PARENT}))
    assert out is not None
    assert out["metadata"]["finalizers"] == [FINALIZER]
    assert out["metadata"]["annotations"] == {TRACEPARENT_ANNOTATION: PARENT}
    assert chained(out, with_finalizer) is None
    assert c == claim()


def test_class_names() -> None:
    c = claim()
    c["spec"]["devices"]["requests"] = [
        {"name": "a", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
        {
            "name": "b",
            "firstAvailable": [
                {"name": "x", "deviceClassName": "mig.nvidia.com"},
                {"name": "y", "deviceClassName": "nic.example.com"},
            ],
        },
        "garbage",
    ]
    assert class_names(c) == {"gpu.nvidia.com", "mig.nvidia.com", "nic.example.com"}


@pytest.mark.parametrize(
    ("annotations", "gang", "fields"),
    [
        pytest.param({}, ("", 0), ("", 0), id="no-gang"),
        pytest.param(
            {"gpudra.io/gang": "g", "gpudra.io/gang-size": "4"},
            ("g", 4),
            ("ns/g", 4),
            id="gang",
        ),
        pytest.param({"gpudra.io/gang": "g"}, ValueError, ("ns/g", 0), id="no-size"),
        pytest.param(
            {"gpudra.io/gang": "g", "gpudra.io/gang-size": "four"},
            ValueError,
            ("ns/g", 0),
            id="size-not-a-number",
        ),
        pytest.param(
            {"gpudra.io/gang": "g", "gpudra.io/gang-size": "0"},
            ValueError,
            ("ns/g", 0),
            id="size-zero",
        ),
        pytest.param({"gpudra.io/gang-size": "2"}, ValueError, ("ns/?", 0), id="size-no-name"),
    ],
)
def test_gang_of_and_event_fields(
    annotations: dict[str, str], gang: Any, fields: tuple[str, int]
) -> None:
    c = claim(meta={"annotations": annotations})
    if gang is ValueError:
        with pytest.raises(ValueError, match="gpudra.io/gang"):
            gang_of(c)
    else:
        assert gang_of(c) == gang
    assert gang_fields(c, "ns") == fields


class _Opaque:
    def __init__(self, items: list[int]) -> None:
        self.items = items


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(None, id="null"),
        pytest.param("s", id="scalar"),
        pytest.param([1, 2.5, True, None, "x"], id="list-of-scalars"),
        pytest.param({"a": {"b": [{"c": [1, {"d": "e"}]}]}, "f": []}, id="nested"),
        pytest.param({"shared": ALLOC, "again": ALLOC}, id="shared-sub-object"),
    ],
)
def test_json_copy_is_equal_and_shares_nothing_mutable(doc: Any) -> None:
    copied = json_copy(doc)
    assert copied == doc

    def containers(value: Any) -> list[int]:
        if isinstance(value, dict):
            return [id(value), *(i for v in value.values() for i in containers(v))]
        if isinstance(value, list):
            return [id(value), *(i for v in value for i in containers(v))]
        return []

    assert not set(containers(copied)) & set(containers(doc))


def test_json_copy_deep_copies_other_types() -> None:
    opaque = _Opaque([1])
    copied = json_copy({"o": opaque, "t": (1, [2])})
    assert copied["o"] is not opaque
    assert copied["o"].items == [1]
    assert copied["o"].items is not opaque.items
    assert copied["t"] == (1, [2])


def test_writes_never_change_their_input() -> None:
    original = claim(meta={"annotations": {"k": "v"}, "finalizers": [FINALIZER]})
    before = json_copy(original)
    written = with_allocation(original, ALLOC)
    assert written is not None
    assert written["status"]["allocation"] == ALLOC
    written["status"]["allocation"]["devices"]["results"].clear()
    assert ALLOC["devices"]["results"]
    assert with_reason(original, "full") is not None
    assert without_finalizer(original) is not None
    assert original == before
