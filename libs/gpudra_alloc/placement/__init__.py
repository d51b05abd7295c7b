"""gpudra_alloc.placement: the `topology` policy above Kubernetes' per-node search.

Chooses the node and the devices for a pod's claims by how much placeability it costs
(`value.py`: NVLink blocks, scarce GPU kinds, whole cliques, MIG packing), places gangs of pods
all or nothing across nodes, and explains pending claims. Every allocation comes from the
allocator's own search (`Allocator`), so it is one Kubernetes would accept. The rules and their
reasons are in `docs/PLACEMENT.md`.
"""

from __future__ import annotations

from gpudra_alloc.placement.accept import kubernetes_accepts
from gpudra_alloc.placement.choose import ALTERNATIVE_PENALTY, Choice, Chooser, Score
from gpudra_alloc.placement.errors import GangError
from gpudra_alloc.placement.gang import Gang, GangPlacement, group_nodes, parse_gang, place_gang
from gpudra_alloc.placement.policy import POLICIES, answer_gang, answer_pod, choose_node
from gpudra_alloc.placement.replay import PodRecord, Replay
from gpudra_alloc.placement.topology import FreeState, NodeView, result_devices
from gpudra_alloc.placement.value import block_value, node_value
from gpudra_alloc.placement.why import sentence, why_pending
from gpudra_alloc.validate import validate_allocation

__all__ = [
    "ALTERNATIVE_PENALTY",
    "POLICIES",
    "Choice",
    "Chooser",
    "FreeState",
    "Gang",
    "GangError",
    "GangPlacement",
    "NodeView",
    "PodRecord",
    "Replay",
    "Score",
    "answer_gang",
    "answer_pod",
    "block_value",
    "choose_node",
    "group_nodes",
    "kubernetes_accepts",
    "node_value",
    "parse_gang",
    "place_gang",
    "result_devices",
    "sentence",
    "validate_allocation",
    "why_pending",
]
