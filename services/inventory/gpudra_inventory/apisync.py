"""Kubernetes mode: the leader's loop that brings the API's ResourceSlices up to the bucket.

`mirror.py` writes one pool to the API; `ApiSync` decides which pools, when, and what follows a
failure. The service asks it once a turn, after the bucket is written; only the leader does.

Promises of `ApiSync`:
- In Kubernetes mode the same slices as in the bucket are mirrored to the API (`written(node,
  deleted)` after each pool written to the bucket). A pool the API could not take (API server
  away, a conflict that kept coming back) is mirrored again on the next turns, with every slice
  its changes removed meanwhile, until the API has it; one the API refuses for good (403, 422) is
  tried again after a delay that doubles up to 5 minutes (or at its next change), and never holds
  back the other pools (`apiRefused` in `/statusz`).
- Every `api_resync` seconds the leader compares the API's slices with its pools and mirrors again
  what differs (edits by hand, a missed deletion), then prunes slices no pool owns; a takeover
  (`taken_over()`) prunes once every pool is written, and resets the resync's clock.
- Slice lifetime: every replica follows the cluster's Nodes (`ClusterNodes`: one list, then a
  watch). Each pool's slices in the API carry an ownerReference to their Node (`v1` Node, name,
  the Node's current UID, `controller: true`), so the garbage collector removes them with the
  Node; slices written without it (by an older inventory) are updated to carry it. A pool whose
  Node the API does not have is not written there, and its slices are removed (a GET first
  confirms a Node the watch does not know is gone): when a Node is deleted the leader removes its
  pool's slices itself (the GC may be slow, or absent), and resyncs do not bring them back while
  the node-agent still publishes. A Node created again (a new UID) gets its pool written again,
  owned by the new UID. Nothing is mirrored, pruned or compared until the Nodes have been listed
  once (before that no Node is known to be absent: `nodes_known()`), and a leader is not ready
  until then (`settled()`).
- With `repair` (`repair.py`), slices the kubelet deletes are mirrored again once their window
  has passed (`note_wipes()`), counted in `apiRepairs` with the pools a resync found different.
- A refused write for want of the lease (`NotLeaderError`) steps the leadership down and ends the
  turn's API work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpudra_bus import Backoff
from gpudra_inventory.errors import NotLeaderError
from gpudra_inventory.leadership import Leadership
from gpudra_inventory.mirror import SliceMirror
from gpudra_inventory.pools import Change, PoolBook
from gpudra_inventory.repair import WipeRepair
from gpudra_kube.errors import KubeError, KubePermanentError

log = logging.getLogger(__name__)

# A pool the API refuses (403, 422) is tried again after 1 s, doubling up to 5 minutes.
_REFUSED = Backoff(initial=1.0, maximum=300.0, jitter=0.0)


class ApiSync:
    def __init__(
        self,
        mirror: SliceMirror,
        leadership: Leadership,
        *,
        resync: float,
        clock: Callable[[], float],
        repair: WipeRepair | None = None,
    ) -> None:
        self._mirror = mirror
        self._leadership = leadership
        self._resync_every = resync
        self._clock = clock
        self._repair = repair
        # Pools written to the bucket but not yet to the API, each with the slices its changes
        # removed from the bucket (to be removed from the API as well).
        self._unmirrored: dict[str, set[str]] = {}
        # node -> (next try, refusals) of pools the API refused for good (403, 422): the others
        # go on
        self._refused: dict[str, tuple[float, int]] = {}
        self._prune_pending = False
        self._last_resync = float("-inf")  # when the leader last compared the API with its pools
        self.api_repairs = 0  # pools written to the API again because the API's copy differed

    @property
    def refused(self) -> int:
        """Pools the API refused for good, waiting for their next try."""
        return len(self._refused)

    def pending(self, node: str) -> bool:
        """Whether the node's pool is still to be mirrored."""
        return node in self._unmirrored

    def written(self, node: str, deleted: list[str]) -> None:
        """The node's pool was written to the bucket, `deleted` removed from it: mirror it."""
        self._unmirrored.setdefault(node, set()).update(deleted)
        self._refused.pop(node, None)  # a new pool: the API may take this one

    def forget(self, node: str) -> None:
        """The pool is gone from this replica: nothing of it is mirrored any more."""
        self._unmirrored.pop(node, None)
        self._refused.pop(node, None)

    def taken_over(self) -> None:
        self._prune_pending = True
        self._last_resync = self._clock()  # the takeover writes and prunes everything anyway

    def nodes_known(self) -> bool:
        """Whether the mirror may act on the API's Nodes: it follows none, or has listed them
        (before that, a Node not seen yet is not known to be absent)."""
        nodes = self._mirror.nodes
        return nodes is None or nodes.synced

    def settled(self) -> bool:
        """No pool waits for the API but those it refused, and the Nodes are known."""
        waiting = any(node not in self._refused for node in self._unmirrored)
        return not waiting and self.nodes_known()

    def note_wipes(self, book: PoolBook) -> None:
        """Follow our slices while leading; pools the kubelet wiped are mirrored again."""
        if self._repair is None:
            return
        leading = self._leadership.leading() and self.nodes_known()
        for node in self._repair.due(leading, book):
            self.api_repairs += 1
            self._unmirrored.setdefault(node, set())

    async def close(self) -> None:
        if self._repair is not None:
            await self._repair.close()

    def note_nodes(self, book: PoolBook) -> None:
        """Pools whose Node was added, deleted or re-created are mirrored again: written with
        the Node's new UID as owner, or removed from the API."""
        nodes = self._mirror.nodes
        if nodes is None:
            return
        for node in sorted(nodes.take_changed()):
            if node in book.pools:
                self._unmirrored.setdefault(node, set())
                self._refused.pop(node, None)

    async def flush(self, book: PoolBook) -> None:
        """Bring the API up to the bucket; failures stay for the next turn. A pool the API
        refuses for good (403, 422) waits, with a growing delay, and the others go on: in node
        order, one bad pool held back every node after it."""
        if not self._leadership.leading() or not self.nodes_known():
            return
        now = self._clock()
        for node in sorted(self._unmirrored):
            refused = self._refused.get(node)
            if refused is not None and now < refused[0]:
                continue
            state = book.pools[node]
            stale = sorted(self._unmirrored[node] - set(state.slices))
            try:
                await self._mirror.apply(
                    Change(node, state.generation, list(state.slices.values()), stale)
                )
            except NotLeaderError as exc:
                log.warning("mirroring stopped: %s", exc)
                self._leadership.step_down()
                return
            except KubePermanentError as exc:
                refusals = 0 if refused is None else refused[1]
                delay = _REFUSED.delay(refusals)
                self._refused[node] = (now + delay, refusals + 1)
                log.error(
                    "the API refused pool %s (%s); the other pools go on, this one again in %.0fs",
                    node,
                    exc,
                    delay,
                )
                continue
            except KubeError as exc:
                log.warning("pool %s not mirrored to the API (%s); retrying", node, exc)
                return
            del self._unmirrored[node]
            self._refused.pop(node, None)

    async def tidy(self, book: PoolBook) -> None:
        """Once every pool is written: prune after a takeover or a resync that found slices no
        pool owns, else compare with the API when a resync is due."""
        if self._prune_pending:
            await self._prune(book)
        elif self._resync_every > 0:
            now = self._clock()
            if now - self._last_resync >= self._resync_every:
                await self._resync(now, book)

    async def _prune(self, book: PoolBook) -> None:
        """Remove API slices no pool owns."""
        try:
            removed = await self._mirror.prune(book)
        except NotLeaderError as exc:
            log.warning("pruning stopped: %s", exc)
            self._leadership.step_down()
            return
        except KubeError as exc:
            log.warning("pruning the API's stale slices failed (%s); retrying", exc)
            return
        self._prune_pending = False
        log.info("removed %d stale slices from the API", removed)

    async def _resync(self, now: float, book: PoolBook) -> None:
        """Compare the API's slices with the pools; what differs is mirrored (and pruned) again
        on the next turns. Once per `api_resync`, also when the comparison fails (an API server
        in trouble is not listed every turn)."""
        self._last_resync = now
        try:
            drift = await self._mirror.drifted(book)
        except KubeError as exc:
            log.warning("comparing the API's slices with the pools failed (%s)", exc)
            return
        for node in drift.nodes:
            self._unmirrored.setdefault(node, set())
        self._prune_pending = drift.strangers > 0
        if drift.nodes or drift.strangers:
            self.api_repairs += len(drift.nodes)
            log.warning(
                "the API's slices differ from %d pool(s) (%s) and %d slice(s) no pool owns are "
                "there; mirroring again",
                len(drift.nodes),
                ", ".join(drift.nodes[:5]) + (" ..." if len(drift.nodes) > 5 else ""),
                drift.strangers,
            )
