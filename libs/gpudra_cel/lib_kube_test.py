"""Kubernetes' semver library at the edges of its number range: blang/semver keeps each
component as a uint64 (a larger one does not parse), and `major()` / `minor()` / `patch()`
return it through Go's `types.Int(v.Major)`, a conversion that wraps past int64 rather than
failing."""

from __future__ import annotations

import pytest

from gpudra_cel import DeviceView, compile_selector
from gpudra_cel.conftest import Matches

_DEVICE = DeviceView("gpu.nvidia.com", {}, {})
I64 = 9223372036854775807
U64 = 18446744073709551615


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param(f'semver("{I64}.0.0").major() == {I64}', True, id="int64-max"),
        pytest.param(
            f'semver("{I64 + 1}.0.0").major() == -{I64} - 1', True, id="wraps-to-int64-min"
        ),
        pytest.param(f'semver("0.{U64}.0").minor() == -1', True, id="uint64-max-is-minus-one"),
        pytest.param(f'semver("0.0.{U64 - 1}").patch() == -2', True, id="patch-wraps"),
        pytest.param(
            f'semver("{U64}.0.0").isGreaterThan(semver("{I64 + 1}.0.0"))',
            True,
            id="compares-unsigned",
        ),
        pytest.param(f'isSemver("{U64}.0.0")', True, id="uint64-max-parses"),
        pytest.param(f'isSemver("{U64 + 1}.0.0")', False, id="past-uint64"),
        pytest.param(f'isSemver("1.0.0-{U64 + 1}")', False, id="prerelease-past-uint64"),
        pytest.param(f'isSemver("v{U64 + 1}", true)', False, id="normalized-past-uint64"),
        pytest.param(f'semver("0.0.{U64 + 1}").patch() == 0', "semver", id="parse-error"),
    ],
)
def test_semver_number_range(expression: str, expected: bool | str, matches: Matches) -> None:
    matches(compile_selector(expression), _DEVICE, expected)
