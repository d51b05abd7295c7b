"""EventRecorder against the HTTP-level fake API, which validates every Event written against the
real v1.34 `events.k8s.io/v1` schema (strict: unknown fields fail)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpudra_kube.api_backend import ApiStore
from gpudra_kube.recorder import NOTE_MAX_BYTES, WARNING, EventRecorder, cut_note, reference
from gpudra_kube.resources import EVENTS
from gpudra_testing.kubeapi import FakeKubeApi


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def claim_ref(name: str = "c1", uid: str = "uid-1") -> dict[str, str]:
    return reference(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "team-a", "uid": uid},
        }
    )


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}}


def recorder(store: ApiStore, clock: Clock, **options: Any) -> EventRecorder:
    return EventRecorder(
        store, controller="gpudra.io/claim-writer", instance="cw-0", clock=clock, **options
    )


def failed(rec: EventRecorder, note: str = "no fit", **kwargs: Any) -> None:
    rec.record(
        kwargs.pop("regarding", claim_ref()),
        type=WARNING,
        reason=kwargs.pop("reason", "FailedAllocation"),
        action="Allocate",
        note=note,
        **kwargs,
    )


def writes(kube_api: FakeKubeApi) -> int:
    return sum(1 for method, path in kube_api.requests if "/events" in path and method != "GET")


async def test_first_event_is_created_with_every_required_field(
    kube_api: FakeKubeApi, api_store: ApiStore
) -> None:
    rec = recorder(api_store, Clock())
    failed(rec, related=reference(POD))
    await rec.process_pending()
    [event] = kube_api.objects(EVENTS)
    assert event["metadata"]["namespace"] == "team-a"
    assert event["metadata"]["name"].startswith("c1.")
    assert event["regarding"] == claim_ref()
    assert event["related"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "team-a",
        "name": "p",
    }
    assert (event["type"], event["reason"], event["action"]) == (
        "Warning",
        "FailedAllocation",
        "Allocate",
    )
    assert event["reportingController"] == "gpudra.io/claim-writer"
    assert event["reportingInstance"] == "cw-0"
    assert event["eventTime"].endswith("Z")
    assert "." in event["eventTime"]
    assert "series" not in event
    assert rec.counts["created"] == 1


async def test_repeats_become_one_series_written_at_most_once_per_interval(
    kube_api: FakeKubeApi, api_store: ApiStore
) -> None:
    clock = Clock()
    rec = recorder(api_store, clock, series_interval=30.0)
    failed(rec, "try 1")
    await rec.process_pending()
    clock.now += 1
    failed(rec, "try 2")  # the second occurrence starts the series at once
    await rec.process_pending()
    [event] = kube_api.objects(EVENTS)
    assert event["series"]["count"] == 2
    before = writes(kube_api)
    for attempt in range(3, 101):
        clock.now += 0.1
        failed(rec, f"try {attempt}")
    await rec.process_pending()
    await rec.flush()
    assert writes(kube_api) == before, "a retry storm must not write on every retry"
    clock.now += 30
    await rec.flush()
    [event] = kube_api.objects(EVENTS)
    assert event["series"]["count"] == 100
    assert event["note"] == "try 100"
    assert writes(kube_api) == before + 1
    await rec.flush()
    assert writes(kube_api) == before + 1, "nothing new, nothing written"


@pytest.mark.parametrize(
    ("second", "advance", "events"),
    [
        pytest.param({}, 10.0, 1, id="same-story-is-one-event"),
        pytest.param({"reason": "Other"}, 10.0, 2, id="other-reason"),
        pytest.param({"regarding": claim_ref("c2", "uid-2")}, 10.0, 2, id="other-object"),
        pytest.param({"related": reference(POD)}, 10.0, 2, id="other-related-object"),
        pytest.param({}, 400.0, 2, id="after-the-window-a-new-event"),
    ],
)
async def test_which_events_are_isomorphic(
    kube_api: FakeKubeApi,
    api_store: ApiStore,
    second: dict[str, Any],
    advance: float,
    events: int,
) -> None:
    clock = Clock()
    rec = recorder(api_store, clock)
    failed(rec)
    await rec.process_pending()
    clock.now += advance
    await rec.flush()
    failed(rec, **second)
    await rec.process_pending()
    assert len(kube_api.objects(EVENTS)) == events


async def test_creates_beyond_the_burst_are_dropped_and_counted(
    kube_api: FakeKubeApi, api_store: ApiStore
) -> None:
    clock = Clock()
    rec = recorder(api_store, clock, burst=3, qps=1.0)
    for i in range(5):
        failed(rec, regarding=claim_ref(f"c{i}", f"uid-{i}"))
    await rec.process_pending()
    assert (rec.counts["created"], rec.counts["dropped"]) == (3, 2)
    clock.now += 2  # two tokens back
    for i in range(5, 8):
        failed(rec, regarding=claim_ref(f"c{i}", f"uid-{i}"))
    await rec.process_pending()
    assert len(kube_api.objects(EVENTS)) == 5


async def test_api_failure_is_counted_never_raised(
    kube_api: FakeKubeApi, api_store: ApiStore
) -> None:
    rec = recorder(api_store, Clock())
    kube_api.inject_error(500, method="POST", path_contains="/events")
    failed(rec)
    await rec.process_pending()
    assert rec.counts["failed"] == 1
    assert kube_api.objects(EVENTS) == []
    failed(rec)  # the next occurrence is a fresh try
    await rec.process_pending()
    assert len(kube_api.objects(EVENTS)) == 1


async def test_series_update_rereads_on_conflict_and_starts_anew_when_the_event_expired(
    kube_api: FakeKubeApi, api_store: ApiStore
) -> None:
    clock = Clock()
    rec = recorder(api_store, clock)
    failed(rec)
    await rec.process_pending()
    [event] = kube_api.objects(EVENTS)
    # Someone else touched the Event: our resourceVersion is stale.
    await kube_api.put(EVENTS, {**event, "note": "edited"})
    clock.now += 1
    failed(rec, "again")
    await rec.process_pending()
    [event] = kube_api.objects(EVENTS)
    assert (event["series"]["count"], event["note"]) == (2, "again")
    # The API server's event TTL removed it.
    await api_store.delete(EVENTS, event["metadata"]["name"], "team-a")
    clock.now += 31
    failed(rec, "third")
    await rec.process_pending()
    [event] = kube_api.objects(EVENTS)
    assert event["note"] == "third"
    assert "series" not in event
    clock.now += 1
    failed(rec, "fourth")
    await rec.process_pending()
    [event] = kube_api.objects(EVENTS)
    assert (event["series"]["count"], event["note"]) == (2, "fourth")


async def test_full_queue_drops_instead_of_blocking(
    kube_api: FakeKubeApi, api_store: ApiStore
) -> None:
    rec = recorder(api_store, Clock(), queue_size=2)
    for _ in range(5):
        failed(rec)
    assert rec.counts["dropped"] == 3


@pytest.mark.parametrize(
    ("note", "expected_bytes"),
    [
        pytest.param("short", 5, id="short"),
        pytest.param("x" * 5000, NOTE_MAX_BYTES, id="ascii-cut"),
        pytest.param("é" * 1000, NOTE_MAX_BYTES - 1, id="never-inside-a-character"),
    ],
)
def test_cut_note(note: str, expected_bytes: int) -> None:
    assert len(cut_note(note).encode()) == expected_bytes


async def test_long_note_is_accepted_by_the_schema(
    kube_api: FakeKubeApi, api_store: ApiStore
) -> None:
    rec = recorder(api_store, Clock())
    failed(rec, "é" * 4000, regarding=claim_ref("c" * 235 + "-" + "d" * 17, "uid-long"))
    await rec.process_pending()
    [event] = kube_api.objects(EVENTS)
    assert len(event["note"].encode()) <= NOTE_MAX_BYTES
    assert len(event["metadata"]["name"]) <= 253
    # A DNS-1123 subdomain: dot-separated labels that start and end alphanumeric.
    assert re.fullmatch(
        r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
        event["metadata"]["name"],
    )


def updates(kube_api: FakeKubeApi) -> int:
    return sum(1 for method, path in kube_api.requests if "/events/" in path and method == "PUT")


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        pytest.param(403, "Forbidden", id="rbac-refuses-update"),
        pytest.param(422, "Invalid", id="update-invalid"),
        pytest.param(503, "ServiceUnavailable", id="api-away"),
    ],
)
async def test_a_refused_series_update_backs_off_and_is_written_later(
    kube_api: FakeKubeApi, api_store: ApiStore, status: int, reason: str
) -> None:
    """A series update the API refuses (RBAC that grants create but not update, a namespace
    being terminated, an overloaded server) is tried again after a growing pause, not at every
    occurrence (a claim retried every 100 ms) nor at every flush for ever; once the API takes
    it again, the series is written with every occurrence counted."""
    clock = Clock()
    rec = recorder(api_store, clock, series_interval=30.0, window=360.0)
    failed(rec, "try 1")
    await rec.process_pending()
    kube_api.inject_error(
        status, reason=reason, method="PUT", path_contains="/events/", times=10**6
    )
    for attempt in range(2, 102):  # 10 s of a claim retried every 100 ms
        clock.now += 0.1
        failed(rec, f"try {attempt}")
        await rec.process_pending()
    assert updates(kube_api) == 1, "one refusal, then a pause: not an update per occurrence"
    assert rec.counts["failed"] == 1
    # An hour of flushes every 30 s, occurrences going on: the pauses grow to the window.
    for minute in range(120):
        clock.now += 30
        failed(rec, f"later {minute}")
        await rec.process_pending()
        await rec.flush()
    refused = updates(kube_api)
    assert 1 < refused <= 1 + 5 + 3600 // 360, f"{refused} refused updates in an hour"
    # The API takes updates again: the next try (at most a window later) writes the whole series.
    kube_api.clear_faults()
    clock.now += 360
    failed(rec, "back")
    await rec.process_pending()
    await rec.flush()
    [event] = kube_api.objects(EVENTS)
    assert event["series"]["count"] == 1 + 100 + 120 + 1
    assert event["note"] == "back"
    # Back to the normal pace: the next occurrence waits only the series interval.
    clock.now += 30
    failed(rec, "after")
    await rec.process_pending()
    [event] = kube_api.objects(EVENTS)
    assert event["note"] == "after"
