"""The inventory's deployment: a leader and a warm standby in production, each replica naming
itself in the leader lease by its pod name, and a rollout that never leaves it without a replica."""

from __future__ import annotations

from typing import Any

import pytest

from deploy.manifests import containers, named
from gpudra_inventory.settings import Settings

Objs = list[dict[str, Any]]


@pytest.mark.parametrize(
    ("overlay_name", "replicas"),
    [
        pytest.param("dev", 1, id="dev"),
        pytest.param("production", 2, id="production"),
    ],
)
def test_inventory_replicas(rendered: dict[str, Objs], overlay_name: str, replicas: int) -> None:
    deployment = named(rendered[overlay_name], "Deployment", "gpudra-inventory")
    assert deployment["spec"]["replicas"] == replicas
    budget = named(rendered[overlay_name], "PodDisruptionBudget", "gpudra-inventory")
    # A drain takes one replica at a time; with two, the standby keeps serving meanwhile.
    assert budget["spec"]["maxUnavailable"] == 1
    rolling = deployment["spec"].get("strategy", {}).get("rollingUpdate", {})
    assert rolling.get("maxUnavailable", "25%") in (0, "25%")  # rounds down to 0 of 1 or 2


@pytest.mark.parametrize("overlay_name", ["dev", "production"])
def test_each_replica_holds_the_lease_under_its_pod_name(
    rendered: dict[str, Objs], overlay_name: str
) -> None:
    (container,) = containers(named(rendered[overlay_name], "Deployment", "gpudra-inventory"))
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    holder = env[f"{Settings.ENV_PREFIX}LEASE_HOLDER"]
    assert holder["value"] == "$(POD_NAME)"
    # Kubernetes expands $(POD_NAME) only from variables defined before it.
    names = [e["name"] for e in container["env"]]
    assert names.index("POD_NAME") < names.index(holder["name"])
