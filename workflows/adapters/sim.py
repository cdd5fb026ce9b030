"""The simulator adapter: the default controller, which closes the loop on one machine.

Wraps ``sim.controller.SimController(state_dir)`` (isolate / unisolate / reset_counters /
repair_step / is_isolated, state in a JSON file). The simulator is synchronous and keeps its
state in a file, so calls go through one lock in a thread: two activities never interleave a
read-modify-write of that file. ``SimChecker`` judges return-to-service checks from what the
simulator says about the port: the last repair result (kept in this adapter's own small JSON
file beside the simulator's, so a worker restart keeps it) or the simulator's own health view
where it offers one.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from workflows.adapters.base import AdapterRejected, CheckOutcome, ToolOutput
from workflows.remediation.models import PortRef
from workflows.remediation.probation import check_kind

T = TypeVar("T")


class SimLike(Protocol):
    """What the runbook uses of the simulator's controller (issue 5's pinned interface)."""

    def isolate(self, device: str, port: int) -> Any: ...

    def unisolate(self, device: str, port: int) -> Any: ...

    def reset_counters(self, device: str, port: int) -> Any: ...

    def repair_step(self, device: str, port: int, rung: str) -> bool: ...

    def is_isolated(self, device: str, port: int) -> bool: ...


def open_sim_controller(state_dir: Path) -> SimLike:
    """The simulator's controller on ``state_dir`` (imported late: the sim is optional)."""
    from sim.controller import SimController

    controller: SimLike = SimController(state_dir)
    return controller


