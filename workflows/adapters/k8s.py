"""Kubernetes node fencing: a label and a NoSchedule taint per isolated rail, official client.

An isolated port takes one rail of a node out; a training job needs every rail, so the
scheduler must not place new GPU jobs on that node until the port is back. Each rail has its
own key, ``fabricwatch.io/rail-<k>``, used three times on the node:

* the taint ``fabricwatch.io/rail-<k>=isolated:NoSchedule`` keeps new pods off without
  evicting the running ones (the operator decides about those). The API server refuses two
  taints with one key and effect (422), so one shared key could never fence two rails;
* the label ``fabricwatch.io/rail-<k>=isolated`` says why (dashboards, node selectors);
* the annotation ``fabricwatch.io/rail-<k>`` records that fabricwatch put them there, and
  for which port. ``unfence`` removes a label or taint only when that annotation is present
  and the value is fabricwatch's: a taint or label with the key that someone else set (an
  operator draining rail 3 by hand) is never touched, and ``fence`` then claims nothing.

Changes are a read, then ``replace`` (PUT) of the whole node with the ``resourceVersion`` that
was read: the API server answers 409 Conflict when the node changed in between (the
kubelet's status updates bump it too, and other controllers label and taint), and the fencer
reads again and retries a few times before it gives up with a retryable error.
Each call says whether it changed anything.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from workflows.adapters.base import AdapterError, AdapterRejected

PREFIX = "fabricwatch.io/"
VALUE = "isolated"
EFFECT = "NoSchedule"
# Keys of the first fencer (one shared taint key), removed when their rail is unfenced.
LEGACY_TAINT_KEY = "fabricwatch.io/rail-isolated"
_NODE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
CONFLICT_RETRIES = 5


def rail_key(rail: int | None) -> str:
    """The rail's one key: taint key, label key and ownership annotation."""
    if rail is not None and (isinstance(rail, bool) or not 0 <= int(rail) <= 4095):
        raise AdapterRejected(f"rail {rail!r} is not a rail number")
    return f"{PREFIX}rail-{int(rail) if rail is not None else 'unknown'}"


def rail_taint(rail: int | None) -> dict[str, str]:
    return {"key": rail_key(rail), "value": VALUE, "effect": EFFECT}


def _legacy_label(rail: int | None) -> str:
    return f"{PREFIX}rail-{rail if rail is not None else 'unknown'}-isolated"


def _legacy_value(rail: int | None) -> str:
    return f"rail-{rail if rail is not None else 'unknown'}"


