"""End to end: `gpudra demo --json` on the default simulated fleet, as a separate process.

The demo starts the embedded nats-server and every service as its own process, applies the
examples and prepares the claims through the kubelet plugins' gRPC sockets; this test reads the
JSON document it prints and checks each scenario's outcome, the prepared CDI devices, one claim's
trace across services (and the OTLP JSON file), the utilisation and drift reports, and that every
service stopped cleanly. Simulated GPUs only: it says nothing about real hardware.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# Runs the demo through the CLI's own `main` with a parser holding just the demo command, so the
# test does not depend on which commands the CLI's registry lists.
RUNNER = (
    "import argparse, importlib, sys\n"
    "from gpudra_cli.commands import demo\n"
    "cli = importlib.import_module('gpudra_cli.main')\n"
    "parser = argparse.ArgumentParser(prog='gpudra')\n"
    "demo.register(parser.add_subparsers(dest='command'))\n"
    "sys.exit(cli.main(sys.argv[1:], parser=parser))\n"
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("demo")
    trace_file = tmp / "traces.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    env["GPUDRA_STATE_FILE"] = str(tmp / "state.json")
    argv = [
        sys.executable,
        "-c",
        RUNNER,
        "demo",
        "--json",
        "--examples",
        str(EXAMPLES),
        "--trace-file",
        str(trace_file),
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240, cwd=tmp)
    assert done.returncode == 0, f"demo failed ({done.returncode}):\n{done.stderr[-4000:]}"
    doc: dict[str, Any] = dict(json.loads(done.stdout))
    doc["_trace_file"] = trace_file
    return doc


def claim(doc: dict[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in doc["claims"] if c["name"] == name]
    assert found, f"claim {name} is not in the demo's output"
    first: dict[str, Any] = found[0]
    return first


def test_every_claim_is_decided_and_no_device_is_allocated_twice(demo: dict[str, Any]) -> None:
    states = {c["name"]: c["state"] for c in demo["claims"]}
    assert "pending" not in states.values(), states
    assert [n for n, s in states.items() if s == "unschedulable"] == ["nvlink-16-gpus"], states
    used = Counter(d for c in demo["claims"] for d in c["devices"])
    assert not [d for d, n in used.items() if n > 1], f"devices allocated twice: {used}"


@pytest.mark.parametrize(
    ("name", "node_prefix", "count", "domain_prefix", "product"),
    [
        pytest.param("b200-150gb-0", "hgx-b200-", 1, "", "NVIDIA B200", id="150gb-on-b200"),
        pytest.param("nvswitch-8-gpus", "", 8, "nvswitch-", "", id="8-gpus-one-nvswitch-domain"),
        pytest.param("nvlink-4-gpus", "", 4, "nv", "", id="4-gpus-one-nvlink-domain"),
        pytest.param("h100-or-better", "", 1, "", "", id="h100-or-better"),
        pytest.param("shared-gpu", "", 1, "", "", id="shared-claim"),
    ],
)
def test_scenario_lands_where_it_says(
    demo: dict[str, Any],
    name: str,
    node_prefix: str,
    count: int,
    domain_prefix: str,
    product: str,
) -> None:
    c = claim(demo, name)
    assert c["state"] == "allocated", c
    assert c["node"].startswith(node_prefix), c
    assert "," not in c["node"], c
    assert len(c["devices"]) == count, c
    if domain_prefix:
        assert len(c["nvlink_domains"]) == 1, c
        assert c["nvlink_domains"][0].startswith(domain_prefix), c
    if product:
        assert c["products"] == [product], c
    assert c["allocate_ms"] is not None
    assert c["allocate_ms"] > 0


def test_h100_or_better_gets_compute_capability_9_or_newer(demo: dict[str, Any]) -> None:
    c = claim(demo, "h100-or-better")
    assert not any(p.startswith(("NVIDIA A100", "NVIDIA L4")) for p in c["products"]), c


def test_mig_fallback_picks_the_smallest_free_profile(demo: dict[str, Any]) -> None:
    c = claim(demo, "mig-small-medium-full")
    assert c["requests"] == ["gpu/small"], c
    assert c["mig_profiles"] == ["1g.10gb"], c


def test_workload_templates_become_one_claim_per_pod(demo: dict[str, Any]) -> None:
    names = {c["name"] for c in demo["claims"]}
    assert {"one-gpu-0", "one-gpu-1", "one-gpu-2"} <= names
    workers = [c for c in demo["claims"] if c["name"].startswith("llm-pretrain-worker-")]
    assert len(workers) == 4
    for w in workers:
        assert w["state"] == "allocated", w
        assert len(w["devices"]) == 4, w
        assert len(w["nvlink_domains"]) == 1, w
    assert "Job/llm-pretrain" in demo["skipped"]


def test_the_unschedulable_claim_explains_itself(demo: dict[str, Any]) -> None:
    c = claim(demo, "nvlink-16-gpus")
    assert c["devices"] == []
    assert c["cdi_ids"] == []
    assert "16 devices" in c["reason"], c["reason"]
    assert "node" in c["reason"], c["reason"]


def test_allocated_claims_are_prepared_with_one_cdi_device_per_device(
    demo: dict[str, Any],
) -> None:
    for c in demo["claims"]:
        if c["state"] != "allocated":
            continue
        assert c["prepare_error"] == "", c
        assert len(c["cdi_ids"]) == len(c["devices"]), c
        assert all(i.startswith("k8s.gpu.nvidia.com/claim=") for i in c["cdi_ids"]), c
        assert all(c["uid"] in i for i in c["cdi_ids"]), c


def test_one_claim_trace_spans_four_services_and_is_in_the_otlp_file(
    demo: dict[str, Any],
) -> None:
    trace = demo["trace"]
    assert trace["claim"] == "default/nvswitch-8-gpus"
    assert len(trace["services"]) >= 4, trace["services"]
    assert {"gpudra-claim-writer", "gpudra-allocator", "gpudra-kubelet-plugin"} <= set(
        trace["services"]
    )
    assert trace["tree"][0].startswith("intake claim [gpudra-claim-writer]"), trace["tree"]
    assert any("prepare claim [gpudra-kubelet-plugin]" in line for line in trace["tree"])
    otlp = json.loads(Path(demo["_trace_file"]).read_text())
    ids = {
        base64_to_hex(span["traceId"])
        for rs in otlp["resourceSpans"]
        for ss in rs.get("scopeSpans", [])
        for span in ss.get("spans", [])
    }
    assert trace["trace_id"] in ids


def base64_to_hex(value: str) -> str:
    """OTLP JSON from protobuf's json_format writes trace IDs as base64."""
    return base64.b64decode(value).hex()


