"""The codecs of the claim-flow messages (`gpudra.v1` claims.proto), one shared instance each.

Owners of other messages define theirs beside their code the same way, e.g.
`NODE_INVENTORY = Codec(inventory_pb2.NodeInventory)`; the schema header then reads
`gpudra.v1.NodeInventory;v=1`.
"""

from __future__ import annotations

from gpudra_bus.codec import Codec
from gpudrapb.v1 import claims_pb2

CLAIM_EVENT: Codec[claims_pb2.ClaimEvent] = Codec(claims_pb2.ClaimEvent)
ALLOCATION_DECISION: Codec[claims_pb2.AllocationDecision] = Codec(claims_pb2.AllocationDecision)
RELEASED: Codec[claims_pb2.Released] = Codec(claims_pb2.Released)
