"""Shared pieces of the runbook integration tests: a file-backed fabric controller, a loopback
ticket webhook, and the activity wiring the worker uses.

``FileFabric`` speaks the simulator controller's interface (isolate / unisolate /
reset_counters / repair_step / is_isolated by device and port, state in a JSON file) and
appends every call to a JSONL log, so tests can count what was really done even across
worker processes. Which rung fixes a port is scripted in the state folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from aiohttp import web

from ledger.baselines import PinnedBaseline
from workflows.adapters.base import AdapterError, AdapterRejected
from workflows.adapters.k8s import NoFencer
from workflows.adapters.records import MemorySink
from workflows.adapters.sim import SIM_PROBES, SimChecker, SimControllerAdapter, SimEvidence
from workflows.adapters.ticket import WebhookTicketing
from workflows.remediation.activities import FabricActivities


class FileFabric:
    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state_path = state_dir / "fabric.json"
        self.log_path = state_dir / "calls.jsonl"
        self.script_path = state_dir / "script.json"

    def _load(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.state_path.read_text())
            return data
        except FileNotFoundError:
            return {"isolated": []}

    def _save(self, data: dict[str, Any]) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.state_path)

    def _log(self, op: str, device: str, port: int, **extra: Any) -> None:
        with self.log_path.open("a") as fh:
            fh.write(json.dumps({"op": op, "key": f"{device}:{port}", **extra}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def script(self, fixed_at: dict[str, str]) -> None:
        """port key -> the rung that fixes it (absent: never fixed)."""
        self.script_path.write_text(json.dumps(fixed_at))

    def calls(self, op: str | None = None, key: str | None = None) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        rows = [json.loads(line) for line in self.log_path.read_text().splitlines() if line]
        return [r for r in rows if (op is None or r["op"] == op)
                and (key is None or r["key"] == key)]

    def fail(self, **ops: str) -> None:
        """op -> "reject" (AdapterRejected: for good) or "error" (AdapterError: retried)."""
        (self.dir / "fail.json").write_text(json.dumps(ops))

    def _maybe_fail(self, op: str, device: str, port: int) -> None:
        path = self.dir / "fail.json"
        mode = json.loads(path.read_text()).get(op) if path.exists() else None
        if mode is None:
            return
        self._log(f"{op}-{mode}", device, port)
        if mode == "reject":
            raise AdapterRejected(f"{op} {device}:{port}: refused by the controller")
        raise AdapterError(f"{op} {device}:{port}: controller unavailable")

    def isolate_by_other(self, device: str, port: int, by: str) -> None:
        """Someone else (UFM's port-health plugin, a human) isolated the port."""
        data = self._load()
        data["isolated"].append(f"{device}:{port}")
        data.setdefault("by", {})[f"{device}:{port}"] = by
        self._save(data)

    def isolated_by(self, device: str, port: int) -> str | None:
        by: str | None = self._load().get("by", {}).get(f"{device}:{port}")
        return by

    def isolated_ports(self) -> list[str]:
        return sorted(self._load()["isolated"])

    def isolate(self, device: str, port: int) -> None:
        self._maybe_fail("isolate", device, port)
        data = self._load()
        key = f"{device}:{port}"
        if key not in data["isolated"]:
            data["isolated"].append(key)
            self._save(data)
        self._log("isolate", device, port)
        hook = self.dir / "hang-after-isolate"
        if hook.exists():
            hook.unlink()  # once: the restarted worker's retry must not hang again
            (self.dir / "hanging").write_text("1")
            import time
            time.sleep(3600)  # the test kills the worker process here

    def unisolate(self, device: str, port: int) -> None:
        self._maybe_fail("unisolate", device, port)
        data = self._load()
        key = f"{device}:{port}"
        if key in data["isolated"]:
            data["isolated"].remove(key)
            self._save(data)
        self._log("unisolate", device, port)

    def reset_counters(self, device: str, port: int) -> None:
        self._maybe_fail("reset_counters", device, port)
        self._log("reset_counters", device, port)

    def repair_step(self, device: str, port: int, rung: str) -> bool:
        script = json.loads(self.script_path.read_text()) if self.script_path.exists() else {}
        key = f"{device}:{port}"
        fixed = script.get(key) == rung or script.get("*") == rung
        self._log("repair_step", device, port, rung=rung, fixed=fixed)
        if fixed:
            self.mark_healthy(device, port)
        return fixed

    def mark_healthy(self, device: str, port: int) -> None:
        """A repair took (by the ladder, or by hand after an escalation)."""
        data = self._load()
        healthy = data.setdefault("healthy", [])
        if f"{device}:{port}" not in healthy:
            healthy.append(f"{device}:{port}")
            self._save(data)

    def is_healthy(self, device: str, port: int) -> bool:
        return f"{device}:{port}" in self._load().get("healthy", [])

    def is_isolated(self, device: str, port: int) -> bool:
        return f"{device}:{port}" in self._load()["isolated"]

    def slow(self, key: str, fraction: float) -> None:
        """A repair that left the link up and clean but slow (a bent fibre, a bad lane)."""
        data = self._load()
        data.setdefault("slow", {})[key] = fraction
        self._save(data)

    def bandwidth_fraction(self, device: str, port: int) -> float:
        return float(self._load().get("slow", {}).get(f"{device}:{port}", 1.0))

    def errors_under_traffic(self, key: str, count: int) -> None:
        data = self._load()
        data.setdefault("soak_errors", {})[key] = count
        self._save(data)

    def soak_errors(self, device: str, port: int) -> int:
        return int(self._load().get("soak_errors", {}).get(f"{device}:{port}", 0))


class TicketServer:
    """A loopback ticket webhook that deduplicates on Idempotency-Key, as the adapter expects."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.tickets: dict[str, str] = {}
        self.seen: dict[str, dict[str, Any]] = {}
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        idem = request.headers.get("Idempotency-Key", "")
        if idem in self.seen:
            return web.json_response(self.seen[idem])
        self.requests.append({"idempotency_key": idem, **body})
        answer: dict[str, Any] = {}
        if body["op"] == "open":
            ticket = self.tickets.setdefault(body["key"], f"T-{len(self.tickets) + 1}")
            answer = {"ticket_id": ticket}
        else:
            answer = {"ticket_id": self.tickets.get(body["key"], body["key"])}
        self.seen[idem] = answer
        return web.json_response(answer)

    def ops(self, key: str, op: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["key"] == key and (op is None or r["op"] == op)]

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/hook"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class SimBaselines:
    """The simulator's nominal bandwidths, pinned for whatever fabric a test names (tests
    use a fresh fabric each; the pinning itself is tested on the ledger)."""

    def __init__(self, pinned_by: str = "test-pinner", links: tuple[str, ...] = ()) -> None:
        self.pinned_by = pinned_by
        self.links = links

    async def pinned(self, fabric: str, rail: int | None = None) -> list[PinnedBaseline]:
        return [PinnedBaseline(fabric=fabric, rail=r, probe=probe, size_bytes=size,
                               scale=scale, gbps=gbps, pinned_by=self.pinned_by,
                               pinned_ts=1_700_000_000_000, links=self.links)
                for r in ([rail] if rail is not None else range(8))
                for probe, (size, scale, gbps) in SIM_PROBES.items()]


def fabric_activities(fabric: FileFabric, ticket_url: str, sink: Any | None = None,
                      *, checker: Any | None = None, baselines: Any | None = None
                      ) -> tuple[FabricActivities, Any]:
    sink = sink if sink is not None else MemorySink()
    adapter = SimControllerAdapter(fabric, fabric.dir)
    acts = FabricActivities(records=sink, controller=adapter, evidence=SimEvidence(adapter),
                            checker=checker or SimChecker(adapter), fencer=NoFencer(),
                            ticketing=WebhookTicketing(ticket_url),
                            baselines=baselines if baselines is not None else SimBaselines())
    return acts, sink


class JsonlSink:
    """Records appended to a file, so a test can read what several worker processes wrote."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def write(self, events: Any) -> int:
        with self.path.open("a") as fh:
            for e in events:
                fh.write(e.model_dump_json() + "\n")
        return len(events)

    def rows(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]
