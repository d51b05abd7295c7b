"""Memory the claim-writer's pod informer holds: whole pods against `slim_pod`'s.

    python bench/pod_informer_memory.py [--pods 1000 5000] [--containers 3]

For each N, N realistic pods (`realistic_pod`: a training pod of a Deployment as the API server
returns it — `--containers` containers with env, mounts, probes and resources, an init
container, volumes, tolerations, affinity, managedFields, a status with conditions and container
statuses, two gpudra claims) are served by an in-memory `Store` as the API server would: list
pages of 500 decoded from JSON (as `ApiStore` decodes each page), then a watch that stays open.
The informer (`gpudra_kube.informer`) runs as the claim-writer runs it — without a transform and
with `gpudra_claim_writer.claims.slim_pod` — until it has listed everything (SYNCED) and is
waiting in its watch; the bench then reports what `tracemalloc` counts as allocated and still
held, after a garbage collection, less what was held before the informer started (the served
JSON is held throughout and so not counted). Columns: MiB held, KiB per pod, and the ratio
whole/slim; the last line projects both to 100k pods (a 5,000-node cluster) by the per-pod
figure of the largest N. The figures are Python heap bytes, not RSS: the allocator's free lists
and fragmentation come on top of both. The standalone claim-writer runs two pod informers
(`gates`, `consumers`); this measures one. `ServedPods.list` transforms each page before it
decodes the next, as `ApiStore.list` does.

    python bench/pod_informer_memory.py --list [--pods 1000 5000] [--before DIR]

The peak of a (re)list instead, through the real `ApiStore` (pages of 500, as deployed) against
the fake API server (`gpudra_testing.kubeapi`, run in a process of its own, so that `tracemalloc`
counts the client only): an informer lists N pods until SYNCED, without a transform and with
`slim_pod`; reported are `tracemalloc`'s peak during that, and what the slim informer holds
after it, less what was held before. `--before DIR` measures another checkout too, with this
same bench (e.g. `git archive HEAD | tar -x -C DIR` before a change), and prints the ratio.

Figures (CPython 3.11, 2 cores, `--containers 3`, 12.8 KiB of JSON a pod). `--list`, before:
492047d (`ApiStore.list` built every page into one list, then the informer transformed it),
after: the list transforms each page before it fetches the next:

       pods  whole peak  slim peak  slim held  slim peak before  before/after
       1000     72.0MiB    43.3MiB     8.5MiB           72.0MiB          1.7x
       5000    310.0MiB    51.8MiB    17.3MiB          310.0MiB          6.0x
      10000    607.6MiB    62.5MiB    28.3MiB     (not run; it equalled the whole peak above)

The slim peak is what the slim informer holds plus about 35 MiB, whatever N: one page of whole
pods (500 x 61 KiB) and its JSON; what it holds grows by 2.2 KiB a pod (plus 6 MiB). At 100k pods:
before about 6.1 GiB (310 MiB / 5,000 pods), after about 35 + 6 + 100k x 2.2 KiB = 0.26 GiB.

Default mode (held once watching; the peak columns were 302.8 MiB both before, at 5,000 pods):

       pods  JSON/pod      whole      slim  whole/pod  slim/pod   ratio  peak whole  peak slim
       1000   12.8KiB    59.4MiB   2.21MiB   60.83KiB  2.268KiB   26.8x     65.6MiB    37.0MiB
       5000   12.8KiB   297.0MiB  11.02MiB   60.82KiB  2.257KiB   26.9x    302.8MiB    45.6MiB
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import multiprocessing
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import AsyncIterator, Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

if __package__ in (None, "") and "gpudra_kube" not in sys.modules:  # pragma: no cover
    # `python bench/pod_informer_memory.py` from a checkout: the source roots, as Pants has them
    _ROOT = Path(__file__).resolve().parent.parent
    for _root in ("libs", "services/claim-writer", "proto/gen", "proto"):
        sys.path.insert(0, str(_ROOT / _root))

from gpudra_claim_writer.claims import slim_pod
from gpudra_kube.informer import informer
from gpudra_kube.resources import PODS, KubeObject, Resource
from gpudra_kube.store import EventType, ObjectList, WatchEvent

PAGE = 500  # `ApiStore`'s list page size: one JSON document decoded per page
PROJECTED_PODS = 100_000

Transform = Callable[[KubeObject], KubeObject] | None


def _container(name: str, index: int) -> dict[str, Any]:
    return {
        "name": name,
        "image": f"nvcr.io/nvidia/pytorch:24.0{index}-py3",
        "imagePullPolicy": "IfNotPresent",
        "command": ["torchrun"],
        "args": ["--nproc-per-node=8", "--rdzv-backend=c10d", "train.py", "--config=/cfg/a.yaml"],
        "env": [
            {"name": f"ENV_{k}", "value": f"value-{k}-of-a-typical-training-configuration"}
            for k in range(12)
        ]
        + [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        ],
        "ports": [{"name": "metrics", "containerPort": 9400 + index, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": "16", "memory": "128Gi"},
            "limits": {"cpu": "32", "memory": "256Gi"},
            "claims": [{"name": "gpus"}],
        },
        "volumeMounts": [
            {"name": "data", "mountPath": "/data"},
            {"name": "cfg", "mountPath": "/cfg", "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {
                "name": "kube-api-access",
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "readOnly": True,
            },
        ],
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
            "initialDelaySeconds": 30,
            "periodSeconds": 10,
            "timeoutSeconds": 1,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
            "periodSeconds": 5,
            "timeoutSeconds": 1,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }


def _container_status(name: str, index: int) -> dict[str, Any]:
    return {
        "name": name,
        "ready": True,
        "restartCount": 0,
        "started": True,
        "image": f"nvcr.io/nvidia/pytorch:24.0{index}-py3",
        "imageID": "nvcr.io/nvidia/pytorch@sha256:" + f"{index:x}" * 64,
        "containerID": "containerd://" + f"{index + 7:x}" * 64,
        "state": {"running": {"startedAt": "2026-11-30T01:03:00Z"}},
    }


def realistic_pod(i: int, containers: int = 3) -> dict[str, Any]:
    """Pod `i` of a training Deployment, as the API server returns it (see the docstring)."""
    name = f"trainer-7d9c5b8f4-{i:06d}"
    uid = f"{i:08x}-1b2c-4d5e-8f90-{i:012x}"
    names = [f"worker-{c}" for c in range(containers)]
    return {
        "metadata": {
            "name": name,
            "generateName": "trainer-7d9c5b8f4-",
            "namespace": "ml-team-a",
            "uid": uid,
            "resourceVersion": str(100_000 + i),
            "creationTimestamp": "2026-11-30T01:02:03Z",
            "labels": {
                "app.kubernetes.io/name": "trainer",
                "app.kubernetes.io/part-of": "llm-pretraining",
                "pod-template-hash": "7d9c5b8f4",
                "team": "ml-team-a",
            },
            "annotations": {
                "kubectl.kubernetes.io/restartedAt": "2026-11-29T22:00:00Z",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9400",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "trainer-7d9c5b8f4",
                    "uid": "5a6b7c8d-0000-4000-8000-000000000001",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": manager,
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-30T01:03:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        f"f:{section}": {
                            f"f:{field}": {} for field in ("a", "b", "c", "d", "e", "f", "g", "h")
                        }
                        for section in ("metadata", "spec", "status")
                    },
                    **({"subresource": "status"} if manager == "kubelet" else {}),
                }
                for manager in ("kube-controller-manager", "kubelet", "gpudra-claim-writer")
            ],
        },
        "spec": {
            "initContainers": [
                {
                    "name": "fetch-dataset",
                    "image": "registry.example.com/tools/fetch:1.4.2",
                    "args": ["--to=/data", "--shard", str(i)],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
            "containers": [_container(n, c) for c, n in enumerate(names)],
            "volumes": [
                {"name": "data", "emptyDir": {}},
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
                {"name": "cfg", "configMap": {"name": "trainer-config", "defaultMode": 420}},
                {
                    "name": "kube-api-access",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ],
                    },
                },
            ],
            "resourceClaims": [
                {"name": "gpus", "resourceClaimTemplateName": "eight-h100"},
                {"name": "nic", "resourceClaimName": "shared-rdma-nic"},
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "trainer",
            "nodeName": f"dgx-h100-{i % 5000:04d}",
            "schedulerName": "default-scheduler",
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "x"}},
                                "topologyKey": "kubernetes.io/hostname",
                            },
                        }
                    ]
                }
            },
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": kind, "status": "True", "lastTransitionTime": "2026-11-30T01:03:00Z"}
                for kind in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
            "hostIP": "10.0.12.34",
            "hostIPs": [{"ip": "10.0.12.34"}],
            "podIP": f"10.244.{i // 250 % 256}.{i % 250}",
            "podIPs": [{"ip": f"10.244.{i // 250 % 256}.{i % 250}"}],
            "startTime": "2026-11-30T01:02:10Z",
            "initContainerStatuses": [_container_status("fetch-dataset", 9)],
            "containerStatuses": [_container_status(n, c) for c, n in enumerate(names)],
            "qosClass": "Burstable",
            "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": f"{name}-gpus-x7k2q"}],
        },
    }


class ServedPods:
    """A `Store` with only what the informer calls: a list served from JSON pages, and a watch
    that stays open until the bench is done."""

    def __init__(self, pods: int, containers: int) -> None:
        self.pages = [
            json.dumps(
                {
                    "metadata": {"resourceVersion": str(200_000)},
                    "items": [
                        realistic_pod(i, containers) for i in range(start, min(start + PAGE, pods))
                    ],
                }
            ).encode()
            for start in range(0, pods, PAGE)
        ]
        self.watching = asyncio.Event()

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        transform: Transform = None,
    ) -> ObjectList:
        # As `ApiStore` does: each page's objects transformed before the next page is decoded.
        items: list[KubeObject] = []
        for page in self.pages:
            for item in json.loads(page)["items"]:
                item.setdefault("kind", resource.kind)
                item.setdefault("apiVersion", resource.api_version)
                items.append(transform(item) if transform is not None else item)
        return ObjectList(items, "200000")

    async def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str = "",
        timeout: float = 300.0,
    ) -> AsyncIterator[WatchEvent]:
        self.watching.set()
        await asyncio.Event().wait()  # open until cancelled
        yield WatchEvent(EventType.BOOKMARK, {}, resource_version)  # never reached


async def held_bytes(served: ServedPods, transform: Transform) -> tuple[int, int]:
    """(bytes the informer holds once listed and watching, peak bytes while it listed)."""
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    served.watching.clear()
    events = informer(served, PODS, transform=transform)  # type: ignore[arg-type]
    event = await anext(events)
    while event.type is not EventType.SYNCED:
        event = await anext(events)
    del event
    waiting = asyncio.ensure_future(anext(events))  # into its watch, as the service runs
    await served.watching.wait()
    gc.collect()
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    await events.aclose()  # type: ignore[attr-defined]
    return held - before, peak - before


async def measure(pods: int, containers: int) -> dict[str, float]:
    served = ServedPods(pods, containers)
    whole, whole_peak = await held_bytes(served, None)
    slim, slim_peak = await held_bytes(served, slim_pod)
    json_bytes = sum(len(p) for p in served.pages) / pods
    return {
        "pods": pods,
        "json_kib_per_pod": json_bytes / 1024,
        "whole_mib": whole / 2**20,
        "slim_mib": slim / 2**20,
        "whole_kib_per_pod": whole / pods / 1024,
        "slim_kib_per_pod": slim / pods / 1024,
        "ratio": whole / slim if slim > 0 else float("inf"),
        "whole_peak_mib": whole_peak / 2**20,
        "slim_peak_mib": slim_peak / 2**20,
    }


def table(rows: list[dict[str, float]]) -> str:
    lines = [
        f"{'pods':>7} {'JSON/pod':>9} {'whole':>10} {'slim':>9} {'whole/pod':>10} "
        f"{'slim/pod':>9} {'ratio':>7} {'peak whole':>11} {'peak slim':>10}"
    ]
    for r in rows:
        lines.append(
            f"{int(r['pods']):>7} {r['json_kib_per_pod']:>6.1f}KiB {r['whole_mib']:>7.1f}MiB "
            f"{r['slim_mib']:>6.2f}MiB {r['whole_kib_per_pod']:>7.2f}KiB "
            f"{r['slim_kib_per_pod']:>6.3f}KiB {r['ratio']:>6.1f}x {r['whole_peak_mib']:>8.1f}MiB "
            f"{r['slim_peak_mib']:>7.1f}MiB"
        )
    last = rows[-1]
    lines.append(
        f"at {PROJECTED_PODS:,} pods: whole "
        f"{last['whole_kib_per_pod'] * PROJECTED_PODS / 2**20:.2f} GiB, slim "
        f"{last['slim_kib_per_pod'] * PROJECTED_PODS / 2**10:.0f} MiB (per pod, at "
        f"{int(last['pods'])} pods)"
    )
    return "\n".join(lines)


# -- the peak of a list through `ApiStore` ---------------------------------------------------------


def _serve(pods: int, containers: int, kubeconfig: str, conn: Connection) -> None:
    """The fake API server with `pods` realistic pods, in a process of its own (so that
    `tracemalloc` in the measuring process counts the client only); serves until told to stop."""
    asyncio.run(_serving(pods, containers, Path(kubeconfig), conn))


async def _serving(pods: int, containers: int, kubeconfig: Path, conn: Connection) -> None:
    from gpudra_testing.kubeapi import FakeKubeApi

    async with FakeKubeApi(validate_version=None, bookmark_interval=60.0) as api:
        for i in range(pods):
            await api.put(PODS, realistic_pod(i, containers))
        api.write_kubeconfig(kubeconfig)
        conn.send("ready")
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # "stop"


async def _list_peak(kubeconfig: Path, transform: Transform) -> tuple[int, int]:
    """(peak bytes while an informer on `ApiStore` listed every pod, bytes held once listed)."""
    from gpudra_kube.api_backend import ApiStore

    store = await ApiStore.from_kubeconfig(str(kubeconfig))  # pages of 500, as deployed
    try:
        await store.list(PODS, "warm-up")  # the API class and the connection, out of the count
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        events = informer(store, PODS, transform=transform)
        try:
            event = await anext(events)
            while event.type is not EventType.SYNCED:
                event = await anext(events)
            del event
            peak = tracemalloc.get_traced_memory()[1]
            gc.collect()
            held = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
            await events.aclose()  # type: ignore[attr-defined]
    finally:
        await store.close()
    return peak - before, held - before


def list_peaks(pods: int, containers: int) -> dict[str, float]:
    """The peak of a list of `pods` pods through the real `ApiStore` against the fake API
    (`gpudra_testing.kubeapi`, served from another process), whole and with `slim_pod`."""
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        ours, theirs = context.Pipe()
        server = context.Process(target=_serve, args=(pods, containers, str(kubeconfig), theirs))
        server.start()
        try:
            if not ours.poll(600) or ours.recv() != "ready":
                raise RuntimeError("the fake API server did not start")
            whole_peak, whole_held = asyncio.run(_list_peak(kubeconfig, None))
            slim_peak, slim_held = asyncio.run(_list_peak(kubeconfig, slim_pod))
        finally:
            ours.send("stop")
            server.join(30)
            if server.is_alive():
                server.kill()
    return {
        "pods": pods,
        "whole_peak_mib": whole_peak / 2**20,
        "slim_peak_mib": slim_peak / 2**20,
        "whole_held_mib": whole_held / 2**20,
        "slim_held_mib": slim_held / 2**20,
    }


def list_peaks_of(checkout: Path, pods: int, containers: int) -> dict[str, float]:
    """`list_peaks` with the source roots of another checkout (e.g. a copy of HEAD before a
    change), in a fresh interpreter; this bench module itself is this file."""
    roots = [str(checkout / r) for r in ("libs", "services/claim-writer", "proto/gen", "proto")]
    code = (
        "import json, sys\n"
        f"sys.path[:0] = {[*roots, str(Path(__file__).resolve().parent)]!r}\n"
        "import gpudra_kube  # the checkout's, before this bench adds its own roots\n"
        f"import {Path(__file__).stem} as bench\n"
        f"print(json.dumps(bench.list_peaks({pods}, {containers})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def list_table(before: list[dict[str, float]] | None, after: list[dict[str, float]]) -> str:
    lines = [
        f"{'pods':>7} {'whole peak':>11} {'slim peak':>10} {'slim held':>10}"
        + (f" {'slim peak before':>17} {'before/after':>13}" if before else "")
    ]
    for i, r in enumerate(after):
        line = (
            f"{int(r['pods']):>7} {r['whole_peak_mib']:>8.1f}MiB {r['slim_peak_mib']:>7.1f}MiB "
            f"{r['slim_held_mib']:>7.1f}MiB"
        )
        if before:
            b = before[i]
            ratio = b["slim_peak_mib"] / r["slim_peak_mib"] if r["slim_peak_mib"] > 0 else 0.0
            line += f" {b['slim_peak_mib']:>14.1f}MiB {ratio:>12.1f}x"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--containers", type=int, default=3)
    parser.add_argument(
        "--list",
        action="store_true",
        help="measure the peak of a list through ApiStore against the fake API instead",
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="with --list: a checkout (e.g. a copy of HEAD) to measure too, for a before/after",
    )
    args = parser.parse_args(argv)
    if args.list:
        after = [list_peaks(n, args.containers) for n in args.pods]
        before = (
            [list_peaks_of(args.before, n, args.containers) for n in args.pods]
            if args.before
            else None
        )
        print(list_table(before, after))
        return after
    rows = [asyncio.run(measure(n, args.containers)) for n in args.pods]
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