class K8sNodeFencer:
    """``NodeFencer`` over ``kubernetes.client.CoreV1Api`` (synchronous; run in a thread)."""

    def __init__(self, api: Any, *, conflict_retries: int = CONFLICT_RETRIES) -> None:
        self._api = api
        self._retries = conflict_retries

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

    def _read(self, node: str) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return self._api.read_node(node)
        except ApiException as exc:
            if exc.status == 404:
                raise AdapterRejected(f"node {node} does not exist") from None
            raise AdapterError(f"read node {node}: HTTP {exc.status}") from None

    def _replace(self, node: str, obj: Any) -> bool:
        """PUT the node; False on 409 (changed since our read: read again)."""
        from kubernetes.client.exceptions import ApiException

        try:
            self._api.replace_node(node, obj)
        except ApiException as exc:
            if exc.status == 409:
                return False
            msg = f"replace node {node}: HTTP {exc.status}: {_reason(exc)}"
            if exc.status == 404:
                raise AdapterRejected(f"node {node} does not exist") from None
            if exc.status == 429 or exc.status >= 500:
                raise AdapterError(msg) from None
            raise AdapterRejected(msg) from None  # 422 and the like: the request is wrong
        return True

    def _update(self, node: str, change: Any) -> bool:
        """Read, let ``change(obj)`` edit it (None: nothing to do), replace; retry on 409."""
        self._check(node)
        for _ in range(self._retries):
            obj = self._read(node)
            if not change(obj):
                return False
            if self._replace(node, obj):
                return True
        raise AdapterError(f"node {node}: still conflicting after {self._retries} attempts")

    def _fence(self, node: str, rail: int | None, reason: str) -> bool:
        key = rail_key(rail)

        def change(obj: Any) -> bool:
            meta, spec = obj.metadata, _spec(obj)
            labels = dict(meta.labels or {})
            notes = dict(meta.annotations or {})
            taints = list(spec.taints or [])
            ours = key in notes
            same_key = [t for t in taints if t.key == key and t.effect == EFFECT]
            if not ours and (same_key or key in labels):
                return False  # someone else fenced this rail: leave it theirs, claim nothing
            want_taint = not any(t.value == VALUE for t in same_key)
            want_label = labels.get(key) != VALUE
            if ours and not want_taint and not want_label:
                return False
            from kubernetes.client import V1Taint

            if want_taint:
                spec.taints = [t for t in taints if not (t.key == key and t.effect == EFFECT)]
                spec.taints.append(V1Taint(key=key, value=VALUE, effect=EFFECT))
            labels[key] = VALUE
            notes[key] = reason[:1000] or "fabricwatch"
            meta.labels, meta.annotations = labels, notes
            return True

        return self._update(node, change)

    def _unfence(self, node: str, rail: int | None) -> bool:
        key = rail_key(rail)
        legacy_label = _legacy_label(rail)

        def change(obj: Any) -> bool:
            meta, spec = obj.metadata, _spec(obj)
            labels = dict(meta.labels or {})
            notes = dict(meta.annotations or {})
            taints = list(spec.taints or [])

            def ours(t: Any) -> bool:
                if t.key == LEGACY_TAINT_KEY:  # the first fencer's shared key
                    return bool(t.value == _legacy_value(rail))
                return key in notes and t.key == key and t.effect == EFFECT \
                    and t.value == VALUE

            kept = [t for t in taints if not ours(t)]
            changed = len(kept) != len(taints)
            if key in notes and labels.get(key) == VALUE:
                del labels[key]
                changed = True
            if labels.get(legacy_label) == "true":
                del labels[legacy_label]
                changed = True
            if key in notes:
                del notes[key]
                changed = True
            if not changed:
                return False
            spec.taints = kept or None
            meta.labels, meta.annotations = labels, notes
            return True

        return self._update(node, change)

    async def fence(self, node: str, rail: int | None, reason: str) -> bool:
        return await asyncio.to_thread(self._fence, node, rail, reason)

    async def unfence(self, node: str, rail: int | None) -> bool:
        return await asyncio.to_thread(self._unfence, node, rail)

    async def fenced_rails(self, node: str) -> dict[int | None, str]:
        """The rails fabricwatch fenced on ``node`` (from its annotations) and why."""
        def read() -> dict[int | None, str]:
            self._check(node)
            notes = self._read(node).metadata.annotations or {}
            out: dict[int | None, str] = {}
            for k, v in notes.items():
                m = re.fullmatch(r"fabricwatch\.io/rail-(\d+|unknown)", k)
                if m:
                    out[None if m.group(1) == "unknown" else int(m.group(1))] = str(v)
            return out

        return await asyncio.to_thread(read)


def _spec(obj: Any) -> Any:
    if obj.spec is None:
        from kubernetes.client import V1NodeSpec

        obj.spec = V1NodeSpec()
    return obj.spec


def _reason(exc: Any) -> str:
    # the API server's Status message (names the field); never a credential
    body = getattr(exc, "body", None) or ""
    return str(body)[:300]


class NoFencer:
    """For fabrics without Kubernetes: fencing is recorded as skipped."""

    enabled = False

    async def fence(self, node: str, rail: int | None, reason: str) -> bool:
        return False

    async def unfence(self, node: str, rail: int | None) -> bool:
        return False
