"""A loopback UFM Enterprise appliance for the UFM poller (UFM cannot run here).

The read side the poller uses; ``fakes.rest_apis.FakeUfm`` (where present) is the isolation
side the runbook controller uses.

It serves the documented answers recorded in ``tests/fixtures/ufm/`` (their provenance is
in ``tests/fixtures/SOURCES.md``): ``GET /ufmRest/app/events``, ``/ufmRest/app/unhealthy_ports``,
``/ufmRest/resources/ports``, ``/ufmRest/resources/links`` behind HTTP basic auth, and the
UFM Telemetry CSV at ``/csv/xcset/ib_basic_debug`` without auth (as UFM Telemetry serves it).
Tests change what it holds (``events``, ``unhealthy``, ``telemetry``) and make a resource
fail (``fail[path] = status``) or hang (``hang.add(path)``). ``tls`` serves HTTPS with a
self-signed certificate made by ``openssl``.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import ssl
import subprocess
from pathlib import Path
from typing import Any

from aiohttp import web

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ufm"
USER, PASSWORD = "fabricwatch", "s3cret-ufm"
TELEMETRY_PATH = "/csv/xcset/ib_basic_debug"


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (openssl, argv only, no shell)."""
    cert, key = folder / "ufm.crt", folder / "ufm.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


class FakeUfmServer:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = fixture("events.json")
        self.unhealthy: list[dict[str, Any]] = fixture("unhealthy_ports.json")
        self.ports: list[dict[str, Any]] = fixture("ports.json")
        self.links: list[dict[str, Any]] = fixture("links.json")
        self.telemetry: str = (FIXTURES / "telemetry-xcset.csv").read_text(encoding="utf-8")
        self.fail: dict[str, int] = {}
        self.hang: set[str] = set()
        self.requests: list[tuple[str, bool]] = []  # (path, authorised)
        self._runner: web.AppRunner | None = None
        self._release = asyncio.Event()
        self.url = ""

    def add_link_events(self, first_id: int, count: int, *, minute: int = 10) -> list[int]:
        """``count`` alternating link down / up events on sw-leaf01:5 <-> sw-spine01:5."""
        ids = []
        for i in range(count):
            ident = first_id + i
            down = i % 2 == 0
            what = "down" if down else "up"
            self.events.append({
                "id": ident, "name": f"Link is {what}", "type": "Link",
                "event_type": "329" if down else "328", "severity": "Warning" if down else "Info",
                "timestamp": f"2026-11-29 17:{minute + i // 60:02d}:{i % 60:02d}.000",
                "counter": "N/A", "category": "Hardware", "object_name": "900a840300ac8c40_5",
                "object_path": "default(2) / Switch: sw-leaf01 / 1/3/1", "write_to_syslog": False,
                "description": f"Link went {what}: (Switch:sw-leaf01:1/3/1)900a840300ac8c40:5 - "
                               "(Switch:sw-spine01:1/3/1)9c0591030085abc0:5"})
            ids.append(ident)
        return ids

    def _authorised(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return False
        return base64.b64decode(header[6:]).decode() == f"{USER}:{PASSWORD}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        authorised = self._authorised(request)
        self.requests.append((path, authorised))
        if path in self.hang:
            await self._release.wait()  # until stop(): the client's timeout goes first
            return web.Response(status=503, text="Service Unavailable")
        if path in self.fail:
            return web.Response(status=self.fail[path], text="Internal Server Error")
        if path == TELEMETRY_PATH:
            return web.Response(text=self.telemetry, content_type="text/plain")
        if not authorised:
            return web.Response(status=401, text="Unauthorized")
        answers = {"/ufmRest/app/events": self.events,
                   "/ufmRest/app/unhealthy_ports": self.unhealthy,
                   "/ufmRest/resources/ports": self.ports,
                   "/ufmRest/resources/links": self.links}
        if path not in answers:
            return web.Response(status=404, text="Not Found")
        return web.json_response(copy.deepcopy(answers[path]))

    async def start(self, *, tls: tuple[Path, Path] | None = None) -> str:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        context = None
        if tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
