"""Kubernetes node fencing: a label and a NoSchedule taint per isolated rail, official client.

An isolated port takes one rail of a node out; a training job needs every rail, so the
scheduler must not place new GPU jobs on that node until the port is back. The label
``fabricwatch.io/rail-<n>-isolated=true`` says why (dashboards, node selectors), the taint
``fabricwatch.io/rail-isolated=rail-<n>:NoSchedule`` keeps new pods off without evicting the
running ones (the operator decides about those).

Changes are read-modify-write with a JSON Patch that first tests ``resourceVersion``, so a
concurrent change by someone else is not overwritten (the API server answers 422 and the
activity retries with a fresh read). Each call says whether it changed anything.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from workflows.adapters.base import AdapterError, AdapterRejected

TAINT_KEY = "fabricwatch.io/rail-isolated"
_NODE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def rail_label(rail: int | None) -> str:
    return f"fabricwatch.io/rail-{rail if rail is not None else 'unknown'}-isolated"


def _rail_value(rail: int | None) -> str:
    return f"rail-{rail if rail is not None else 'unknown'}"


def _escape(key: str) -> str:
    # JSON Pointer escaping (RFC 6901) for a label key in a patch path
    return key.replace("~", "~0").replace("/", "~1")


class K8sNodeFencer:
    """``NodeFencer`` over ``kubernetes.client.CoreV1Api`` (synchronous; run in a thread)."""

    def __init__(self, api: Any) -> None:
        self._api = api

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None
                        ) -> K8sNodeFencer:
        from kubernetes import client, config

        # the kubernetes config loaders carry no annotations
        load_incluster: Any = config.load_incluster_config
        load_kube: Any = config.load_kube_config
        if path is None and context is None:
            try:
                load_incluster()
            except config.ConfigException:
                load_kube()
        else:
            load_kube(config_file=path, context=context)
        return cls(client.CoreV1Api())

    @staticmethod
    def _check(node: str) -> None:
        if not _NODE.match(node):
            raise AdapterRejected(f"{node!r} is not a Kubernetes node name")

    def _read(self, node: str) -> tuple[str, dict[str, str], list[dict[str, Any]]]:
        from kubernetes.client.exceptions import ApiException

        try:
            obj = self._api.read_node(node)
        except ApiException as exc:
            if exc.status == 404:
                raise AdapterRejected(f"node {node} does not exist") from None
            raise AdapterError(f"read node {node}: HTTP {exc.status}") from None
        meta = obj.metadata
        labels = dict(meta.labels or {})
        taints = [{"key": t.key, "value": t.value, "effect": t.effect}
                  for t in (obj.spec.taints or [] if obj.spec else [])]
        return str(meta.resource_version or ""), labels, taints

    def _patch(self, node: str, ops: list[dict[str, Any]]) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._api.patch_node(node, ops, _content_type="application/json-patch+json")
        except ApiException as exc:
            msg = f"patch node {node}: HTTP {exc.status}"
            if exc.status in (409, 422, 429) or exc.status >= 500:
                raise AdapterError(msg) from None  # a concurrent change: read again and retry
            raise AdapterRejected(msg) from None

    def _fence(self, node: str, rail: int | None, reason: str) -> bool:
        self._check(node)
        rv, labels, taints = self._read(node)
        label = rail_label(rail)
        taint = {"key": TAINT_KEY, "value": _rail_value(rail), "effect": "NoSchedule"}
        has_label = labels.get(label) == "true"
        has_taint = any(t == taint for t in taints)
        if has_label and has_taint:
            return False
        ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion",
                                      "value": rv}]
        if not labels:
            ops.append({"op": "add", "path": "/metadata/labels", "value": {label: "true"}})
        elif not has_label:
            ops.append({"op": "add", "path": f"/metadata/labels/{_escape(label)}",
                        "value": "true"})
        if not has_taint:
            ops.append({"op": "add", "path": "/spec/taints", "value": [*taints, taint]})
        self._patch(node, ops)
        return True

    def _unfence(self, node: str, rail: int | None) -> bool:
        self._check(node)
        rv, labels, taints = self._read(node)
        label = rail_label(rail)
        kept = [t for t in taints
                if not (t["key"] == TAINT_KEY and t["value"] == _rail_value(rail))]
        if label not in labels and len(kept) == len(taints):
            return False
        ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion",
                                      "value": rv}]
        if label in labels:
            ops.append({"op": "remove", "path": f"/metadata/labels/{_escape(label)}"})
        if len(kept) != len(taints):
            ops.append({"op": "add", "path": "/spec/taints", "value": kept})
        self._patch(node, ops)
        return True

    async def fence(self, node: str, rail: int | None, reason: str) -> bool:
        return await asyncio.to_thread(self._fence, node, rail, reason)

    async def unfence(self, node: str, rail: int | None) -> bool:
        return await asyncio.to_thread(self._unfence, node, rail)


class NoFencer:
    """For fabrics without Kubernetes: fencing is recorded as skipped."""

    enabled = False

    async def fence(self, node: str, rail: int | None, reason: str) -> bool:
        return False

    async def unfence(self, node: str, rail: int | None) -> bool:
        return False
