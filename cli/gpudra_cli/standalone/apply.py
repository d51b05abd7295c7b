"""Applying claims and waiting for gpudra's answer.

`apply_claims` creates each claim (an existing one is left alone and reported as unchanged) and
notes when its create returned; `apply_plan` does the same for a manifest plan in Kubernetes'
order: the pods first, then the claims (each claim generated for a pod owned by it), then each
pod's `status.resourceClaimStatuses` naming them — so the claim-writer holds a pod's claims until
all exist and the allocator places them together; `wait_decided` then reads the claims until every one is allocated,
or no claim changed state for `settle` seconds while the rest are unschedulable (the allocator
retries those, so a gang can turn allocated a moment later), or the deadline passed. The time to
allocate is from the create to the first read that saw the allocation, measured by the CLI end to
end (claim store → claim-writer → allocator → claim-writer → claim store), with the poll interval
as its resolution.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpudra_cli.standalone.client import Client
from gpudra_cli.standalone.manifests import Plan
from gpudra_cli.standalone.results import allocation_results

POLL = 0.05


@dataclass
class Applied:
    created: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    created_at: dict[str, float] = field(default_factory=dict)  # key -> monotonic time


def key_of(claim: dict[str, Any]) -> str:
    return f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"


async def apply_claims(client: Client, claims: Sequence[dict[str, Any]]) -> Applied:
    applied = Applied()
    for claim in claims:
        _, created = await client.create_claim(claim)
        key = key_of(claim)
        (applied.created if created else applied.unchanged).append(key)
        applied.created_at[key] = time.monotonic()
    return applied


async def apply_plan(client: Client, plan: Plan) -> Applied:
    uids: dict[str, str] = {}
    for pod in plan.pods:
        stored, _ = await client.create_pod({k: v for k, v in pod.items() if k != "status"})
        uids[key_of(pod)] = str(stored["metadata"]["uid"])
    claims = []
    for claim in plan.claims:
        owner = plan.owners.get(key_of(claim))
        if owner in uids:
            claim = copy.deepcopy(claim)
            claim["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": owner.split("/", 1)[1],
                    "uid": uids[owner],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        claims.append(claim)
    applied = await apply_claims(client, claims)
    for pod in plan.pods:
        if pod.get("status"):
            meta = pod["metadata"]
            await client.set_pod_status(meta["name"], meta["namespace"], pod["status"])
    return applied


DECIDED = ("allocated", "unschedulable")


def undecided(claims: dict[str, dict[str, Any]], keys: Sequence[str]) -> list[str]:
    """The keys whose claim (in `claims`, as `wait_decided` returned them) has no decision."""
    return [k for k in keys if k not in claims or _state(claims[k]) not in DECIDED]


def _state(claim: dict[str, Any]) -> str:
    if allocation_results(claim):
        return "allocated"
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    return "unschedulable" if "gpudra.io/unschedulable" in annotations else "pending"


async def wait_decided(
    client: Client,
    keys: Sequence[str],
    applied: Applied,
    timeout: float = 60.0,
    settle: float = 3.0,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    """(claims by key, milliseconds from create to allocation by key); `progress` hears (claims
    decided, claims) whenever the first changes."""
    wanted = set(keys)
    allocated_ms: dict[str, float] = {}
    states: dict[str, str] = {}
    last_change = time.monotonic()
    deadline = last_change + timeout
    found: dict[str, dict[str, Any]] = {}
    shown = -1
    while True:
        now = time.monotonic()
        found = {key_of(c): c for c in await client.claims() if key_of(c) in wanted}
        for key, claim in found.items():
            state = _state(claim)
            if states.get(key) != state:
                states[key] = state
                last_change = now
            if state == "allocated" and key not in allocated_ms and key in applied.created_at:
                allocated_ms[key] = round((now - applied.created_at[key]) * 1000, 1)
        decided = [k for k in wanted if states.get(k) in DECIDED]
        if progress is not None and len(decided) != shown:
            shown = len(decided)
            progress(shown, len(wanted))
        all_allocated = all(states.get(k) == "allocated" for k in wanted)
        settled = len(decided) == len(wanted) and now - last_change >= settle
        if all_allocated or settled or now > deadline:
            return found, allocated_ms
        await asyncio.sleep(POLL)
