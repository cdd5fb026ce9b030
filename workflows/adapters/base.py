"""The runbook's ports to the outside world, as Protocols (one adapter per product).

Every method that changes something is idempotent and says whether it changed anything, so
an activity retried after a crash can tell "I did it" from "it was already so". Adapters
never log credentials.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ledger.baselines import PinnedBaseline
from schemas.events import ActionRecord, Detection, EvidenceRecord, Incident
from workflows.remediation.models import PortRef


class AdapterError(RuntimeError):
    """The product answered with an error the activity may retry."""


class AdapterRejected(AdapterError):
    """The product refused the request for good (bad port, no permission): do not retry."""


@runtime_checkable
class Controller(Protocol):
    """Takes a port out of service and back (UFM, SONiC, the simulator, opensm)."""

    name: str

    async def isolate(self, port: PortRef) -> bool: ...

    async def unisolate(self, port: PortRef) -> bool: ...

    async def is_isolated(self, port: PortRef) -> bool: ...

    async def reset_counters(self, port: PortRef) -> None: ...

    async def repair_step(self, port: PortRef, rung: str) -> bool | None:
        """Perform (the simulator) or acknowledge (a real fabric: None) one ladder rung."""
        ...


class ControllerReadback(Protocol):
    """Optional on a ``Controller`` (looked up with ``getattr``): who isolated a port, and
    every isolated port, for the runbook's ownership record and ``runbook reconcile``. The
    simulator's adapter has both; a controller without them is reported as unknown."""

    async def isolated_by(self, port: PortRef) -> str | None: ...

    async def isolated_ports(self) -> list[str] | None: ...


@dataclass(frozen=True, slots=True)
class ToolOutput:
    tool: str
    output: str
    exit_code: int | None
    argv: tuple[str, ...] = ()


class EvidenceSource(Protocol):
    """Reads the port's state with the fabric tools; changes nothing."""

    async def capture(self, port: PortRef) -> list[ToolOutput]: ...


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    passed: bool
    detail: str = ""
    measured: dict[str, Any] = field(default_factory=dict)
    # the check could not be judged (no command, no baseline, tool missing): never a pass,
    # and not the link's fault either; the runbook holds for a human
    unconfigured: bool = False


class Checker(Protocol):
    """Return-to-service checks: ib_write_bw on the rail, NCCL baseline, clean counters."""

    async def run(self, check: str, port: PortRef, since_ms: int) -> CheckOutcome: ...


class NodeFencer(Protocol):
    """Keeps jobs off a node's rail while its port is out (Kubernetes label + taint)."""

    async def fence(self, node: str, rail: int | None, reason: str) -> bool: ...

    async def unfence(self, node: str, rail: int | None) -> bool: ...


class Ticketing(Protocol):
    """The ticket system, keyed by the runbook's workflow id so a retry never opens two."""

    async def open(self, key: str, summary: str, details: dict[str, Any]) -> str: ...

    async def update(self, key: str, summary: str, details: dict[str, Any]) -> str: ...

    async def close(self, key: str, summary: str, details: dict[str, Any]) -> str: ...

    async def page(self, key: str, summary: str, details: dict[str, Any]) -> str: ...


class RecordSink(Protocol):
    """Where runbook records go: the ledger (directly, or through ``fabric.actions``)."""

    async def write(self, events: Sequence[ActionRecord | EvidenceRecord | Detection | Incident]
                    ) -> int: ...


class JobLookup(Protocol):
    """The running jobs whose traffic crosses a cable (``workflows.adapters.jobs``)."""

    async def touching(self, fabric: str, device: str, port: int, at_ms: int
                       ) -> dict[str, Any]: ...



class BaselineStore(Protocol):
    """Pinned probe baselines (the ledger's ``probe_baselines``): what a healthy link of a
    rail carries, per (probe, size, scale)."""

    async def pinned(self, fabric: str, rail: int | None = None) -> list[PinnedBaseline]: ...
