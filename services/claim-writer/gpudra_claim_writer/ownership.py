"""Which ResourceClaims are gpudra's to allocate: those naming a DeviceClass gpudra serves.

A claim is gpudra's when one of its requests (`exactly`, or any `firstAvailable` entry) names a
class that is
- one of gpudra's built-in classes (`gpudra_alloc.builtin`), or
- a DeviceClass whose CEL selectors mention a driver gpudra serves as a string literal
  (`device.driver == "gpu.nvidia.com"`, `device.attributes["gpu.nvidia.com"]...`), or
- a DeviceClass without CEL selectors (it selects every device), or
- not defined (yet): the allocator waits for such a class, as Kubernetes does, so the claim counts
  as gpudra's until the class says otherwise. A class that cannot be read now counts the same way:
  keeping a gate a little longer is safe, lifting it early lets kube-scheduler race the allocator.

Classes are read from the claim store on every question (gate checks are rare; classes change).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from gpudra_alloc.builtin import builtin_class_documents
from gpudra_claim_writer.claims import class_names
from gpudra_kube.errors import KubeError, NotFoundError
from gpudra_kube.resources import DEVICE_CLASSES
from gpudra_kube.store import Store

log = logging.getLogger(__name__)

DRIVERS = ("gpu.nvidia.com",)


def builtin_class_names() -> frozenset[str]:
    return frozenset(
        str((doc.get("metadata") or {}).get("name") or "") for doc in builtin_class_documents()
    )


def serves(device_class: dict[str, Any], drivers: Iterable[str]) -> bool:
    """True when a selector of the DeviceClass names one of `drivers` as a string literal, or
    when it has no CEL selector at all (it then selects every device, gpudra's included)."""
    literals = [f'"{d}"' for d in drivers] + [f"'{d}'" for d in drivers]
    expressions = []
    for selector in (device_class.get("spec") or {}).get("selectors") or []:
        cel = selector.get("cel") if isinstance(selector, dict) else None
        expression = cel.get("expression") if isinstance(cel, dict) else None
        if isinstance(expression, str):
            expressions.append(expression)
    if not expressions:
        return True
    return any(lit in expression for expression in expressions for lit in literals)


class Ownership:
    def __init__(
        self,
        store: Store,
        drivers: Iterable[str] = DRIVERS,
        builtin: Iterable[str] | None = None,
    ) -> None:
        self._store = store
        self._drivers = tuple(drivers)
        self._builtin = frozenset(builtin) if builtin is not None else builtin_class_names()

    async def claim_is_ours(self, claim: dict[str, Any]) -> bool:
        for name in sorted(class_names(claim)):
            if await self.class_is_ours(name):
                return True
        return False

    async def class_is_ours(self, name: str) -> bool:
        if name in self._builtin:
            return True
        try:
            device_class = await self._store.get(DEVICE_CLASSES, name)
        except NotFoundError:
            return True
        except KubeError as exc:
            log.warning("reading DeviceClass %s failed (%s); counting it as gpudra's", name, exc)
            return True
        return serves(device_class, self._drivers)
