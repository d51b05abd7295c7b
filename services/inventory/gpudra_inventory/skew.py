"""This process's estimate of the NATS server's clock, from the messages it receives.

Silence of a node is measured on JetStream's timestamps (the time the server stored a node's last
message), so a replayed old inventory does not look fresh. Comparing those with this process's own
clock breaks when the two clocks disagree by more than the heartbeat timeout: a clock ahead of the
server's would taint every node of the fleet, one behind would never taint a dead node.

Promises:
- `observe(stamp, received)` takes one message's server timestamp and this process's time of
  receipt; `server_time(now)` is `now` minus the smallest `received - stamp` seen within the last
  `window` seconds (of receipts): the skew plus the quickest delivery. Every message's stamp is at
  or before the server time of its receipt, so no message looks fresher than it was, and old
  messages (a replay) never raise the estimate while a fresh one is in the window.
- Before any message, server time is this process's time (no correction).
- The newest sample is kept even when it is older than the window, so a quiet bus keeps the last
  estimate rather than dropping back to none.
"""

from __future__ import annotations

from collections import deque


class ServerClock:
    """The NATS server's time, from this process's time and the lag of recent messages."""

    def __init__(self, window: float) -> None:
        self._window = window
        # (received, delta) with deltas increasing from left to right: the left end is the minimum
        # of the window, later smaller deltas evict larger older ones.
        self._lags: deque[tuple[float, float]] = deque()

    def observe(self, stamp: float, received: float) -> None:
        delta = received - stamp
        while self._lags and self._lags[-1][1] >= delta:
            self._lags.pop()
        self._lags.append((received, delta))
        self._prune(received)

    def _prune(self, now: float) -> None:
        while len(self._lags) > 1 and now - self._lags[0][0] > self._window:
            self._lags.popleft()

    def offset(self, now: float) -> float:
        """How far this process's clock is ahead of the server's (0.0 before any message)."""
        self._prune(now)
        return self._lags[0][1] if self._lags else 0.0

    def server_time(self, now: float) -> float:
        return now - self.offset(now)
