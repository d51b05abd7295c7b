"""Fixtures shared by gpudra_cel's tests.

`matches`: the one way the selector tables state an outcome — `True`/`False` for the value a
compiled selector gives on a device, a string for the message of the `CelEvaluationError` it
raises instead (a regular expression, searched for in the message)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpudra_cel import CelEvaluationError, CompiledSelector, DeviceView

Matches = Callable[[CompiledSelector, DeviceView, "bool | str"], None]


def _matches(selector: CompiledSelector, device: DeviceView, expected: bool | str) -> None:
    if isinstance(expected, bool):
        assert selector.matches(device) is expected
    else:
        with pytest.raises(CelEvaluationError, match=expected):
            selector.matches(device)


@pytest.fixture
def matches() -> Matches:
    """Assert that `selector` on `device` gives `expected` (a bool, or an error message)."""
    return _matches
