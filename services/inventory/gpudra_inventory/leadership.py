"""Leadership: whether this replica may write now, from its lease and the term it took over in.

Promises of `Leadership`:
- Only the leader (the holder of the `lease`; without one, this process alone) writes: slices,
  API mirror, drift summaries, dead letters. `leading()` is True while the lease is held and the
  replica has taken over in the lease's current epoch (`took_over(epoch)`, which the service calls
  once it has re-read the bucket); a new epoch (the lease lost and won again) needs a new
  takeover. Without a lease the epoch is always 1, taken by `standalone()` once the bucket is read.
- Writes are fenced twice: each one first checks that the lease is still held (`leading()` is the
  writer's and the mirror's `may_write`), and each bucket write is revision-checked, so a write
  by another process since this one read the bucket stops it (`NotLeaderError`). The caller then
  calls `step_down()`: nothing is written until it has re-read the bucket under a valid lease.
- `lost()` notices, once a turn, a lease this replica no longer holds (logged once, when it was
  leading: a standby from then on).
- `start()` runs the lease (`Lease.run`) in a task that renews it until `stop()`, which the
  service calls after its last write; `release()` then gives it up at once. `alive` (liveness) is
  False once that task has died, since such a replica could never lead again. `role` says leader
  or standby.
"""

from __future__ import annotations

import asyncio
import logging

from gpudra_inventory.lease import Lease

log = logging.getLogger(__name__)


class Leadership:
    def __init__(self, lease: Lease | None) -> None:
        self._lease = lease
        # The lease epoch this replica has taken over in (0: none; without a lease, 1 once loaded).
        self._term = 0
        self.takeovers = 0  # times this replica has taken the lead
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()  # the lease is renewed until the last write is done

    @property
    def holder(self) -> str | None:
        """This replica's name in the lease (None without one)."""
        return self._lease.holder if self._lease is not None else None

    def epoch(self) -> int:
        return self._lease.epoch if self._lease is not None else 1

    def holds(self) -> bool:
        """Whether this replica holds the lease (always, without one)."""
        return self._lease is None or self._lease.held()

    def leading(self) -> bool:
        """Whether this replica may write now (holds the lease and has taken over in its term)."""
        return self.holds() and self._term != 0 and self._term == self.epoch()

    @property
    def role(self) -> str:
        return "leader" if self.leading() else "standby"

    def due(self) -> bool:
        """Whether a takeover is due before writing: not taken over in the current epoch."""
        return self._term != self.epoch()

    def standalone(self) -> None:
        """Without a lease, this process leads from the start (in epoch 1)."""
        if self._lease is None:
            self._term = 1

    def took_over(self, epoch: int) -> None:
        self._term = epoch
        self.takeovers += 1

    def step_down(self) -> None:
        """A write was refused (`NotLeaderError`): take over again before writing on."""
        self._term = 0

    def lost(self) -> bool:
        """Whether the lease is not held (a standby's turn ends here)."""
        if self._lease is not None and not self._lease.held():
            if self._term:
                log.warning("lease lost: standby from now on")
                self._term = 0
            return True
        return False

    @property
    def alive(self) -> bool:
        """False once the lease task has ended while the loop runs."""
        return self._task is None or not self._task.done()

    def start(self) -> None:
        if self._lease is not None:
            self._stop = asyncio.Event()
            self._task = asyncio.create_task(self._lease.run(self._stop), name="inventory-lease")

    async def stop(self) -> None:
        """Stop renewing the lease (it is still held until `release` or its TTL)."""
        task = self._task
        if task is None:
            return
        self._stop.set()
        if not task.done():
            await task
        elif not task.cancelled() and task.exception() is not None:
            log.error("the lease task had failed: %r", task.exception())
        self._task = None

    async def release(self) -> None:
        if self._lease is not None:
            await self._lease.release()
