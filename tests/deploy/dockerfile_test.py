"""The image definition agrees with the manifests (the image itself is not built here: CI has no
Docker daemon). The manifests run `python -m gpudra_<service>`, so the image must put the unpacked
PEX's venv first on PATH; it must be built from the Pants PEX and default to a non-root user.
"""

from __future__ import annotations

import re

import pytest

from deploy import manifests

DOCKERFILE = manifests.REPO / "deploy" / "docker" / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text(encoding="utf-8"))
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


@pytest.mark.parametrize(
    ("instruction", "pattern"),
    [
        pytest.param("COPY", r"^dist/gpudra\.pex ", id="from-the-pants-pex"),
        pytest.param("RUN", r"PEX_TOOLS=1 .*gpudra\.pex venv .*/app$", id="unpacked-to-venv"),
        pytest.param("ENV", r"PATH=/app/bin:", id="venv-python-first"),
        pytest.param("USER", r"^[1-9]\d*:[1-9]\d*$", id="non-root-default"),
    ],
)
def test_dockerfile_has(instruction: str, pattern: str) -> None:
    args = [rest for word, rest in _instructions() if word == instruction]
    assert any(re.search(pattern, a) for a in args), f"no {instruction} matching {pattern}: {args}"


def test_services_use_the_interpreter_the_image_provides() -> None:
    services = []
    for path in (manifests.KUSTOMIZE / "base").glob("*/*.yaml"):
        for doc in manifests.load_documents(path):
            if doc.get("kind") in manifests.WORKLOAD_KINDS:
                for container in manifests.containers(doc):
                    if container["image"] == "gpudra":
                        assert container["command"][:2] == ["python", "-m"]
                        services.append(container["command"][2])
    assert sorted(services) == sorted(
        f"gpudra_{s}"
        for s in ("node_agent", "inventory", "allocator", "claim_writer", "kubelet_plugin")
    )
