"""Where Kubernetes jobs run: the pods of a job, by label, and the nodes they are bound to.

``placements_from_pods`` is pure: a PodList as the API returns it (``GET /api/v1/pods``,
``kubectl get pods -o json``: ``items[].metadata.labels``, ``spec.nodeName``,
``spec.containers[].resources``, ``status.phase``, ``status.startTime``, RFC 3339 times) in,
one ``job`` placement per value of the job label out. ``list_pods`` fetches that PodList
through the official ``kubernetes`` client, raw (``_preload_content=False``) so the same
pure function reads what a saved ``kubectl`` file holds.

A Kubernetes node name is often the host's FQDN; the fabric names hosts by the short name
its HCAs' node descriptions carry, so the domain is dropped unless told otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from collectors.common import guarded, stable_id
from collectors.errors import ParseError
from schemas import JobPlacement, ts_to_ms

GPU_RESOURCE = "nvidia.com/gpu"
_RUNNING = "Running"
_DONE = frozenset({"Succeeded", "Failed"})


def _quantity(value: Any) -> int:
    """An extended-resource quantity (``"8"``, 8); GPUs are whole numbers."""
    if isinstance(value, bool):
        raise ParseError(None, None, f"resource quantity {value!r} is not a number")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise ParseError(None, None, f"GPU quantity {str(value)[:40]!r} is not a whole number")


def _pod_gpus(spec: Mapping[str, Any], resource: str) -> int:
    total = 0
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = resources.get("requests") or {}
        value = limits.get(resource, requests.get(resource))  # GPUs: limits == requests
        if value is not None:
            total += _quantity(value)
    return total


def _time_ms(value: Any, where: str) -> int:
    """A pod's RFC 3339 time as epoch ms; a time the API would never send is a ParseError."""
    try:
        return ts_to_ms(value)
    except ValueError as exc:
        raise ParseError(None, None, f"{where}: {exc}") from None


def _finished_ms(status: Mapping[str, Any]) -> int | None:
    ends = [_time_ms(state["terminated"]["finishedAt"], "containerStatuses.finishedAt")
            for cs in status.get("containerStatuses") or []
            if isinstance(state := cs.get("state"), dict)
            and isinstance(state.get("terminated"), dict)
            and state["terminated"].get("finishedAt")]
    return max(ends) if ends else None


def host_name(node: str, *, strip_domain: bool = True) -> str:
    return node.split(".", 1)[0] if strip_domain else node


@guarded
def placements_from_pods(pod_list: Mapping[str, Any], *, job_label: str, fabric: str,
                         ts: int, gpu_resource: str = GPU_RESOURCE,
                         strip_domain: bool = True) -> list[JobPlacement]:
    """One placement per (namespace, value of ``job_label``) among the pods bound to a node."""
    items = pod_list.get("items")
    if not isinstance(items, list):
        raise ParseError(None, None, "not a PodList: no 'items' list")
    jobs: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for index, pod in enumerate(items):
        if not isinstance(pod, dict):
            raise ParseError(None, None, f"items[{index}] is not an object")
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        value = labels.get(job_label)
        if not isinstance(value, str) or not value:
            continue
        jobs.setdefault((str(meta.get("namespace") or "default"), value), []).append(pod)
    out: list[JobPlacement] = []
    for (namespace, value), pods in sorted(jobs.items()):
        nodes: dict[str, int] = {}  # node -> GPUs the job's pods hold on it
        phases: set[str] = set()
        starts: list[int] = []
        ends: list[int] = []
        for pod in pods:
            spec = pod.get("spec") or {}
            status = pod.get("status") or {}
            node = spec.get("nodeName")
            phase = str(status.get("phase") or "Pending")
            if not isinstance(node, str) or not node:
                phases.add("Unscheduled")
                continue
            phases.add(phase)
            host = host_name(node, strip_domain=strip_domain)
            nodes[host] = nodes.get(host, 0) + _pod_gpus(spec, gpu_resource)
            if status.get("startTime"):
                starts.append(_time_ms(status["startTime"], "status.startTime"))
            if phase in _DONE and (finished := _finished_ms(status)) is not None:
                ends.append(finished)
        if not nodes:
            continue
        if _RUNNING in phases:
            state = "running"
        elif phases <= {"Succeeded"}:
            state = "completed"
        elif "Failed" in phases and phases <= _DONE:
            state = "failed"
        else:
            state = "pending"
        done = phases <= _DONE
        end = max(ends) if done and ends else None
        counts = set(nodes.values())
        gpus = counts.pop() if len(counts) == 1 else max(nodes.values())
        start = min(starts) if starts else None
        if start is not None and end is not None and end < start:
            end = None
        job = f"{namespace}/{value}"
        ident = stable_id("kubernetes", fabric, job, start, end, state, ",".join(nodes), gpus)
        out.append(JobPlacement(id=ident, ts=ts, fabric=fabric, source="kubernetes", job=job,
                                nodes=list(nodes), start=start, end=end,
                                gpus_per_node=gpus, state=state, name=value))
    return out


def parse_pod_list(text: str, *, job_label: str, fabric: str, ts: int) -> list[JobPlacement]:
    """A saved ``kubectl get pods -o json`` (a PodList) as placements."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ParseError(None, getattr(exc, "lineno", None), f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ParseError(None, None, "not a PodList: the document is not an object")
    return placements_from_pods(doc, job_label=job_label, fabric=fabric, ts=ts)


def list_pods(api: Any, *, job_label: str, namespace: str | None = None) -> dict[str, Any]:
    """The PodList of the pods carrying ``job_label`` through a ``kubernetes`` CoreV1Api.

    Raw JSON (``_preload_content=False``): the API's own field names, which
    ``placements_from_pods`` reads, rather than the client's snake_case models.
    """
    if not job_label or any(c.isspace() for c in job_label):
        raise ValueError(f"job label {job_label!r} is not a label key")
    selector = job_label  # "key" selects every pod that has the label, whatever its value
    if namespace:
        response = api.list_namespaced_pod(namespace, label_selector=selector,
                                           _preload_content=False)
    else:
        response = api.list_pod_for_all_namespaces(label_selector=selector,
                                                   _preload_content=False)
    doc = orjson.loads(response.data)
    if not isinstance(doc, dict):
        raise ValueError("the API server's pod list is not an object")
    return doc


def core_api(*, host: str | None = None) -> Any:
    """A CoreV1Api: in-cluster credentials in a pod, else the kubeconfig (or ``host``)."""
    from kubernetes import client, config

    if host is not None:
        configuration = client.Configuration()
        configuration.host = host
        return client.CoreV1Api(client.ApiClient(configuration))
    load_incluster: Any = config.load_incluster_config
    load_kube: Any = config.load_kube_config
    try:
        load_incluster()
    except config.ConfigException:
        load_kube()
    return client.CoreV1Api()
