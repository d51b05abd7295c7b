"""Consumable capacity: how much of a shareable device a request consumes, and whether it fits.

Rules as Kubernetes applies them: a capacity the request does not name consumes the policy's
default (or, without a policy, the whole capacity); a named amount is rounded up to the policy's
range step or next valid value; a request naming a capacity the device lacks never fits.
"""

from __future__ import annotations

import math
from fractions import Fraction

from gpudra_api import CapacityRequestPolicy, CapacityRequestPolicyRange, DeviceCapacity, Quantity
from gpudra_api.quantity import QuantityFormat


def _ceil_int(q: Quantity) -> int:
    return math.ceil(q.value)


def consumed_amount(requested: Quantity | None, capacity: DeviceCapacity) -> Quantity:
    policy = capacity.request_policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return capacity.value
    if policy is None:
        return requested
    if policy.valid_range is not None:
        return _round_up_range(requested, policy.valid_range)
    if policy.valid_values:
        for valid in policy.valid_values:
            if requested <= valid:
                return valid
    return requested


def _round_up_range(requested: Quantity, valid_range: CapacityRequestPolicyRange) -> Quantity:
    if requested < valid_range.min:
        return valid_range.min
    if valid_range.step is None:
        return requested
    step = _ceil_int(valid_range.step)
    low = _ceil_int(valid_range.min)
    added = _ceil_int(requested) - low
    n = added // step + (1 if added % step else 0)
    return Quantity.of(Fraction(low + step * n), QuantityFormat.BINARY_SI)


def violates_policy(amount: Quantity, policy: CapacityRequestPolicy | None) -> bool:
    if policy is None:
        return False
    if policy.default is not None and amount == policy.default:
        return False
    if policy.valid_range is not None:
        valid_range = policy.valid_range
        if valid_range.max is not None and amount > valid_range.max:
            return True
        if valid_range.step is not None:
            added = _ceil_int(amount) - _ceil_int(valid_range.min)
            return added % _ceil_int(valid_range.step) != 0
        return False
    if policy.valid_values:
        return amount not in policy.valid_values
    return False


def request_fits(
    in_use: dict[str, Quantity] | None,
    requests: dict[str, Quantity] | None,
    capacity: dict[str, DeviceCapacity],
    allocating: dict[str, Quantity] | None,
) -> bool | None:
    """True when the request fits next to what is in use and being allocated, False when not,
    None when it names a capacity the device does not have (Kubernetes' "error" case)."""
    if requests and any(name not in capacity for name in requests):
        return None
    for name, cap in capacity.items():
        amount = consumed_amount(requests.get(name) if requests else None, cap)
        if violates_policy(amount, cap.request_policy):
            return False
        total = amount
        if in_use and name in in_use:
            total = in_use[name] + total
        if allocating and name in allocating:
            total = total + allocating[name]
        if total > cap.value:
            return False
    return True


def consumed_capacity(
    requests: dict[str, Quantity] | None, capacity: dict[str, DeviceCapacity]
) -> dict[str, Quantity]:
    return {
        name: consumed_amount(requests.get(name) if requests else None, cap)
        for name, cap in capacity.items()
    }
