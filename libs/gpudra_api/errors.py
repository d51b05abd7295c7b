"""The API model's errors: one root, `ApiError`; `ValidationError` names the object and field.

Every error here is permanent: the same input fails the same way, so retrying is pointless.
"""

from __future__ import annotations


class ApiError(Exception):
    """Root of every error raised by `gpudra_api`."""


class ValidationError(ApiError):
    """An object does not follow the resource.k8s.io/v1 rules.

    `obj` names the object (`ResourceClaim default/claim-0`), `field` is the JSON path inside
    it (`spec.devices.requests[0].exactly.count`), `reason` says what is wrong.
    """

    def __init__(self, obj: str, field: str, reason: str) -> None:
        self.obj = obj
        self.field = field
        self.reason = reason
        where = f"{obj}: {field}" if field else obj
        super().__init__(f"{where}: {reason}")
