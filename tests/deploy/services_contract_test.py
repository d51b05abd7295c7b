"""The rendered manifests against the services' own settings loaders.

Each gpudra container's environment, as Kubernetes would assemble it (ConfigMaps via envFrom,
then `env`, downward-API fields filled with sample values), is loaded with that service's
`Settings.load`: every `GPUDRA_<SERVICE>_*` variable must name a real setting, the loader must
accept the values, and the loaded settings must point at what the manifests provide (NATS URL,
TLS files, health port, mode, kubelet paths, DeviceClasses file).
"""

from __future__ import annotations

import dataclasses
from types import ModuleType
from typing import Any

import pytest

from deploy import manifests
from deploy.manifests import by_kind, containers, named, pod_spec
from gpudra_allocator import engine as allocator_engine
from gpudra_allocator import settings as allocator_settings
from gpudra_claim_writer import settings as claim_writer_settings
from gpudra_inventory import settings as inventory_settings
from gpudra_kubelet_plugin import settings as kubelet_plugin_settings
from gpudra_node_agent import settings as node_agent_settings

Objs = list[dict[str, Any]]
SERVICES = {
    "node-agent": "DaemonSet",
    "kubelet-plugin": "DaemonSet",
    "inventory": "Deployment",
    "allocator": "Deployment",
    "claim-writer": "Deployment",
}
FIELD_SAMPLES = {
    "spec.nodeName": "gpu-node-1",
    "metadata.uid": "6f1e0c2a-0000-4000-8000-000000000001",
    "metadata.name": "gpudra-pod-abcde",
}
CASES = [
    pytest.param(overlay, service, id=f"{overlay}-{service}")
    for overlay in manifests.OVERLAYS
    for service in SERVICES
]


SETTINGS: dict[str, ModuleType] = {
    "node-agent": node_agent_settings,
    "kubelet-plugin": kubelet_plugin_settings,
    "inventory": inventory_settings,
    "allocator": allocator_settings,
    "claim-writer": claim_writer_settings,
}


def _settings_module(service: str) -> Any:
    return SETTINGS[service]


def _environment(objs: Objs, container: dict[str, Any]) -> dict[str, str]:
    config_maps = {cm["metadata"]["name"]: cm.get("data", {}) for cm in by_kind(objs, "ConfigMap")}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(config_maps[source["configMapRef"]["name"]])
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            env[var["name"]] = FIELD_SAMPLES[var["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def _service(objs: Objs, service: str) -> tuple[dict[str, Any], dict[str, str]]:
    workload = named(objs, SERVICES[service], f"gpudra-{service}")
    (container,) = containers(workload)
    return workload, _environment(objs, container)


@pytest.mark.parametrize(("overlay", "service"), CASES)
def test_every_service_variable_is_a_setting(
    rendered: dict[str, Objs], overlay: str, service: str
) -> None:
    module = _settings_module(service)
    fields = {f.name for f in dataclasses.fields(module.Settings)}
    _, env = _service(rendered[overlay], service)
    for name in env:
        if name.startswith(module.ENV_PREFIX):
            assert name.removeprefix(module.ENV_PREFIX).lower() in fields, name


@pytest.mark.parametrize(("overlay", "service"), CASES)
def test_settings_load_and_point_at_what_the_pod_has(
    rendered: dict[str, Objs], overlay: str, service: str
) -> None:
    objs = rendered[overlay]
    workload, env = _service(objs, service)
    settings = _settings_module(service).Settings.load([], env)
    assert settings.nats_url == env["GPUDRA_NATS_URL"]
    (container,) = containers(workload)
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    for kind in ("ca", "cert", "key"):
        path = getattr(settings, f"nats_tls_{kind}", None)
        if path is not None:  # services with NATS TLS settings must find the mounted files
            assert path.rsplit("/", 1)[0] in mounts, (kind, path)
    if hasattr(settings, "health_port"):
        assert {"name": "health", "containerPort": settings.health_port} in container["ports"]
    if hasattr(settings, "mode"):
        assert settings.mode == "kubernetes"


@pytest.mark.parametrize("overlay", manifests.OVERLAYS)
def test_kubelet_plugin_settings_match_its_mounts(rendered: dict[str, Objs], overlay: str) -> None:
    objs = rendered[overlay]
    workload, env = _service(objs, "kubelet-plugin")
    settings = _settings_module("kubelet-plugin").Settings.load([], env)
    (container,) = containers(workload)
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert str(settings.data_dir) in mounts
    assert str(settings.registry_dir) in mounts
    assert str(settings.cdi_dir) in mounts
    assert str(settings.boot_id_file) in mounts
    assert settings.node == FIELD_SAMPLES["spec.nodeName"]
    assert settings.pod_uid == FIELD_SAMPLES["metadata.uid"]
    assert settings.claim_source == "kubernetes"
    simulated = overlay == "dev"
    assert settings.device_source == ("simulator:dgx-h100" if simulated else "nvml")
    assert ("runtimeClassName" in pod_spec(workload)) is not simulated


@pytest.mark.parametrize("overlay", manifests.OVERLAYS)
def test_allocator_loads_the_clusters_device_classes(
    rendered: dict[str, Objs], overlay: str, tmp_path: Any
) -> None:
    """The allocator's DeviceClasses file is the cluster's DeviceClasses, read by its own loader."""
    objs = rendered[overlay]
    workload, env = _service(objs, "allocator")
    settings = _settings_module("allocator").Settings.load([], env)
    volume = next(v for v in pod_spec(workload)["volumes"] if v["name"] == "device-classes")
    (container,) = containers(workload)
    mount = next(m for m in container["volumeMounts"] if m["name"] == "device-classes")
    config_map = named(objs, "ConfigMap", volume["configMap"]["name"])
    directory, _, key = settings.device_classes.rpartition("/")
    assert directory == mount["mountPath"]
    (tmp_path / key).write_text(config_map["data"][key], encoding="utf-8")
    loaded = allocator_engine.load_classes(str(tmp_path / key))
    cluster = {d["metadata"]["name"] for d in by_kind(objs, "DeviceClass")}
    assert {c.name for c in loaded} == cluster
