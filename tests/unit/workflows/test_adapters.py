"""Adapters against loopback HTTP servers that follow each product's documented API:
UFM's unhealthy-ports REST API, SONiC's RESTCONF interface admin state, the Kubernetes node
API (through the official client), and the ticket webhook. The servers check what they are
sent (paths, bodies, auth) the way the product would, so a wrong request fails the test."""

from __future__ import annotations

import base64
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest
from aiohttp import web
from pydantic import SecretStr

from workflows.adapters.base import AdapterError, AdapterRejected
from workflows.adapters.k8s import TAINT_KEY, K8sNodeFencer, rail_label
from workflows.adapters.sonic import SonicController
from workflows.adapters.ticket import WebhookTicketing
from workflows.adapters.ufm import UfmController, ufm_port_name
from workflows.remediation.models import PortRef

GUID = "0x248a0703002e628e"
PORT = PortRef(fabric="lab", device="leaf-su01-r1", port=17, guid=GUID, su="su01", rail=1)


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# --- UFM ------------------------------------------------------------------------------------

class FakeUfm:
    """UFM's unhealthy ports: GET list (v1 path), PUT changes (v2 path), basic auth."""

    def __init__(self) -> None:
        self.unhealthy: set[str] = set()
        self.puts: list[dict[str, Any]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/ufmRest/app/unhealthy_ports", self.list)
        app.router.add_put("/ufmRestV2/app/unhealthy_ports", self.change)
        return app

    def _auth(self, request: web.Request) -> None:
        if request.headers.get("Authorization") != basic("admin", "s3cret"):
            raise web.HTTPUnauthorized()

    async def list(self, request: web.Request) -> web.Response:
        self._auth(request)
        return web.json_response([
            {"UnhealthyGUID": name.split("_")[0], "UnhealthyPortNumber": int(name.split("_")[1]),
             "PeerGUID": "248a070300f88fe0", "Condition": "MANUAL", "State": "Info"}
            for name in sorted(self.unhealthy)])

    async def change(self, request: web.Request) -> web.Response:
        self._auth(request)
        body = await request.json()
        self.puts.append(body)
        if body.get("ports_policy") == "UNHEALTHY":
            if body.get("action") != "isolate":
                return web.json_response({"error": "unsupported action"}, status=400)
            self.unhealthy.update(body["ports"])
        elif body.get("ports_policy") == "HEALTHY":
            self.unhealthy.difference_update(body["ports"])
        else:
            return web.json_response({"error": "bad ports_policy"}, status=400)
        return web.Response(status=200)


@pytest.fixture
async def ufm() -> AsyncIterator[tuple[FakeUfm, str]]:
    fake = FakeUfm()
    runner, url = await serve(fake.app())
    yield fake, url
    await runner.cleanup()


async def test_ufm_isolate_is_idempotent_and_follows_the_api(ufm: tuple[FakeUfm, str]) -> None:
    fake, url = ufm
    ctl = UfmController(url, "admin", SecretStr("s3cret"))
    try:
        assert not await ctl.is_isolated(PORT)
        assert await ctl.isolate(PORT) is True
        assert await ctl.isolate(PORT) is False  # a retry changes nothing
        assert fake.puts == [{"ports": ["248a0703002e628e_17"], "ports_policy": "UNHEALTHY",
                              "action": "isolate"}]
        assert await ctl.is_isolated(PORT)
        assert await ctl.unisolate(PORT) is True
        assert await ctl.unisolate(PORT) is False
        assert fake.puts[-1] == {"ports": ["248a0703002e628e_17"], "ports_policy": "HEALTHY"}
        assert not await ctl.is_isolated(PORT)
    finally:
        await ctl.aclose()


async def test_ufm_wrong_password_is_a_rejection_without_the_secret(
        ufm: tuple[FakeUfm, str]) -> None:
    _, url = ufm
    ctl = UfmController(url, "admin", SecretStr("wrong-password-xyz"))
    try:
        with pytest.raises(AdapterRejected) as info:
            await ctl.isolate(PORT)
        assert "401" in str(info.value) and "wrong-password-xyz" not in str(info.value)
    finally:
        await ctl.aclose()


def test_ufm_port_names() -> None:
    assert ufm_port_name(PORT) == "248a0703002e628e_17"
    assert ufm_port_name(PORT.model_copy(update={"guid": "2E628E", "port": 1})) == \
        "00000000002e628e_1"
    for guid in (None, "0xZZ", "x; rm -rf /"):
        with pytest.raises(AdapterRejected):
            ufm_port_name(PORT.model_copy(update={"guid": guid}))


async def test_ufm_unreachable_is_retryable() -> None:
    ctl = UfmController("http://127.0.0.1:9", "admin", SecretStr("x"), timeout_s=2)
    try:
        with pytest.raises(AdapterError) as info:
            await ctl.isolate(PORT)
        assert not isinstance(info.value, AdapterRejected)
    finally:
        await ctl.aclose()


# --- SONiC ----------------------------------------------------------------------------------

class FakeSonic:
    """RESTCONF openconfig-interfaces admin state of a SONiC switch."""

    PREFIX = "/restconf/data/openconfig-interfaces:interfaces/interface="

    def __init__(self) -> None:
        self.enabled: dict[str, bool] = {"Ethernet17": True}
        self.patches: list[tuple[str, Any]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != basic("admin", "YourPaSsWoRd"):
            return web.Response(status=401)
        path = request.path
        if not path.startswith(self.PREFIX) or not path.endswith("/config/enabled"):
            return web.json_response({"ietf-restconf:errors": {}}, status=404)
        name = path[len(self.PREFIX):-len("/config/enabled")]
        if name not in self.enabled:
            return web.json_response({"ietf-restconf:errors": {}}, status=404)
        if request.method == "GET":
            return web.json_response({"openconfig-interfaces:enabled": self.enabled[name]})
        if request.method == "PATCH":
            assert request.headers["Content-Type"] == "application/yang-data+json"
            body = await request.json()
            self.patches.append((name, body))
            self.enabled[name] = bool(body["openconfig-interfaces:enabled"])
            return web.Response(status=204)
        return web.Response(status=405)


async def test_sonic_shutdown_and_startup() -> None:
    fake = FakeSonic()
    runner, url = await serve(fake.app())
    ctl = SonicController(url, "admin", SecretStr("YourPaSsWoRd"))
    try:
        assert await ctl.isolate(PORT) is True
        assert await ctl.isolate(PORT) is False
        assert fake.patches == [("Ethernet17", {"openconfig-interfaces:enabled": False})]
        assert await ctl.is_isolated(PORT)
        assert await ctl.unisolate(PORT) is True
        assert fake.enabled["Ethernet17"] is True
        with pytest.raises(AdapterRejected):  # 404: no such interface
            await ctl.isolate(PORT.model_copy(update={"port": 99}))
        bad = SonicController(url, "admin", SecretStr("x"), interface_template="Eth{device}")
        with pytest.raises(AdapterRejected):  # a device name is not an interface name
            bad.interface(PORT.model_copy(update={"device": "a b;c"}))
        await bad.aclose()
    finally:
        await ctl.aclose()
        await runner.cleanup()


# --- Kubernetes -----------------------------------------------------------------------------

class FakeKubeApi(BaseHTTPRequestHandler):
    """GET/PATCH /api/v1/nodes/{name} with RFC 6902 JSON Patch, including the ``test`` op."""

    nodes: dict[str, dict[str, Any]] = {}
    patches: list[Any] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: Any) -> None:
        raw = orjson.dumps(body)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _node(self) -> tuple[str, dict[str, Any] | None]:
        name = self.path.split("?")[0].rsplit("/", 1)[-1]
        return name, self.nodes.get(name)

    def do_GET(self) -> None:  # noqa: N802
        name, node = self._node()
        if node is None:
            self._send(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
        else:
            self._send(200, node)

    def do_PATCH(self) -> None:  # noqa: N802
        name, node = self._node()
        if node is None:
            self._send(404, {"kind": "Status", "code": 404})
            return
        if self.headers["Content-Type"] != "application/json-patch+json":
            self._send(415, {"kind": "Status", "code": 415})
            return
        ops = orjson.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.patches.append(ops)
        for op in ops:
            parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
            parent = node
            for p in parts[:-1]:
                parent = parent.setdefault(p, {})
            if op["op"] == "test":
                if parent.get(parts[-1]) != op["value"]:
                    self._send(422, {"kind": "Status", "code": 422})
                    return
            elif op["op"] == "add":
                parent[parts[-1]] = op["value"]
            elif op["op"] == "remove":
                del parent[parts[-1]]
        node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
        self._send(200, node)


@pytest.fixture
def kube() -> Iterator[str]:
    FakeKubeApi.nodes = {"node0001": {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node0001", "resourceVersion": "7", "labels": {"zone": "a"}},
        "spec": {"taints": [{"key": "other", "value": "x", "effect": "NoExecute"}]}}}
    FakeKubeApi.patches = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeKubeApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def core_api(url: str) -> Any:
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = url
    return client.CoreV1Api(client.ApiClient(cfg))


async def test_k8s_label_and_taint_the_rail(kube: str) -> None:
    fencer = K8sNodeFencer(core_api(kube))
    node = FakeKubeApi.nodes["node0001"]
    assert await fencer.fence("node0001", 3, "leaf-su01-r3:17 isolated") is True
    assert node["metadata"]["labels"] == {"zone": "a", rail_label(3): "true"}
    assert {"key": TAINT_KEY, "value": "rail-3", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert {"key": "other", "value": "x", "effect": "NoExecute"} in node["spec"]["taints"]
    assert await fencer.fence("node0001", 3, "again") is False  # idempotent
    assert len(FakeKubeApi.patches) == 1
    assert FakeKubeApi.patches[0][0] == {"op": "test", "path": "/metadata/resourceVersion",
                                         "value": "7"}
    assert await fencer.unfence("node0001", 3) is True
    assert node["metadata"]["labels"] == {"zone": "a"}
    assert node["spec"]["taints"] == [{"key": "other", "value": "x", "effect": "NoExecute"}]
    assert await fencer.unfence("node0001", 3) is False
    with pytest.raises(AdapterRejected):
        await fencer.fence("nope", 1, "x")  # 404
    with pytest.raises(AdapterRejected):
        await fencer.fence("Bad_Name;", 1, "x")  # not a node name: never sent


async def test_k8s_concurrent_change_is_retryable(kube: str) -> None:
    fencer = K8sNodeFencer(core_api(kube))
    original = FakeKubeApi.do_GET

    def stale_get(self: FakeKubeApi) -> None:  # someone changed the node after our read
        original(self)
        FakeKubeApi.nodes["node0001"]["metadata"]["resourceVersion"] = "99"

    FakeKubeApi.do_GET = stale_get  # type: ignore[method-assign]
    try:
        with pytest.raises(AdapterError) as info:
            await fencer.fence("node0001", 2, "x")
        assert not isinstance(info.value, AdapterRejected) and "422" in str(info.value)
    finally:
        FakeKubeApi.do_GET = original  # type: ignore[method-assign]


# --- ticket webhook -------------------------------------------------------------------------

async def test_webhook_tickets_carry_idempotency_keys() -> None:
    seen: list[tuple[str, dict[str, Any], str]] = []

    async def hook(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append((request.headers["Idempotency-Key"], body,
                     request.headers.get("Authorization", "")))
        return web.json_response({"ticket_id": "INC-42"} if body["op"] == "open" else {})

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner, url = await serve(app)
    t = WebhookTicketing(url + "/hook", SecretStr("tok"))
    try:
        assert await t.open("remediate/lab/x:1", "flap", {"a": 1}) == "INC-42"
        assert await t.open("remediate/lab/x:1", "flap", {"a": 1}) == "INC-42"
        await t.update("remediate/lab/x:1", "reminder", {})
        await t.close("remediate/lab/x:1", "fixed", {})
    finally:
        await t.aclose()
        await runner.cleanup()
    keys = [k for k, _, _ in seen]
    assert keys[0] == keys[1] == "remediate/lab/x:1:open"  # a retried open: the same key
    assert keys[2].startswith("remediate/lab/x:1:update:") and keys[3].startswith(
        "remediate/lab/x:1:close:")
    assert seen[0][1] == {"op": "open", "key": "remediate/lab/x:1", "summary": "flap",
                          "details": {"a": 1}}
    assert all(auth == "Bearer tok" for _, _, auth in seen)
