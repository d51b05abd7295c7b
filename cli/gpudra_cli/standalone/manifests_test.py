from __future__ import annotations

from pathlib import Path

import pytest

from gpudra_cli.standalone.errors import ManifestError
from gpudra_cli.standalone.manifests import demo_scenarios, plan_files

TEMPLATE = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu}
spec:
  metadata: {annotations: {gpudra.io/gang: g, gpudra.io/gang-size: "2"}}
  spec:
    devices:
      requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
"""
CLAIM = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: solo, namespace: team-a}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: 2}}]
"""


def workload(kind: str, spec: str) -> str:
    return f"""
apiVersion: apps/v1
kind: {kind}
metadata: {{name: w}}
spec:
  {spec}
  template:
    spec:
      resourceClaims: [{{name: gpu, resourceClaimTemplateName: one-gpu}}]
      containers: [{{name: c, image: x}}]
"""


def write(tmp_path: Path, name: str, *docs: str) -> Path:
    path = tmp_path / name
    path.write_text("---".join(docs), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("kind", "spec", "claims"),
    [
        pytest.param("Deployment", "replicas: 3", 3, id="deployment-replicas"),
        pytest.param("Deployment", "selector: {}", 1, id="deployment-default-one"),
        pytest.param("Job", "parallelism: 2", 2, id="job-parallelism"),
        pytest.param("StatefulSet", "replicas: 2", 2, id="statefulset"),
    ],
)
def test_templates_become_one_claim_per_pod(
    tmp_path: Path, kind: str, spec: str, claims: int
) -> None:
    plan = plan_files([write(tmp_path, "w.yaml", TEMPLATE, workload(kind, spec))])
    assert [c["metadata"]["name"] for c in plan.claims] == [f"one-gpu-{i}" for i in range(claims)]
    first = plan.claims[0]
    assert first["metadata"]["namespace"] == "default"
    assert first["metadata"]["annotations"]["gpudra.io/gang"] == "g"
    assert first["spec"]["devices"]["requests"][0]["name"] == "gpu"
    assert plan.skipped == [f"{kind}/w"]


def test_a_folder_is_read_in_name_order_and_claims_keep_their_namespace(tmp_path: Path) -> None:
    write(tmp_path, "b.yaml", TEMPLATE, workload("Deployment", "replicas: 1"))
    write(tmp_path, "a.yaml", CLAIM)
    (tmp_path / "notes.txt").write_text("not yaml: [", encoding="utf-8")
    plan = plan_files([tmp_path])
    assert [(c["metadata"]["namespace"], c["metadata"]["name"]) for c in plan.claims] == [
        ("team-a", "solo"),
        ("default", "one-gpu-0"),
    ]
    assert plan.sources == {"team-a/solo": "a", "default/one-gpu-0": "b"}