class SimControllerAdapter:
    """``Controller`` over the simulator; remembers repair results for ``SimChecker``."""

    name = "sim"

    def __init__(self, controller: SimLike, state_dir: Path) -> None:
        self._sim = controller
        self._lock = asyncio.Lock()
        state_dir.mkdir(parents=True, exist_ok=True)
        self._repairs_path = state_dir / "runbook-sim-repairs.json"

    async def _call(self, fn: Callable[[], T]) -> T:
        async with self._lock:
            try:
                return await asyncio.to_thread(fn)
            except json.JSONDecodeError:
                raise  # this adapter's own file: not a refusal
            except ValueError as exc:
                # sim.controller.ControllerError: a port the simulated fabric does not have
                # (or a name that cannot be one); for good, and nothing was changed
                raise AdapterRejected(str(exc)) from None

    def _check(self, port: PortRef) -> None:
        """Refuse a port the simulated fabric does not have, before reading or changing it
        (``check_port`` where the simulator has one; the drill's stand-ins do not)."""
        check = getattr(self._sim, "check_port", None)
        if check is not None:
            check(port.device, port.port)

    async def isolate(self, port: PortRef) -> bool:
        def op() -> bool:
            self._check(port)
            if self._sim.is_isolated(port.device, port.port):
                return False
            self._sim.isolate(port.device, port.port)
            return True
        return await self._call(op)

    async def unisolate(self, port: PortRef) -> bool:
        def op() -> bool:
            self._check(port)
            if not self._sim.is_isolated(port.device, port.port):
                return False
            self._sim.unisolate(port.device, port.port)
            return True
        return await self._call(op)

    async def is_isolated(self, port: PortRef) -> bool:
        def op() -> bool:
            self._check(port)
            return bool(self._sim.is_isolated(port.device, port.port))
        return await self._call(op)

    async def reset_counters(self, port: PortRef) -> None:
        await self._call(lambda: self._sim.reset_counters(port.device, port.port))

    async def isolated_by(self, port: PortRef) -> str | None:
        """Who isolated the port, where the simulator was told (``isolate(..., by=)``)."""
        probe = getattr(self._sim, "isolated_by", None)
        if probe is None:
            return None
        return await self._call(lambda: probe(port.device, port.port))

    async def isolated_ports(self) -> list[str] | None:
        """Every isolated ``device:port`` (None: this controller cannot list them)."""
        probe = getattr(self._sim, "isolated_ports", None)
        if probe is None:
            return None
        return await self._call(lambda: sorted(probe()))

    async def repair_step(self, port: PortRef, rung: str) -> bool | None:
        def op() -> bool:
            self._check(port)
            fixed = bool(self._sim.repair_step(port.device, port.port, rung))
            repairs = self._load_repairs()
            repairs[port.key] = {"rung": rung, "fixed": fixed}
            tmp = self._repairs_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(repairs, sort_keys=True), encoding="utf-8")
            os.replace(tmp, self._repairs_path)  # atomic: a crash leaves the old or the new file
            return fixed
        return await self._call(op)

    def _load_repairs(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self._repairs_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        return data if isinstance(data, dict) else {}

    async def last_repair(self, port: PortRef) -> dict[str, Any] | None:
        return await self._call(lambda: self._load_repairs().get(port.key))

    async def bandwidth_fraction(self, port: PortRef) -> float:
        """The share of the nominal bandwidth the port carries (1.0 unless the simulator
        says a repair left it slow)."""
        probe = getattr(self._sim, "bandwidth_fraction", None)
        if probe is None:
            return 1.0
        return float(await self._call(lambda: probe(port.device, port.port)))

    async def soak_errors(self, port: PortRef) -> int:
        """Errors the simulator counted on the port under probe traffic (0 if it cannot)."""
        probe = getattr(self._sim, "soak_errors", None)
        if probe is None:
            return 0
        return int(await self._call(lambda: probe(port.device, port.port)))

    async def health(self, port: PortRef) -> bool | None:
        """The running simulator's view of the port (True healthy); None when it has none
        (no ``is_healthy``, or no simulator has reported yet)."""
        probe = getattr(self._sim, "is_healthy", None)
        if probe is None:
            return None

        def op() -> bool | None:
            value = probe(port.device, port.port)
            return None if value is None else bool(value)
        return await self._call(op)


# What a healthy NDR rail carries in the simulator (the demo pins these as its baselines),
# as sim.telemetry's probes measure it: ib_write_bw at 8 MiB between a pair (98 % of the
# 400 Gb/s line), the all-reduce canary's bus bandwidth at 1 GiB over 16 ranks (92 %).
SIM_PROBES: dict[str, tuple[int, int, float]] = {
    "ib_write_bw": (8 << 20, 2, 392.0),
    "nccl_allreduce": (1 << 30, 16, 368.0),
}
# A link whose repair did not take carries this share of it under probe traffic.
FAULTY_FRACTION = 0.55


class SimChecker:
    """Return-to-service checks against the simulator.

    The port's health is the simulator's health report, made after it applied the port's
    last repair; until the simulator has applied that repair (it does at its next step, and
    rewrites its report then) the controller's repair result decides: a rung that fixed the
    cable is judged fixed, not by the report from before it. Probes (ib_write_bw, the
    all-reduce canary) return measurements the runbook judges against the pinned baselines:
    a healthy link at the nominal bandwidth (or the share the simulator's
    ``bandwidth_fraction`` gives a link a repair left slow), a faulty one at
    ``FAULTY_FRACTION`` of it; ib_write_bw runs both directions. The soak's counters are
    clean when the port is healthy and the simulator counted no errors under the probe
    traffic (``soak_errors``).
    """

    def __init__(self, adapter: SimControllerAdapter) -> None:
        self._adapter = adapter

    async def _healthy(self, port: PortRef) -> tuple[bool, dict[str, Any] | None]:
        healthy = await self._adapter.health(port)
        repair = await self._adapter.last_repair(port)
        if healthy is None:
            healthy = bool(repair and repair.get("fixed"))
        return healthy, repair

    async def run(self, check: str, port: PortRef, since_ms: int) -> CheckOutcome:
        healthy, repair = await self._healthy(port)
        kind = check_kind(check)
        if kind in SIM_PROBES:
            size, scale, nominal = SIM_PROBES[kind]
            share = await self._adapter.bandwidth_fraction(port) if healthy else FAULTY_FRACTION
            runs = ["forward", "reverse"] if kind == "ib_write_bw" else ["allreduce"]
            ends = [port.key, f"{port.peer_device}:{port.peer_port}"]
            probes = [{"run": run, "probe": kind, "size_bytes": size,
                       "bw_gbps": round(nominal * share, 3),
                       "src": ends[i % 2], "dst": ends[(i + 1) % 2]}
                      for i, run in enumerate(runs)]
            return CheckOutcome(passed=True, detail=f"{check} on {port.key} (simulator)",
                                measured={"probes": probes, "scale": scale, "size": size})
        detail = f"{check} on {port.key}: {'clean' if healthy else 'still faulty'} (simulator)"
        return CheckOutcome(passed=healthy, detail=detail,
                            measured={"since_ms": since_ms, "last_repair": repair})

    async def run_soak(self, check: str, port: PortRef, since_ms: int, until_ms: int | None,
                       normal: dict[str, float]) -> CheckOutcome:
        """The soak's counters: no errors while the link carried the probes."""
        healthy, repair = await self._healthy(port)
        errors = await self._adapter.soak_errors(port)
        limit = normal.get("symbol_errors_per_hour", 0.0)
        hours = max(((until_ms or since_ms) - since_ms) / 3_600_000, 1e-9)
        rate = errors / hours
        clean = healthy and rate <= limit
        measured = {"since_ms": since_ms, "until_ms": until_ms, "errors": errors,
                    "errors_per_hour": round(rate, 3), "normal_per_hour": limit,
                    "last_repair": repair}
        detail = (f"{check} on {port.key}: {errors} error(s) under probe traffic "
                  f"({rate:.1f}/h, normal at most {limit:g}/h)"
                  + ("" if healthy else "; the fault is still there") + " (simulator)")
        return CheckOutcome(passed=clean, detail=detail, measured=measured)


class SimEvidence:
    """Evidence from the simulator: what it reports about the port, as a tool output."""

    def __init__(self, adapter: SimControllerAdapter) -> None:
        self._adapter = adapter

    async def capture(self, port: PortRef) -> list[ToolOutput]:
        isolated = await self._adapter.is_isolated(port)
        health = await self._adapter.health(port)
        text = json.dumps({"device": port.device, "port": port.port, "isolated": isolated,
                           "healthy": health, "peer": f"{port.peer_device}:{port.peer_port}"},
                          sort_keys=True)
        return [ToolOutput(tool="sim_port_state", output=text, exit_code=0)]
