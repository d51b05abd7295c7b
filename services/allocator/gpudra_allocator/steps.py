"""What the parts of the allocator's loop share: the held claim (`Waiting`) and `Steps`.

`Worker` (the loop, `worker`) is put together from mixins, one job each (the unit steps are
`gang_steps`). Each mixin derives from `Steps`, which declares the state `Worker` keeps for all of
them and the steps one mixin calls on another, so that each is type-checked on its own. `Steps`
comes last in `Worker`'s method order, so its declarations never hide the mixin that provides a
step. `Steps` holds no state and runs nothing itself.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from nats.aio.msg import Msg

from gpudra_allocator.engine import Engine
from gpudra_allocator.gangs import GangBook
from gpudra_allocator.holdings import ClaimRecord
from gpudra_allocator.index import KvIndex
from gpudra_allocator.reservations import Reservations
from gpudra_allocator.settings import Settings
from gpudra_api import ResourceClaim, ResourceSlice
from gpudra_bus import Publisher
from gpudrapb.v1 import claims_pb2


@dataclass
class Waiting:
    """An unschedulable claim held (unacknowledged) for retry."""

    msg: Msg
    event: claims_pb2.ClaimEvent
    claim: ResourceClaim
    reason: str = ""
    seen_version: tuple[int, ...] = (-1, -1, -1)
    last_try: float = 0.0
    last_touch: float = field(default_factory=time.monotonic)
    # a unit member's claim, parsed once when the reserve's queue is counted (`_large_waiting`)
    parsed: ResourceClaim | None = None


class Steps:
    """The state and the steps the loop's mixins share; `Worker` provides all of them."""

    replica: str
    _settings: Settings
    _engine: Engine
    _index: KvIndex[ResourceSlice]
    _res: Reservations
    _gangs: GangBook
    _gang_reasons: dict[str, str]
    _decide_lock: asyncio.Lock
    _publisher: Publisher
    # The claims held for retry, by UID. Changed only by `_hold` and `_finish`, which bump
    # `_held_version`: the reserve's count of the queue is kept until the next change.
    _waiting: dict[str, Waiting]
    _held_version: int = 0
    # Events that changed nothing because a record or mark is newer (the fence, `worker`).
    stale: int

    # -- provided by `worker.Worker` ----------------------------------------------------------

    def _refresh_classes(self) -> None:
        raise NotImplementedError

    # -- provided by `retries.RetryQueue` -----------------------------------------------------

    def _versions(self) -> tuple[int, ...]:
        raise NotImplementedError

    def _hold(self, waiting: Waiting) -> None:
        raise NotImplementedError

    async def _finish(self, uid: str, msg: Msg) -> None:
        raise NotImplementedError

    # -- provided by `announcements.Announcer` ------------------------------------------------

    async def _unschedulable(self, waiting: Waiting, reason: str) -> None:
        raise NotImplementedError

    async def _announce(self, event: claims_pb2.ClaimEvent, record: ClaimRecord) -> None:
        raise NotImplementedError

    # -- provided by `claim_steps.ClaimSteps` -------------------------------------------------

    async def _settled(self, msg: Msg, event: claims_pb2.ClaimEvent) -> bool:
        raise NotImplementedError

    async def _attempt(self, waiting: Waiting) -> None:
        raise NotImplementedError

    # -- provided by `gang_steps.GangSteps` ---------------------------------------------------

    def _large_waiting(self, deciding: Waiting) -> int | None:
        raise NotImplementedError

    async def _attempt_gang(self, waiting: Waiting) -> None:
        raise NotImplementedError