@pytest.mark.parametrize(
    ("docs", "message"),
    [
        pytest.param(["key: [unclosed"], "not YAML", id="not-yaml"),
        pytest.param(["- a list"], "is not a Kubernetes object", id="not-an-object"),
        pytest.param(
            [workload("Deployment", "replicas: 1")],
            "names ResourceClaimTemplate 'one-gpu', which is not in the file",
            id="missing-template",
        ),
        pytest.param(
            [CLAIM.replace("count: 2", "count: -1")], "ResourceClaim 'solo'", id="invalid-claim"
        ),
        pytest.param([CLAIM, CLAIM], "defined twice", id="duplicate"),
        pytest.param(["kind: ConfigMap\nmetadata: {name: c}"], "no ResourceClaims", id="none"),
    ],
)
def test_bad_manifests_are_clear_errors(tmp_path: Path, docs: list[str], message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        plan_files([write(tmp_path, "m.yaml", *docs)])


POD = """
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
"""


@pytest.mark.parametrize(
    ("docs", "message"),
    [
        pytest.param(
            [CLAIM.replace("metadata: {name: solo, namespace: team-a}", "metadata: solo")],
            "ResourceClaim: metadata is not a mapping",
            id="claim-metadata-a-string",
        ),
        pytest.param(
            [CLAIM.replace("apiVersion: resource.k8s.io/v1\n", "")],
            "ResourceClaim 'solo': apiVersion is not set",
            id="claim-without-apiversion",
        ),
        pytest.param(
            [TEMPLATE, workload("Deployment", "replicas: null")],
            None,
            id="replicas-null-is-the-default",
        ),
        pytest.param(
            [TEMPLATE, workload("Deployment", "replicas: many")],
            "Deployment 'w': spec.replicas is not a non-negative integer: 'many'",
            id="replicas-a-word",
        ),
        pytest.param(
            [TEMPLATE, workload("Deployment", "replicas: 1000000000")],
            "Deployment 'w': spec.replicas is 1000000000; standalone mode expands at most "
            "10000 pods per workload",
            id="replicas-huge",
        ),
        pytest.param(
            [TEMPLATE, workload("Job", "parallelism: -2")],
            "Job 'w': spec.parallelism is not a non-negative integer: -2",
            id="parallelism-negative",
        ),
        pytest.param(
            [TEMPLATE, POD.replace("spec:\n  resourceClaims", "spec: hello\nx:\n  y")],
            "Pod 'p': spec is not a mapping",
            id="pod-spec-a-string",
        ),
        pytest.param(
            [TEMPLATE, POD.replace("[{name: gpu, resourceClaimTemplateName: one-gpu}]", "[gpu]")],
            "Pod 'p': spec.resourceClaims\\[0\\] is not a mapping",
            id="pod-claim-ref-a-string",
        ),
        pytest.param(
            [TEMPLATE, POD.replace("[{name", "{x: [{name").replace("one-gpu}]", "one-gpu}]}")],
            "Pod 'p': spec.resourceClaims is not a list",
            id="pod-claim-refs-a-mapping",
        ),
        pytest.param(
            [
                TEMPLATE,
                workload("Deployment", "replicas: 1").replace("template:", "template: 3\n  x:"),
            ],
            "Deployment 'w': spec.template is not a mapping",
            id="workload-template-a-number",
        ),
    ],
)
def test_objects_of_the_wrong_shape_are_clear_errors(
    tmp_path: Path, docs: list[str], message: str | None
) -> None:
    path = write(tmp_path, "m.yaml", *docs)
    if message is None:
        assert [c["metadata"]["name"] for c in plan_files([path]).claims] == ["one-gpu-0"]
        return
    with pytest.raises(ManifestError, match=message):
        plan_files([path])


def test_missing_paths_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no such file or folder"):
        plan_files([tmp_path / "nope.yaml"])
    with pytest.raises(ManifestError, match="no .yaml files"):
        plan_files([tmp_path])


def test_the_demo_scenario_is_an_unschedulable_size() -> None:
    plan = plan_files([demo_scenarios()])
    (claim,) = plan.claims
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["count"] == 16


POD_TWO_CLAIMS = """
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: team-a}
spec:
  resourceClaims:
    - {name: gpus, resourceClaimTemplateName: one-gpu}
    - {name: shared, resourceClaimName: solo}
  containers: [{name: c, image: x}]
"""


@pytest.mark.parametrize(
    ("docs", "pods", "owners"),
    [
        pytest.param(
            (TEMPLATE.replace("{name: one-gpu}", "{name: one-gpu, namespace: team-a}"),
             CLAIM, POD_TWO_CLAIMS),
            {"team-a/trainer": [("gpus", "one-gpu-0")]},
            {"team-a/one-gpu-0": "team-a/trainer"},
            id="pod-with-a-template-claim-and-a-named-claim",
        ),
        pytest.param(
            (TEMPLATE, workload("Job", "parallelism: 2")),
            {"default/w-0": [("gpu", "one-gpu-0")], "default/w-1": [("gpu", "one-gpu-1")]},
            {"default/one-gpu-0": "default/w-0", "default/one-gpu-1": "default/w-1"},
            id="one-pod-per-job-worker",
        ),
        pytest.param((CLAIM,), {}, {}, id="claims-alone-record-no-pod"),
    ],
)  # fmt: skip
def test_workload_pods_are_recorded_with_their_generated_claims(
    tmp_path: Path,
    docs: tuple[str, ...],
    pods: dict[str, list[tuple[str, str]]],
    owners: dict[str, str],
) -> None:
    plan = plan_files([write(tmp_path, "p.yaml", *docs)])
    recorded = {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}": [
            (s["name"], s["resourceClaimName"])
            for s in p.get("status", {}).get("resourceClaimStatuses", [])
        ]
        for p in plan.pods
    }
    assert recorded == pods
    assert plan.owners == owners
    for pod in plan.pods:
        assert pod["spec"]["resourceClaims"], "the pod's claims as written"
