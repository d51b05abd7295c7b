"""How many waiting pods need a whole large NVLink domain: what the topology reserve is told.

`Chooser.waiting_large` bounds the whole-domain reserve by the pods a scheduler's queue holds for
one large domain each (`docs/PLACEMENT.md`, "Whole-domain reserve"). The churn replay
(`replay.large_pods_waiting`) and the allocator service (its set of unschedulable claims) count
them with the same rule, here: a pod counts when its claims ask for at least `LARGE_DOMAIN`
devices together (each request's `exactly` count, or its first `firstAvailable` alternative's),
and each pod of a gang counts on its own (a gang of 2 x 8 GPUs waits for two domains). A pod is a
list of `ResourceClaim`s; the caller groups claims into pods and leaves out the one being decided.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpudra_alloc.placement.choose import LARGE_DOMAIN
from gpudra_api import ResourceClaim


def pod_devices(pod: Sequence[ResourceClaim]) -> int:
    """Devices a pod's claims ask for: each request's count, a `firstAvailable` request's first
    alternative's (the one it prefers)."""
    total = 0
    for claim in pod:
        for request in claim.requests:
            if request.exactly is not None:
                total += request.exactly.count
            elif request.first_available:
                total += request.first_available[0].count
    return total


def needs_large_domain(devices: int) -> bool:
    """A pod asking for `devices` devices together needs a whole large NVLink domain."""
    return devices >= LARGE_DOMAIN


def large_pods(pods: Iterable[Sequence[ResourceClaim]]) -> int:
    """How many of `pods` each need a whole large NVLink domain (`needs_large_domain`)."""
    return sum(1 for pod in pods if needs_large_domain(pod_devices(pod)))
