"""Loopback UFM and SONiC management APIs (aiohttp), as each product documents them.

* ``FakeUfm``: UFM Enterprise's unhealthy ports: ``GET /ufmRest/app/unhealthy_ports`` lists
  ``{"UnhealthyGUID", "UnhealthyPortNumber", "PeerGUID", "Condition", ...}``;
  ``PUT /ufmRestV2/app/unhealthy_ports`` with ``{"ports": ["<guid>_<port>"], "ports_policy":
  "UNHEALTHY", "action": "isolate"}`` or ``{"ports": [...], "ports_policy": "HEALTHY"}``
  (the shapes the UFM SDK's port-health plugin sends). Basic auth; a port UFM does not know
  is a 400, as UFM answers a bad request.
* ``FakeSonic``: one switch's RESTCONF (RFC 8040) OpenConfig admin state,
  ``/restconf/data/openconfig-interfaces:interfaces/interface={name}/config/enabled``: GET
  answers ``{"openconfig-interfaces:enabled": bool}``, PATCH (``application/yang-data+json``)
  answers 204; an interface the switch does not have is a 404 with an ``ietf-restconf:errors``
  body. Basic auth.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import unquote

from aiohttp import web


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


class FakeUfm:
    def __init__(self, ports: set[str], user: str = "admin",
                 password: str = "s3cret") -> None:  # noqa: S107 - a test fixture's login
        self.ports = set(ports)  # "<guid>_<port>" of every port UFM manages
        self.unhealthy: set[str] = set()
        self.puts: list[dict[str, Any]] = []
        self.auth = basic(user, password)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/ufmRest/app/unhealthy_ports", self.list)
        app.router.add_put("/ufmRestV2/app/unhealthy_ports", self.change)
        return app

    def _auth(self, request: web.Request) -> None:
        if request.headers.get("Authorization") != self.auth:
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
        unknown = [p for p in body.get("ports", []) if p not in self.ports]
        if not body.get("ports") or unknown:
            return web.json_response({"error": f"unknown ports {unknown}"}, status=400)
        if body.get("ports_policy") == "UNHEALTHY":
            if body.get("action") != "isolate":
                return web.json_response({"error": "unsupported action"}, status=400)
            self.unhealthy.update(body["ports"])
        elif body.get("ports_policy") == "HEALTHY":
            self.unhealthy.difference_update(body["ports"])
        else:
            return web.json_response({"error": "bad ports_policy"}, status=400)
        return web.Response(status=200)


class FakeSonic:
    PREFIX = "/restconf/data/openconfig-interfaces:interfaces/interface="
    SUFFIX = "/config/enabled"

    def __init__(self, interfaces: set[str], user: str = "admin",
                 password: str = "YourPaSsWoRd") -> None:  # noqa: S107 - a test login
        self.enabled = {name: True for name in interfaces}
        self.patches: list[tuple[str, Any]] = []
        self.auth = basic(user, password)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    @staticmethod
    def _error(status: int, tag: str) -> web.Response:
        return web.json_response({"ietf-restconf:errors": {"error": [
            {"error-type": "application", "error-tag": tag}]}}, status=status)

    async def handle(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != self.auth:
            return web.Response(status=401)
        path = request.raw_path.split("?")[0]
        if not path.startswith(self.PREFIX) or not path.endswith(self.SUFFIX):
            return self._error(404, "invalid-value")
        name = unquote(path[len(self.PREFIX):-len(self.SUFFIX)])
        if name not in self.enabled:
            return self._error(404, "invalid-value")
        if request.method == "GET":
            return web.json_response({"openconfig-interfaces:enabled": self.enabled[name]})
        if request.method == "PATCH":
            if request.headers.get("Content-Type") != "application/yang-data+json":
                return self._error(415, "invalid-value")
            body = await request.json()
            value = body.get("openconfig-interfaces:enabled")
            if not isinstance(value, bool):
                return self._error(400, "malformed-message")
            self.patches.append((name, body))
            self.enabled[name] = value
            return web.Response(status=204)
        return self._error(405, "operation-not-supported")
