"""Heartbeats: which nodes are silent, measured on the NATS server's clock.

Promises of `Heartbeats` (one per replica; the service feeds it every inventory and asks it once a
turn):
- A node silent for `heartbeat_timeout` keeps its devices, tainted NoSchedule; its next inventory
  removes the taint. Silence is measured from the time JetStream stored the node's last message,
  against this process's estimate of the server's clock (`skew.ServerClock`: a clock skew between
  this pod's node and the NATS server larger than the timeout would otherwise taint every node or
  none), but not while this replica is cut off from NATS (disconnected, or its fetches failing): then no
  node-agent may have been able to publish either, so once the bus is back every node gets a whole
  `heartbeat_timeout` from then to be heard again before it is tainted.
- `seen_at(msg)` is when JetStream stored an inventory (the server's clock; one without a
  timestamp counts as received now), and teaches the estimate of the server's clock.
- `cut_off()` records a failed fetch; `expire(book)` taints (in the book) the nodes silent for the
  timeout and names them, unless the bus itself was silent: while disconnected it taints nothing,
  and the first turn connected again starts every node's timeout afresh.
- `quiet_since` is when (the server's clock) a node this replica has heard nothing from at all
  started to count as silent: when the replica caught up with the inventories (`caught_up()`) or
  NATS came back, whichever is later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.msg import Msg

from gpudra_inventory.pools import PoolBook
from gpudra_inventory.skew import ServerClock

log = logging.getLogger(__name__)


class Heartbeats:
    def __init__(self, nc: Client, timeout: float, clock: Callable[[], float]) -> None:
        self._nc = nc
        self._timeout = timeout
        self._clock = clock
        self._server_clock = ServerClock(window=timeout)
        # Cut off from NATS since the last turn; when the bus came back (the server's clock).
        self.blind = False
        self._resumed_at = float("-inf")
        # When this replica first caught up with the inventories (the server's clock).
        self._caught_up_at = float("inf")

    def now(self) -> float:
        """The server's time now, as this process estimates it."""
        return self._server_clock.server_time(self._clock())

    def seen_at(self, msg: Msg) -> float:
        received = self._clock()
        if msg.metadata and msg.metadata.timestamp:
            stamp = msg.metadata.timestamp.timestamp()
            self._server_clock.observe(stamp, received)
            return stamp
        return self._server_clock.server_time(received)

    def cut_off(self) -> None:
        """A fetch failed: whatever went unheard meanwhile proves nothing."""
        self.blind = True

    def caught_up(self) -> None:
        self._caught_up_at = self.now()

    @property
    def quiet_since(self) -> float:
        return max(self._caught_up_at, self._resumed_at)

    def expire(self, book: PoolBook) -> list[str]:
        """Taint the nodes silent for the heartbeat timeout, unless the bus was what was silent;
        the nodes tainted now (their pools must be written)."""
        now = self.now()
        if not self._nc.is_connected:
            self.blind = True  # a fetch times out while reconnecting: it proves nothing
            return []
        if self.blind:
            self.blind = False
            self._resumed_at = now
            log.info("NATS is back: nodes have %ss to be heard", self._timeout)
        tainted = []
        for change in book.expire(now, self._timeout, not_before=self._resumed_at):
            log.warning("node %s missed its heartbeats: devices tainted", change.node)
            tainted.append(change.node)
        return tainted
