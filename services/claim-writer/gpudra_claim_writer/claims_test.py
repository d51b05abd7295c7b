from __future__ import annotations

import json
from typing import Any

import pytest

from gpudra_claim_writer.claims import (
    FINALIZER,
    POD_FIELDS,
    SCHEDULING_GATE,
    TRACEPARENT_ANNOTATION,
    TRACESTATE_ANNOTATION,
    UNSCHEDULABLE_ANNOTATION,
    ClaimState,
    chained,
    class_names,
    gang_of,
    is_gated,
    json_copy,
    pod_claim_names,
    ref_of,
    slim_pod,
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


def watched_pod(**changes: Any) -> dict[str, Any]:
    """A pod as a watch delivers it: the fields gpudra reads amid many it does not; `changes`
    set `section.field` (None removes it) or replace a whole section."""
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer-0",
            "namespace": "ml",
            "uid": "pod-uid-1",
            "resourceVersion": "4711",
            "generation": 1,
            "creationTimestamp": "2026-11-30T01:02:03Z",
            "labels": {"app": "trainer", "pod-template-hash": "5d8f"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-29T00:00:00Z"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "trainer", "uid": "rs-1"}
            ],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}],
        },
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}, {"name": "other.io/gate"}],
            "resourceClaims": [
                {"name": "gpus", "resourceClaimName": "shared-gpus"},
                {"name": "scratch", "resourceClaimTemplateName": "scratch-template"},
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
                    "resources": {"claims": [{"name": "gpus"}]},
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "nodeName": "n1",
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False"}],
            "resourceClaimStatuses": [
                {"name": "scratch", "resourceClaimName": "trainer-0-scratch-x7k2"}
            ],
        },
    }
    for path, value in changes.items():
        section, _, field = path.partition("__")
        if not field:
            obj[section] = value
        elif value is None:
            obj[section].pop(field, None)
        else:
            obj[section][field] = value
    return obj


WATCHED_PODS = [
    pytest.param(watched_pod(), id="gated-template-generated"),
    pytest.param(watched_pod(status__resourceClaimStatuses=None), id="template-not-generated"),
    pytest.param(
        watched_pod(status__resourceClaimStatuses=[{"name": "scratch"}]), id="template-not-needed"
    ),
    pytest.param(watched_pod(spec__schedulingGates=None, status__phase="Running"), id="running"),
    pytest.param(watched_pod(status__phase="Succeeded"), id="finished"),
    pytest.param(watched_pod(status__phase="Failed"), id="failed"),
    pytest.param(
        watched_pod(metadata__deletionTimestamp="2026-11-30T02:00:00Z"), id="being-deleted"
    ),
    pytest.param(watched_pod(spec__resourceClaims=None), id="no-claims"),
    pytest.param(watched_pod(spec="gated"), id="spec-not-an-object"),
    pytest.param(watched_pod(status="Running"), id="status-not-an-object"),
    pytest.param(watched_pod(status={"resourceClaimStatuses": "x"}), id="statuses-not-a-list"),
]


def pod_readings(p: dict[str, Any]) -> list[Any]:
    """What every reader of a watched pod (the pod informers of `gates` and `consumers`, and
    `events.PodUnits` fed by the first) reads from `p`."""
    from gpudra_claim_writer.consumers import is_active, uses
    from gpudra_claim_writer.events import PodEntry
    from gpudra_kube.consumers import pod_reference
    from gpudra_kube.resources import key_of, resource_version_of

    return [
        key_of(p),
        resource_version_of(p),
        pod_claim_names(p),
        is_gated(p),
        ungated(p, lambda name: True) is not None,
        ungated(p, lambda name: name != "shared-gpus") is not None,
        is_active(p),
        uses(p, "shared-gpus"),
        uses(p, "trainer-0-scratch-x7k2"),
        PodEntry.of(p),
        pod_reference(p),
    ]


@pytest.mark.parametrize("p", WATCHED_PODS)
def test_a_slim_pod_reads_as_the_whole_pod(p: dict[str, Any]) -> None:
    """Fails when `slim_pod` drops a field the claim-writer reads from watched pods."""
    slim = slim_pod(p)
    assert pod_readings(slim) == pod_readings(p)
    assert "containers" not in json.dumps(slim)
    assert "managedFields" not in json.dumps(slim)


class Recording(dict[str, Any]):
    """A pod section that records which of its fields are read (`seen`, as `section.field`)."""

    def __init__(self, value: dict[str, Any], seen: set[str], path: str = "") -> None:
        super().__init__(value)
        self._seen, self._path = seen, path

    def _read(self, key: str, value: Any) -> Any:
        name = f"{self._path}.{key}" if self._path else key
        self._seen.add(name)
        if not self._path and isinstance(value, dict):
            return Recording(value, self._seen, key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        return self._read(key, super().get(key, default))

    def __getitem__(self, key: str) -> Any:
        return self._read(key, super().__getitem__(key))

    def __contains__(self, key: object) -> bool:
        self._read(str(key), None)
        return super().__contains__(key)


@pytest.mark.parametrize("p", WATCHED_PODS)
def test_every_pod_field_the_readers_read_is_kept(p: dict[str, Any]) -> None:
    """A reader added later that reads another field fails here until `POD_FIELDS` lists it."""
    seen: set[str] = set()
    pod_readings(Recording(p, seen))
    kept = {"apiVersion", "kind", *POD_FIELDS}
    kept |= {f"{section}.{field}" for section, fields in POD_FIELDS.items() for field in fields}
    assert seen <= kept
    assert "metadata.name" in seen, "the recording records"
