"""Table tests for resource.k8s.io name validators."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpudra_api.names import (
    c_identifier_errors,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    driver_name_errors,
    qualified_name_errors,
    split_qualified_name,
)


@pytest.mark.parametrize(
    ("check", "name", "valid"),
    [
        pytest.param(dns1123_label_errors, "gpu-0", True, id="label-ok"),
        pytest.param(dns1123_label_errors, "0", True, id="label-digit"),
        pytest.param(dns1123_label_errors, "a" * 63, True, id="label-63"),
        pytest.param(dns1123_label_errors, "a" * 64, False, id="label-64"),
        pytest.param(dns1123_label_errors, "Gpu", False, id="label-upper"),
        pytest.param(dns1123_label_errors, "-gpu", False, id="label-leading-dash"),
        pytest.param(dns1123_label_errors, "gpu-", False, id="label-trailing-dash"),
        pytest.param(dns1123_label_errors, "a.b", False, id="label-dot"),
        pytest.param(dns1123_label_errors, "", False, id="label-empty"),
        pytest.param(dns1123_subdomain_errors, "gpu.nvidia.com", True, id="subdomain-ok"),
        pytest.param(dns1123_subdomain_errors, "a..b", False, id="subdomain-empty-label"),
        pytest.param(dns1123_subdomain_errors, ".a", False, id="subdomain-leading-dot"),
        pytest.param(dns1123_subdomain_errors, "a" * 254, False, id="subdomain-too-long"),
        pytest.param(c_identifier_errors, "productName", True, id="cid-ok"),
        pytest.param(c_identifier_errors, "_x1", True, id="cid-underscore"),
        pytest.param(c_identifier_errors, "1x", False, id="cid-digit-first"),
        pytest.param(c_identifier_errors, "a-b", False, id="cid-dash"),
        pytest.param(driver_name_errors, "gpu.nvidia.com", True, id="driver-ok"),
        pytest.param(driver_name_errors, "a" * 64, False, id="driver-too-long"),
        pytest.param(driver_name_errors, "", False, id="driver-empty"),
        pytest.param(qualified_name_errors, "memory", True, id="qn-short"),
        pytest.param(
            qualified_name_errors, "resource.kubernetes.io/pcieRoot", True, id="qn-domain"
        ),
        pytest.param(qualified_name_errors, "a" * 32, True, id="qn-id-32"),
        pytest.param(qualified_name_errors, "a" * 33, False, id="qn-id-33"),
        pytest.param(qualified_name_errors, ("a" * 63) + "/x", True, id="qn-domain-63"),
        pytest.param(qualified_name_errors, ("a" * 64) + "/x", False, id="qn-domain-64"),
        pytest.param(qualified_name_errors, "/x", False, id="qn-empty-domain"),
        pytest.param(qualified_name_errors, "a.b/", False, id="qn-empty-name"),
        pytest.param(qualified_name_errors, "a/b/c", False, id="qn-two-slashes"),
        pytest.param(qualified_name_errors, "A.com/x", False, id="qn-upper-domain"),
        pytest.param(qualified_name_errors, "a.com/x-y", False, id="qn-bad-id"),
        pytest.param(qualified_name_errors, "", False, id="qn-empty"),
    ],
)
def test_validators(check: Callable[[str], list[str]], name: str, valid: bool) -> None:
    errors = check(name)
    assert (errors == []) == valid, errors
    assert all(isinstance(e, str) and e for e in errors)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("memory", ("gpu.nvidia.com", "memory"), id="short"),
        pytest.param(
            "resource.kubernetes.io/pcieRoot",
            ("resource.kubernetes.io", "pcieRoot"),
            id="qualified",
        ),
    ],
)
def test_split_qualified_name(name: str, expected: tuple[str, str]) -> None:
    assert split_qualified_name(name, "gpu.nvidia.com") == expected