def test_utilisation_shows_allocated_but_idle_gpus(demo: dict[str, Any]) -> None:
    use = {c["name"]: c for c in demo["utilisation"]["claims"]}
    allocated = [c for c in demo["claims"] if c["state"] == "allocated"]
    assert set(use) == {c["name"] for c in allocated}
    # The DGX H100 profile keeps its GPU 7 allocated-but-idle; the 8-GPU claim holds a whole DGX.
    eight = use["nvswitch-8-gpus"]
    assert eight["allocated"] == 8
    assert eight["unknown"] == 0
    assert eight["computing"] == 7
    assert eight["idle_devices"] == [f"{eight['node']}/gpu-7"]
    (ns,) = demo["utilisation"]["namespaces"]
    assert ns["namespace"] == "default"
    assert ns["allocated"] == sum(len(c["devices"]) for c in allocated)
    assert ns["computing"] < ns["allocated"]


def test_drift_names_the_nodes_off_the_fleet_driver(demo: dict[str, Any]) -> None:
    drift = demo["drift"]
    assert drift is not None
    assert drift["nodes"] == len(demo["fleet"])
    assert drift["driver_majority"] == "550.54.15"
    assert drift["outliers"]["a100-mig-0"]["driver"] == "535.161.08"
    assert "driver" not in drift["outliers"].get("dgx-h100-0", {})
    assert 'semver("550.54.15")' in drift["exclude_selector"]


def test_every_service_stopped_cleanly(demo: dict[str, Any]) -> None:
    codes = demo["exitCodes"]
    assert len(codes) == 3 + 2 * len(demo["fleet"])
    assert set(codes.values()) == {0}, codes
