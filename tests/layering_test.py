"""The layering rules of docs/LAYOUT.md, checked on every Python file's imports.

A service never imports another service; a lib never imports a service or the CLI; within libs a
lower layer never imports a higher one. Imports are read with `ast`, so a violation inside a function
or behind `TYPE_CHECKING` counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVICES = {
    "gpudra_node_agent",
    "gpudra_inventory",
    "gpudra_allocator",
    "gpudra_claim_writer",
    "gpudra_kubelet_plugin",
}
GENERATED = {"gpudrapb", "kubeletpb"}
# Each lib and the gpudra packages it may import (besides itself and generated protobuf code).
LIB_ALLOWED: dict[str, set[str]] = {
    "gpudra_api": set(),
    "gpudra_cel": {"gpudra_api"},
    "gpudra_alloc": {"gpudra_api", "gpudra_cel"},
    "gpudra_nvml": {"gpudra_api"},
    "gpudra_slices": {"gpudra_api", "gpudra_nvml"},
    "gpudra_bus": {"gpudra_api"},
    "gpudra_kube": {"gpudra_api", "gpudra_bus"},
    "gpudra_service": set(),
    "gpudra_standalone": set(),
    "gpudra_testing": {"gpudra_api", "gpudra_cel", "gpudra_alloc", "gpudra_nvml", "gpudra_slices",
                       "gpudra_bus", "gpudra_kube", "gpudra_standalone"},
}  # fmt: skip


def _package_of(path: Path) -> str:
    rel = path.relative_to(ROOT).parts
    if rel[0] == "libs" or rel[0] == "cli":
        return rel[1]
    if rel[0] == "services":
        return rel[2]
    raise ValueError(path)


def _imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return {n for n in names if n.startswith("gpudra") or n in GENERATED}


def _sources() -> list[Path]:
    files = [p for top in ("libs", "cli", "services") for p in (ROOT / top).rglob("*.py")]
    return sorted(p for p in files if "__pycache__" not in p.parts)


def allowed(own: str, name: str) -> bool:
    """May package `own` import gpudra package `name`?"""
    if own in SERVICES:
        return name not in SERVICES and name != "gpudra_cli"
    if own == "gpudra_cli":
        return name not in SERVICES
    return name in LIB_ALLOWED.get(own, set())


def _is_test(path: Path) -> bool:
    return path.name.endswith("_test.py") or path.name == "conftest.py"


def violations(path: Path) -> list[str]:
    own = _package_of(path)
    # Tests may use the shared test infrastructure; shipped code may not.
    exempt = {own} | GENERATED | ({"gpudra_testing"} if _is_test(path) else set())
    return [
        f"{path.relative_to(ROOT)}: {own} must not import {name}"
        for name in sorted(_imported_top_levels(path) - exempt)
        if not allowed(own, name)
    ]


def test_sources_are_visible() -> None:
    # Guards the test itself: with no files in the sandbox it would pass vacuously.
    packages = {_package_of(p) for p in _sources()}
    expected = set(LIB_ALLOWED) | SERVICES | {"gpudra_cli"}
    assert expected <= packages, f"not in the sandbox: {sorted(expected - packages)}"


def test_no_layering_violations() -> None:
    found = [v for p in _sources() for v in violations(p)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("package", "imported", "ok"),
    [
        pytest.param(
            "gpudra_allocator", "gpudra_kubelet_plugin", False, id="service-imports-service"
        ),
        pytest.param("gpudra_allocator", "gpudra_alloc", True, id="service-imports-lib"),
        pytest.param("gpudra_api", "gpudra_cel", False, id="lower-lib-imports-higher"),
        pytest.param("gpudra_cel", "gpudra_api", True, id="higher-lib-imports-lower"),
        pytest.param("gpudra_bus", "gpudra_allocator", False, id="lib-imports-service"),
        pytest.param("gpudra_cli", "gpudra_inventory", False, id="cli-imports-service"),
    ],
)
def test_rules(package: str, imported: str, ok: bool) -> None:
    assert allowed(package, imported) is ok


def test_imports_inside_functions_count(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "import os\nif TYPE_CHECKING:\n    from gpudra_x.y import z\n"
        "def f():\n    import gpudra_allocator.main\n",
        encoding="utf-8",
    )
    assert _imported_top_levels(src) == {"gpudra_x", "gpudra_allocator"}
