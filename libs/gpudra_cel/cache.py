"""`SelectorCache`: selector results per (expression, device, pool generation).

A pool's entries are dropped as soon as a different generation of that pool is looked up, so a
result can never outlive the device data it was computed from. Run-time errors are cached too
(and raised again), since the same expression fails the same way on the same device. Safe to use
from several threads (the worst case is computing one result twice).
"""

from __future__ import annotations

from collections.abc import Hashable

from gpudra_cel.device import DeviceView
from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.selector import CompiledSelector

__all__ = ["SelectorCache"]

_Result = bool | CelEvaluationError


class SelectorCache:
    """Memoizes `CompiledSelector.matches` per pool generation."""

    def __init__(self, max_entries_per_pool: int = 1 << 20) -> None:
        self._max = max_entries_per_pool
        self._pools: dict[Hashable, tuple[int, dict[tuple[str, Hashable], _Result]]] = {}
        self.hits = 0
        self.misses = 0

    def matches(
        self,
        selector: CompiledSelector,
        device: DeviceView,
        *,
        pool: Hashable,
        generation: int,
        device_key: Hashable,
    ) -> bool:
        """`selector.matches(device)`, cached under (pool, generation, device_key)."""
        entry = self._pools.get(pool)
        if entry is None or entry[0] != generation:
            entry = (generation, {})
            self._pools[pool] = entry
        results = entry[1]
        key = (selector.expression, device_key)
        found = results.get(key)
        if found is None:
            self.misses += 1
            try:
                found = selector.matches(device)
            except CelEvaluationError as exc:
                found = exc
            if len(results) >= self._max:
                results.clear()
            results[key] = found
        else:
            self.hits += 1
        if isinstance(found, CelEvaluationError):
            raise found
        return found

    def invalidate(self, pool: Hashable) -> None:
        """Forget everything about `pool` (e.g. it was deleted)."""
        self._pools.pop(pool, None)

    def __len__(self) -> int:
        return sum(len(results) for _, results in self._pools.values())
