"""SelectorCache: results per (expression, device, pool generation)."""

from __future__ import annotations

import pytest

from gpudra_cel import CelEvaluationError, DeviceView, SelectorCache, compile_selector

IS_GPU = compile_selector('device.attributes["gpu.nvidia.com"].type == "gpu"')


def _device(kind: str | None) -> DeviceView:
    attrs = {"type": kind} if kind is not None else {}
    return DeviceView("gpu.nvidia.com", {"gpu.nvidia.com": attrs}, {})


def test_hit_within_a_generation() -> None:
    cache = SelectorCache()
    gpu = _device("gpu")
    assert cache.matches(IS_GPU, gpu, pool="node-0", generation=1, device_key="gpu-0")
    # Same key and generation: the cached answer, even if handed different data.
    assert cache.matches(IS_GPU, _device("mig"), pool="node-0", generation=1, device_key="gpu-0")
    assert (cache.hits, cache.misses) == (1, 1)


def test_new_generation_invalidates_the_pool_only() -> None:
    cache = SelectorCache()
    cache.matches(IS_GPU, _device("gpu"), pool="node-0", generation=1, device_key="gpu-0")
    cache.matches(IS_GPU, _device("gpu"), pool="node-1", generation=1, device_key="gpu-0")
    assert not cache.matches(
        IS_GPU, _device("mig"), pool="node-0", generation=2, device_key="gpu-0"
    )
    assert len(cache) == 2  # node-0 at generation 2, node-1 untouched
    assert cache.matches(IS_GPU, _device("mig"), pool="node-1", generation=1, device_key="gpu-0")


@pytest.mark.parametrize(
    ("expression", "key"),
    [
        pytest.param('device.attributes["gpu.nvidia.com"].type == "gpu"', "a", id="first"),
        pytest.param('device.driver == "gpu.nvidia.com"', "a", id="second-expression"),
    ],
)
def test_entries_are_per_expression(expression: str, key: str) -> None:
    cache = SelectorCache()
    device = _device("mig")
    expected = compile_selector(expression).matches(device)
    assert (
        cache.matches(compile_selector(expression), device, pool="p", generation=1, device_key=key)
        == expected
    )
    assert cache.matches(IS_GPU, device, pool="p", generation=1, device_key=key) is False


def test_errors_are_cached_and_raised_again() -> None:
    cache = SelectorCache()
    for _ in range(2):
        with pytest.raises(CelEvaluationError, match="no such key"):
            cache.matches(IS_GPU, _device(None), pool="p", generation=1, device_key="d")
    assert (cache.hits, cache.misses) == (1, 1)


def test_invalidate_and_bound() -> None:
    cache = SelectorCache(max_entries_per_pool=2)
    for i in range(5):
        cache.matches(IS_GPU, _device("gpu"), pool="p", generation=1, device_key=i)
    assert len(cache) <= 2
    cache.invalidate("p")
    assert len(cache) == 0
