"""Every overlay renders, every object is valid Kubernetes (1.34+, strict), and the rendered
output keeps gpudra's deployment invariants: hardened, probed, sized workloads; node DaemonSets
with the right host paths and downward-API identity; no namespace on cluster-scoped objects;
RBAC that grants exactly the documented list; every referenced object rendered.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from deploy import manifests
from deploy.manifests import by_kind, containers, named, pod_spec, ref

Objs = list[dict[str, Any]]
OVERLAY_PARAMS = [pytest.param(name, id=name) for name in manifests.OVERLAYS]
SERVICES = ("node-agent", "inventory", "allocator", "claim-writer", "kubelet-plugin")


@pytest.fixture(params=OVERLAY_PARAMS)
def overlay(request: pytest.FixtureRequest, rendered: dict[str, Objs]) -> Objs:
    objs: Objs = rendered[request.param]
    return objs


def _workloads(objs: Objs) -> Objs:
    return [o for o in objs if o["kind"] in manifests.WORKLOAD_KINDS]


@pytest.mark.parametrize("version", manifests.SCHEMA_VERSIONS)
def test_every_object_is_valid_kubernetes(overlay: Objs, version: str) -> None:
    problems = [
        problem
        for obj in overlay
        if manifests.api_group(obj) not in manifests.CRD_GROUPS
        and (problem := manifests.validate_strict(obj, version)) is not None
    ]
    assert problems == []


def test_cached_validation_agrees_with_kubernetes_validate(overlay: Objs) -> None:
    """One object of each kind, as rendered and with a misspelt field, through both paths."""
    samples = {o["kind"]: o for o in overlay if manifests.api_group(o) not in manifests.CRD_GROUPS}
    for obj in samples.values():
        broken = {**obj, "metadata": {**obj["metadata"], "labelz": {}}}
        for candidate in (obj, broken):
            expected = manifests.validate_with_library(candidate, "1.34")
            assert manifests.validate_strict(candidate, "1.34") == expected
        assert manifests.validate_strict(broken, "1.34") is not None


def test_schema_check_rejects_unknown_fields(overlay: Objs) -> None:
    """The validation above can fail: a misspelt field in a rendered Deployment is caught."""
    deployment = by_kind(overlay, "Deployment")[0]
    broken = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    assert "replica" in (manifests.validate_strict(broken, "1.34") or "")


def test_kinds_are_known_and_scoped(overlay: Objs) -> None:
    for obj in overlay:
        kind, namespace = obj["kind"], obj["metadata"].get("namespace")
        if kind in manifests.CLUSTER_SCOPED:
            assert namespace is None, f"cluster-scoped {ref(obj)} carries a namespace"
        else:
            assert kind in manifests.NAMESPACED, f"unclassified kind {kind}: add it to manifests"
            assert namespace == manifests.NAMESPACE, ref(obj)


def test_objects_are_unique(overlay: Objs) -> None:
    keys = [ref(o) for o in overlay]
    assert sorted(keys) == sorted(set(keys))


def test_workloads_are_hardened_probed_and_sized(overlay: Objs) -> None:
    for workload in _workloads(overlay):
        spec = pod_spec(workload)
        pod_sc = spec.get("securityContext", {})
        assert pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", ref(workload)
        assert spec.get("priorityClassName", "").startswith("gpudra-"), ref(workload)
        for c in containers(workload):
            where = f"{ref(workload)}/{c['name']}"
            sc = c.get("securityContext", {})
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            if workload["metadata"]["name"] != "gpudra-kubelet-plugin":  # see its MIG test
                assert "add" not in sc.get("capabilities", {}), where
            assert not sc.get("privileged", False), where
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                assert probe in c, f"{where} has no {probe}"
            requests = c.get("resources", {}).get("requests", {})
            limits = c.get("resources", {}).get("limits", {})
            assert {"cpu", "memory"} <= requests.keys(), where
            assert "memory" in limits, where


def test_only_the_kubelet_plugin_runs_as_root(overlay: Objs) -> None:
    root = []
    for workload in _workloads(overlay):
        pod_sc = pod_spec(workload).get("securityContext", {})
        if pod_sc.get("runAsNonRoot") is not True:
            root.append(workload["metadata"]["name"])
        else:
            assert pod_sc.get("runAsUser", 0) != 0, ref(workload)
    assert root == ["gpudra-kubelet-plugin"]


# Pod Security "restricted" allows only these volume types.
RESTRICTED_VOLUMES = {"configMap", "secret", "emptyDir", "persistentVolumeClaim", "projected"}


def test_pod_security_restricted_except_the_kubelet_plugins_host_paths(overlay: Objs) -> None:
    for workload in _workloads(overlay):
        spec = pod_spec(workload)
        for host in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(host, False), f"{ref(workload)}: {host}"
        for c in containers(workload):
            assert all("hostPort" not in p for p in c.get("ports", [])), ref(workload)
        volume_types = {key for v in spec.get("volumes", []) for key in v if key != "name"}
        if workload["metadata"]["name"] == "gpudra-kubelet-plugin":
            volume_types -= {"hostPath"}
        assert volume_types <= RESTRICTED_VOLUMES, f"{ref(workload)}: {volume_types}"


def test_production_rollouts_fit_the_anti_affinity(rendered: dict[str, Objs]) -> None:
    """A required one-per-node spread and a surge pod cannot both fit on exactly N nodes."""
    for workload in by_kind(rendered["production"], "Deployment"):
        affinity = pod_spec(workload).get("affinity", {}).get("podAntiAffinity", {})
        if affinity.get("requiredDuringSchedulingIgnoredDuringExecution"):
            assert workload["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0, ref(workload)


def test_gpudra_services_probe_the_health_endpoint(overlay: Objs) -> None:
    for workload in _workloads(overlay):
        if workload["metadata"]["name"] == "gpudra-nats":
            continue
        (c,) = containers(workload)
        assert {"name": "health", "containerPort": 8080} in c["ports"], ref(workload)
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}


def test_each_service_runs_its_module_from_the_gpudra_image(overlay: Objs) -> None:
    seen = {}
    for workload in _workloads(overlay):
        name = workload["metadata"]["name"]
        if name == "gpudra-nats":
            continue
        (c,) = containers(workload)
        service = name.removeprefix("gpudra-")
        assert c["command"] == ["python", "-m", "gpudra_" + service.replace("-", "_")]
        assert c["image"].split(":")[0].endswith("gpudra"), c["image"]
        assert ":" in c["image"], c["image"]
        assert not c["image"].endswith(":latest"), c["image"]
        seen[service] = workload["kind"]
    assert seen == {
        "node-agent": "DaemonSet",
        "kubelet-plugin": "DaemonSet",
        "inventory": "Deployment",
        "allocator": "Deployment",
        "claim-writer": "Deployment",
    }


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _host_paths(workload: dict[str, Any]) -> dict[str, str]:
    """hostPath volume path -> where the container mounts it."""
    volumes = {
        v["name"]: v["hostPath"]["path"] for v in pod_spec(workload)["volumes"] if "hostPath" in v
    }
    (c,) = containers(workload)
    return {volumes[m["name"]]: m["mountPath"] for m in c["volumeMounts"] if m["name"] in volumes}


def test_kubelet_plugin_mounts_the_kubelet_and_cdi_directories(overlay: Objs) -> None:
    plugin = named(overlay, "DaemonSet", "gpudra-kubelet-plugin")
    host_paths = _host_paths(plugin)
    assert host_paths == {
        f"/var/lib/kubelet/plugins/{manifests.DRIVER}": f"/var/lib/kubelet/plugins/{manifests.DRIVER}",
        "/var/lib/kubelet/plugins_registry": "/var/lib/kubelet/plugins_registry",
        "/var/run/cdi": "/var/run/cdi",
        "/proc/sys/kernel/random/boot_id": "/run/gpudra/host/boot_id",
    }
    (c,) = containers(plugin)
    env = _env(c)
    assert env["GPUDRA_KUBELET_PLUGIN_PLUGIN_DIR"] == f"/var/lib/kubelet/plugins/{manifests.DRIVER}"
    assert env["GPUDRA_KUBELET_PLUGIN_REGISTRY_DIR"] == "/var/lib/kubelet/plugins_registry"
    assert env["GPUDRA_KUBELET_PLUGIN_CDI_DIR"] == "/var/run/cdi"
    assert env["GPUDRA_KUBELET_PLUGIN_BOOT_ID_FILE"] == "/run/gpudra/host/boot_id"
    boot_id = next(m for m in c["volumeMounts"] if m["mountPath"] == "/run/gpudra/host/boot_id")
    assert boot_id.get("readOnly") is True


@pytest.mark.parametrize(
    ("service", "pod_uid_variable"),
    [
        pytest.param("node-agent", "POD_UID", id="node-agent"),
        # The plugin names its sockets after the pod UID (rolling updates).
        pytest.param("kubelet-plugin", "GPUDRA_KUBELET_PLUGIN_POD_UID", id="kubelet-plugin"),
    ],
)
def test_node_daemonsets_know_their_node_and_pod(
    overlay: Objs, service: str, pod_uid_variable: str
) -> None:
    ds = named(overlay, "DaemonSet", f"gpudra-{service}")
    (c,) = containers(ds)
    env = _env(c)
    prefix = "GPUDRA_" + service.upper().replace("-", "_")
    assert env[f"{prefix}_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env[pod_uid_variable] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert pod_spec(ds)["priorityClassName"] == "gpudra-node-critical"


def test_node_agent_has_no_host_access_and_no_api_token(overlay: Objs) -> None:
    agent = named(overlay, "DaemonSet", "gpudra-node-agent")
    assert _host_paths(agent) == {}
    assert pod_spec(agent)["automountServiceAccountToken"] is False


@pytest.mark.parametrize(
    ("service", "variable", "simulated", "real"),
    [
        pytest.param(
            "node-agent", "GPUDRA_NODE_AGENT_SIMULATOR_PROFILE", "dgx-h100", None, id="node-agent"
        ),
        pytest.param(
            "kubelet-plugin",
            "GPUDRA_KUBELET_PLUGIN_DEVICE_SOURCE",
            "simulator:dgx-h100",
            "nvml",
            id="kubelet-plugin",
        ),
    ],
)
def test_nvml_access_matches_the_overlay(
    rendered: dict[str, Objs], service: str, variable: str, simulated: str, real: str | None
) -> None:
    dev = pod_spec(named(rendered["dev"], "DaemonSet", f"gpudra-{service}"))
    prod = pod_spec(named(rendered["production"], "DaemonSet", f"gpudra-{service}"))
    assert "runtimeClassName" not in dev
    assert _env(dev["containers"][0])[variable] == simulated
    assert prod["runtimeClassName"] == "nvidia"
    assert _env(prod["containers"][0]).get(variable) == real
    for spec in (dev, prod):
        names = [e["name"] for e in spec["containers"][0]["env"]]
        assert len(names) == len(set(names)), "an overlay patch duplicated a variable"


def test_kubelet_plugin_may_create_mig_devices_exactly_where_it_uses_nvml(overlay: Objs) -> None:
    """With NVML the plugin creates and destroys MIG devices (`nvmlmig`: the inventory publishes
    free MIG placements by default). Through the NVIDIA runtime that takes the GPUs' MIG config
    capability (`NVIDIA_MIG_CONFIG_DEVICES=all`), which the Container Toolkit documents as needing
    CAP_SYS_ADMIN; root without it gets NVML_ERROR_NO_PERMISSION. A simulated node needs neither."""
    plugin = named(overlay, "DaemonSet", "gpudra-kubelet-plugin")
    (c,) = containers(plugin)
    env = _env(c)
    capabilities = c["securityContext"]["capabilities"]
    if env["GPUDRA_KUBELET_PLUGIN_DEVICE_SOURCE"] == "nvml":
        assert pod_spec(plugin)["runtimeClassName"] == "nvidia"
        assert env.get("NVIDIA_MIG_CONFIG_DEVICES") == "all"
        assert capabilities == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    else:
        assert "NVIDIA_MIG_CONFIG_DEVICES" not in env
        assert capabilities == {"drop": ["ALL"]}


def test_production_node_agents_run_on_gpu_nodes_only(rendered: dict[str, Objs]) -> None:
    for name in ("gpudra-node-agent", "gpudra-kubelet-plugin"):
        spec = pod_spec(named(rendered["production"], "DaemonSet", name))
        assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
            "tolerations"
        ]


@pytest.mark.parametrize(
    ("overlay_name", "nats", "allocators", "stream_replicas"),
    [
        pytest.param("dev", 1, 2, "1", id="dev"),
        pytest.param("production", 3, 3, "3", id="production"),
    ],
)
def test_replicas(
    rendered: dict[str, Objs], overlay_name: str, nats: int, allocators: int, stream_replicas: str
) -> None:
    objs = rendered[overlay_name]
    assert named(objs, "StatefulSet", "gpudra-nats")["spec"]["replicas"] == nats
    assert named(objs, "Deployment", "gpudra-allocator")["spec"]["replicas"] == allocators
    config = next(
        o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"].startswith("gpudra-config-")
    )
    assert config["data"]["GPUDRA_NATS_STREAM_REPLICAS"] == stream_replicas


def test_deployments_have_disruption_budgets(overlay: Objs) -> None:
    budgets = {
        pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]: pdb["spec"]
        for pdb in by_kind(overlay, "PodDisruptionBudget")
    }
    for workload in by_kind(overlay, "Deployment") + by_kind(overlay, "StatefulSet"):
        name = workload["metadata"]["name"]
        assert name in budgets, f"{name} has no PodDisruptionBudget"
        if workload["spec"]["replicas"] > 1:
            # A budget must keep at least one replica serving.
            spec = budgets[name]
            assert (
                spec.get("minAvailable", 0) >= 1
                or spec.get("maxUnavailable", 1) < workload["spec"]["replicas"]
            ), name


# --- references -------------------------------------------------------------------------------


def test_referenced_objects_are_rendered(overlay: Objs) -> None:
    names = {(o["kind"], o["metadata"]["name"]) for o in overlay}
    for workload in _workloads(overlay):
        spec = pod_spec(workload)
        assert ("ServiceAccount", spec["serviceAccountName"]) in names, ref(workload)
        assert ("PriorityClass", spec["priorityClassName"]) in names, ref(workload)
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                assert ("ConfigMap", volume["configMap"]["name"]) in names, ref(workload)
        for c in containers(workload):
            for source in c.get("envFrom", []):
                assert ("ConfigMap", source["configMapRef"]["name"]) in names, ref(workload)


def test_every_mounted_secret_comes_from_cert_manager(overlay: Objs) -> None:
    issued = {cert["spec"]["secretName"] for cert in by_kind(overlay, "Certificate")}
    issuers = {i["metadata"]["name"] for i in by_kind(overlay, "Issuer")}
    for cert in by_kind(overlay, "Certificate"):
        assert cert["spec"]["issuerRef"] == {
            "kind": "Issuer",
            "name": cert["spec"]["issuerRef"]["name"],
        }
        assert cert["spec"]["issuerRef"]["name"] in issuers, ref(cert)
    for workload in _workloads(overlay):
        for volume in pod_spec(workload).get("volumes", []):
            if "secret" in volume:
                assert volume["secret"]["secretName"] in issued, ref(workload)


def test_each_service_mounts_its_own_nats_client_certificate(overlay: Objs) -> None:
    for service in SERVICES:
        kind = "DaemonSet" if service in ("node-agent", "kubelet-plugin") else "Deployment"
        workload = named(overlay, kind, f"gpudra-{service}")
        secrets = [
            v["secret"]["secretName"] for v in pod_spec(workload)["volumes"] if "secret" in v
        ]
        assert secrets == [f"gpudra-nats-client-{service}"]
        (c,) = containers(workload)
        mount = next(m for m in c["volumeMounts"] if m["mountPath"] == "/etc/gpudra/nats-tls")
        assert mount["readOnly"] is True
        cert = named(overlay, "Certificate", f"gpudra-nats-client-{service}")
        assert cert["spec"]["commonName"] == f"gpudra-{service}"
        assert cert["spec"]["usages"] == ["digital signature", "client auth"]


def test_server_certificate_covers_every_address_clients_and_routes_use(overlay: Objs) -> None:
    names = named(overlay, "Certificate", "gpudra-nats-server")["spec"]["dnsNames"]
    config = next(
        o
        for o in by_kind(overlay, "ConfigMap")
        if o["metadata"]["name"].startswith("gpudra-config-")
    )
    client_host = config["data"]["GPUDRA_NATS_URL"].removeprefix("tls://").split(":")[0]
    assert client_host in names
    assert f"*.gpudra-nats-headless.{manifests.NAMESPACE}.svc" in names


def test_no_secret_material_is_rendered(overlay: Objs) -> None:
    assert by_kind(overlay, "Secret") == []
    credential = re.compile(
        r'^\s*"?(password|pass|token|auth_token|nkey|seed)"?\s*[:=]', re.M | re.I
    )
    for cm in by_kind(overlay, "ConfigMap"):
        for key, value in cm.get("data", {}).items():
            assert "PRIVATE KEY" not in value, f"{ref(cm)}: {key}"
            assert credential.search(value) is None, f"{ref(cm)}: {key}"


# --- RBAC ---------------------------------------------------------------------------------------

# (service account, API group, resource, verb): the whole list of what gpudra may do.
EXPECTED_GRANTS = {
    *(
        ("gpudra-inventory", "resource.k8s.io", "resourceslices", verb)
        for verb in ("get", "list", "watch", "create", "update", "delete")
    ),
    *(("gpudra-inventory", "", "nodes", verb) for verb in ("get", "list", "watch")),
    *(
        ("gpudra-claim-writer", "resource.k8s.io", "resourceclaims", verb)
        for verb in ("get", "list", "watch")
    ),
    *(
        ("gpudra-claim-writer", "resource.k8s.io", resource, verb)
        for resource in ("resourceclaims", "resourceclaims/status")
        for verb in ("update",)
    ),
    *(("gpudra-claim-writer", "", "pods", verb) for verb in ("get", "list", "watch", "update")),
    *(
        ("gpudra-claim-writer", "resource.k8s.io", "deviceclasses", verb)
        for verb in ("get", "list", "watch")
    ),
    *(
        ("gpudra-claim-writer", "events.k8s.io", "events", verb)
        for verb in ("get", "create", "update")
    ),
    ("gpudra-kubelet-plugin", "resource.k8s.io", "resourceclaims", "get"),
}


def _grants(objs: Objs) -> set[tuple[str, str, str, str]]:
    roles = {(r["kind"], r["metadata"]["name"]): r for r in by_kind(objs, "ClusterRole")}
    roles.update({(r["kind"], r["metadata"]["name"]): r for r in by_kind(objs, "Role")})
    grants = set()
    for binding in by_kind(objs, "ClusterRoleBinding") + by_kind(objs, "RoleBinding"):
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount", ref(binding)
            assert subject["namespace"] == manifests.NAMESPACE, ref(binding)
            for rule in role["rules"]:
                assert "resourceNames" not in rule
                assert "nonResourceURLs" not in rule
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            grants.add((subject["name"], group, resource, verb))
    return grants


def test_rbac_grants_exactly_the_documented_list(overlay: Objs) -> None:
    grants = _grants(overlay)
    assert not any("*" in part for grant in grants for part in grant), "wildcards in RBAC"
    assert grants == EXPECTED_GRANTS


def test_services_without_api_access_mount_no_token(overlay: Objs) -> None:
    bound = {g[0] for g in _grants(overlay)}
    for sa in by_kind(overlay, "ServiceAccount"):
        if sa["metadata"]["name"] not in bound:
            assert sa.get("automountServiceAccountToken") is False, ref(sa)
    assert {"gpudra-node-agent", "gpudra-allocator", "gpudra-nats"}.isdisjoint(bound)


# --- DRA objects and admission -------------------------------------------------------------------


def test_device_classes(overlay: Objs) -> None:
    classes = {c["metadata"]["name"]: c["spec"] for c in by_kind(overlay, "DeviceClass")}
    assert set(classes) == {"gpu.nvidia.com", "mig.nvidia.com", "nvlink.gpu.nvidia.com"}
    assert classes["gpu.nvidia.com"]["extendedResourceName"] == "nvidia.com/gpu"
    assert "nvlinkDomain" in classes["nvlink.gpu.nvidia.com"]["selectors"][0]["cel"]["expression"]


def test_slice_writer_policy_names_the_inventory_identity(overlay: Objs) -> None:
    policy = named(overlay, "ValidatingAdmissionPolicy", "gpudra-resourceslice-writers")
    binding = named(overlay, "ValidatingAdmissionPolicyBinding", "gpudra-resourceslice-writers")
    assert binding["spec"] == {
        "policyName": "gpudra-resourceslice-writers",
        "validationActions": ["Deny"],
    }
    inventory_sa = named(overlay, "ServiceAccount", "gpudra-inventory")
    identity = f"system:serviceaccount:{inventory_sa['metadata']['namespace']}:gpudra-inventory"
    assert identity in policy["spec"]["validations"][0]["expression"]
    assert policy["spec"]["failurePolicy"] == "Fail"
