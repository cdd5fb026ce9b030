"""A loopback Kubernetes API server for Node objects: ``GET`` and ``PUT`` (replace) of
``/api/v1/nodes/{name}``, with the API server's rules that the fencer depends on:

* 404 NotFound (a ``Status`` object) for a node that does not exist;
* ``PUT`` needs ``metadata.resourceVersion`` (422 otherwise) and answers 409 Conflict when it
  is not the stored one (optimistic concurrency: "the object has been modified");
* taints must be unique by key and effect, have a qualified-name key and one of the three
  effects; label keys are qualified names and values at most 63 characters (422 Invalid);
* the name in the body must be the one in the path (400 BadRequest);
* every successful write bumps a server-wide resourceVersion.

``after_get`` hooks run when a GET was read, before its answer is sent: a test uses one to
change the node behind the fencer's back (another controller adding a label) and see the 409
it then gets.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

_NAME = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
QUALIFIED = re.compile(rf"^(({_PREFIX})/)?{_NAME}$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def node(name: str, *, labels: dict[str, str] | None = None,
         taints: list[dict[str, Any]] | None = None,
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": name, "labels": dict(labels or {})},
                           "spec": {}}
    if annotations:
        obj["metadata"]["annotations"] = dict(annotations)
    if taints:
        obj["spec"]["taints"] = [dict(t) for t in taints]
    return obj


class KubeApi:
    """The server's state; ``serve()`` starts it on a free loopback port."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, int]] = []  # method, path, status
        self.after_get: list[Callable[[str], None]] = []
        self._rv = 100
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def add(self, obj: dict[str, Any]) -> None:
        with self._lock:
            self._rv += 1
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self.nodes[obj["metadata"]["name"]] = obj

    def touch(self, name: str, **labels: str) -> None:
        """Another writer changes the node (a new resourceVersion)."""
        with self._lock:
            meta = self.nodes[name]["metadata"]
            meta.setdefault("labels", {}).update(labels)
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)

    def writes(self) -> list[tuple[str, str, int]]:
        return [r for r in self.requests if r[0] != "GET"]

    # -- validation, as the API server's ValidateNode / ValidateNodeUpdate ------------------

    @staticmethod
    def invalid(obj: dict[str, Any]) -> str | None:
        meta = obj.get("metadata") or {}
        for key, value in (meta.get("labels") or {}).items():
            if not QUALIFIED.match(key) or len(key.rsplit("/", 1)[-1]) > 63:
                return f"metadata.labels: Invalid value: {key!r}: name part must be ..."
            if not isinstance(value, str) or not LABEL_VALUE.match(value):
                return f"metadata.labels: Invalid value: {value!r}: a valid label must be ..."
        size = sum(len(k) + len(str(v)) for k, v in (meta.get("annotations") or {}).items())
        if size > 256 * 1024:
            return "metadata.annotations: Too long: must have at most 262144 bytes"
        seen: set[tuple[str, str]] = set()
        for i, taint in enumerate((obj.get("spec") or {}).get("taints") or []):
            key, effect = taint.get("key", ""), taint.get("effect", "")
            if not QUALIFIED.match(key):
                return f"spec.taints[{i}].key: Invalid value: {key!r}"
            if effect not in EFFECTS:
                return f"spec.taints[{i}].effect: Unsupported value: {effect!r}"
            value = taint.get("value")
            if value is not None and not LABEL_VALUE.match(value):
                return f"spec.taints[{i}].value: Invalid value: {value!r}"
            if (key, effect) in seen:
                return (f"spec.taints[{i}]: Duplicate value: {{{key!r} {effect!r}}}: "
                        "taints must be unique by key and effect pair")
            seen.add((key, effect))
        return None

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        m = re.fullmatch(r"/api/v1/nodes/([^/?]+)(\?.*)?", path)
        if m is None:
            return 404, status(404, "NotFound", "the server could not find the requested "
                                                "resource")
        name = m.group(1)
        with self._lock:
            current = self.nodes.get(name)
            if current is None:
                return 404, status(404, "NotFound", f'nodes "{name}" not found')
            if method == "GET":
                return 200, orjson.loads(orjson.dumps(current))
            if method != "PUT":
                return 405, status(405, "MethodNotAllowed", f"{method} is not served here")
            try:
                obj = orjson.loads(body)
            except orjson.JSONDecodeError:
                return 400, status(400, "BadRequest", "the body is not JSON")
            meta = obj.get("metadata") or {}
            if obj.get("kind", "Node") != "Node" or meta.get("name") != name:
                return 400, status(400, "BadRequest", "the name of the object "
                                                      f"({meta.get('name')}) does not match the "
                                                      f"name on the URL ({name})")
            rv = meta.get("resourceVersion")
            if not rv:
                return 422, status(422, "Invalid", "metadata.resourceVersion: Invalid value: "
                                                   "0x0: must be specified for an update")
            if rv != current["metadata"]["resourceVersion"]:
                return 409, status(409, "Conflict", f'Operation cannot be fulfilled on nodes '
                                                    f'"{name}": the object has been modified; '
                                                    "please apply your changes to the latest "
                                                    "version and try again")
            why = self.invalid(obj)
            if why is not None:
                return 422, status(422, "Invalid", f'Node "{name}" is invalid: {why}')
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            obj.setdefault("apiVersion", "v1")
            obj["kind"] = "Node"
            self.nodes[name] = obj
            return 200, orjson.loads(orjson.dumps(obj))

    # -- HTTP --------------------------------------------------------------------------------

    def serve(self) -> str:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _do(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                code, answer = api.handle(self.command, self.path, body)
                api.requests.append((self.command, self.path.split("?")[0], code))
                if self.command == "GET" and code == 200:
                    # before the answer leaves: the client's next request sees the change
                    for hook in list(api.after_get):
                        hook(self.path)
                raw = orjson.dumps(answer)
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_PUT = do_PATCH = do_POST = do_DELETE = _do  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def core_api(url: str) -> Any:
    """The official client's CoreV1Api pointed at ``url``."""
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = url
    return client.CoreV1Api(client.ApiClient(cfg))
