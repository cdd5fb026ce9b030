"""The runbook's opensm controller: ``ibportstate`` to isolate, ``perfquery``/``iblinkinfo`` for evidence.

For a fabric managed by opensm (no UFM), from a host with infiniband-diags:

* isolate / de-isolate: ``ibportstate LID PORT disable`` / ``enable`` (the port's physical
  state goes to ``Disabled`` and back to polling, then ``LinkUp``); idempotent: the state is
  read first with ``ibportstate LID PORT query`` and a port already so is left alone;
* evidence (before anything changes): ``perfquery LID PORT`` (the legacy registers, with the
  error counters), ``perfquery -x LID PORT`` and ``iblinkinfo --switches-only -l`` (the
  port's line, as the whole output is large on a big fabric);
* counter reset: ``perfquery -R LID PORT``, only after the counters as they were are stored:
  the adapter reads them and writes them to the record sink (an ``EvidenceRecord``
  ``perfquery_before_reset``) and, when that write fails, does not reset.

The LID is the switch's (for a switch port) or the HCA port's own, as the inventory puts it
in ``PortRef.lid``; every value is validated (``check_lid``, ``check_port``) before it
reaches an argument list; there is no shell. ``OpensmChecker`` answers the
``counters-clean*`` return-to-service check from ``perfquery`` and passes the others to the
operator's configured checker.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from collectors.ibdiags import parse_perfquery
from collectors.live.tools import ToolRunner, check_lid, check_port
from schemas.events import EvidenceRecord
from workflows.adapters.base import (
    AdapterError,
    AdapterRejected,
    Checker,
    CheckOutcome,
    RecordSink,
    ToolOutput,
)
from workflows.remediation.models import PortRef

_PHYS = re.compile(r"^PhysLinkState:\.*(\w+)", re.MULTILINE)
ERROR_COUNTERS = ("symbol_errors", "link_error_recovery", "link_downed", "rcv_errors",
                  "rcv_remote_phys_errors", "local_link_integrity_errors",
                  "excessive_buffer_overrun")


def _target(port: PortRef) -> tuple[str, str]:
    try:
        return str(check_lid(port.lid)), str(check_port(port.port))
    except ValueError as exc:
        raise AdapterRejected(f"{port.key}: {exc}") from None


class OpensmController:
    """``Controller`` over infiniband-diags (``ibportstate``, ``perfquery``)."""

    name = "opensm"

    def __init__(self, runner: ToolRunner, *, records: RecordSink | None = None,
                 timeout_s: float = 30.0) -> None:
        self.runner = runner
        self.records = records
        self.timeout_s = timeout_s

    async def _tool(self, argv: list[str]) -> str:
        res = await self.runner.run(argv, self.timeout_s)
        if res.exit_code is None:
            raise AdapterError(f"{argv[0]}: {res.stderr.strip() or 'did not finish'}")
        if res.exit_code != 0:
            raise AdapterError(f"{' '.join(argv)}: exit {res.exit_code}: "
                               f"{res.stderr.strip()[-300:]}")
        return res.stdout

    async def phys_state(self, port: PortRef) -> str:
        """The port's own PhysLinkState (the first PortInfo block ibportstate prints).

        ibportstate then queries the peer port as well and exits non-zero when that fails
        (ibsim answers no directed route from a LID-routed start), so the port's own block is
        what counts, whatever the exit code.
        """
        lid, num = _target(port)
        argv = ["ibportstate", *self.runner.local_args(), lid, num, "query"]
        res = await self.runner.run(argv, self.timeout_s)
        m = _PHYS.search(res.stdout)
        if m is None:
            raise AdapterError(f"{' '.join(argv)}: no PhysLinkState (exit {res.exit_code}): "
                               f"{res.stderr.strip()[-300:]}")
        return m.group(1)

    async def _set(self, port: PortRef, op: str) -> None:
        # The exit code is not the verdict (see phys_state): the query after it is.
        lid, num = _target(port)
        await self.runner.run(["ibportstate", *self.runner.local_args(), lid, num, op],
                              self.timeout_s)

    async def is_isolated(self, port: PortRef) -> bool:
        return (await self.phys_state(port)).lower() == "disabled"

    async def isolate(self, port: PortRef) -> bool:
        if await self.is_isolated(port):
            return False
        await self._set(port, "disable")
        if not await self.is_isolated(port):
            raise AdapterError(f"{port.key}: still not disabled after ibportstate disable")
        return True

    async def unisolate(self, port: PortRef) -> bool:
        if not await self.is_isolated(port):
            return False
        await self._set(port, "enable")
        if await self.is_isolated(port):
            raise AdapterError(f"{port.key}: still disabled after ibportstate enable")
        return True

    async def reset_counters(self, port: PortRef) -> None:
        lid, num = _target(port)
        local = self.runner.local_args()
        before = await self._tool(["perfquery", *local, lid, num])
        before += await self._tool(["perfquery", *local, "-x", lid, num])
        if self.records is None:
            raise AdapterRejected("no record sink: counters are never reset before they are "
                                  "stored")
        ts = int(time.time() * 1000)
        # The write must succeed (it raises otherwise) before the reset below runs.
        await self.records.write([EvidenceRecord(
            id=f"opensm/{port.fabric}/{port.key}/before-reset/{ts}", ts=ts, fabric=port.fabric,
            source="opensm", device=port.device, port=port.port,
            workflow_id=f"remediate/{port.fabric}/{port.key}", tool="perfquery_before_reset",
            output=before, exit_code=0)])
        await self._tool(["perfquery", *local, "-R", lid, num])

    async def repair_step(self, port: PortRef, rung: str) -> bool | None:
        return None  # a technician does the rung; the checks judge it

    async def counters(self, port: PortRef) -> dict[str, int | None]:
        lid, num = _target(port)
        text = await self._tool(["perfquery", *self.runner.local_args(), lid, num])
        events = parse_perfquery(text, fabric=port.fabric, ts=int(time.time() * 1000),
                                 device=port.device)
        sample = events[0].ports[0]
        return {name: getattr(sample, name) for name in ERROR_COUNTERS}


class OpensmEvidence:
    """``EvidenceSource``: perfquery (legacy and -x) and the port's iblinkinfo line."""

    def __init__(self, runner: ToolRunner, *, timeout_s: float = 60.0) -> None:
        self.runner = runner
        self.timeout_s = timeout_s

    def commands(self, port: PortRef) -> list[tuple[str, list[str]]]:
        lid, num = _target(port)
        local = self.runner.local_args()
        return [("perfquery", ["perfquery", *local, lid, num]),
                ("perfquery_x", ["perfquery", *local, "-x", lid, num]),
                ("iblinkinfo", ["iblinkinfo", *local, "--switches-only", "-l"])]

    async def capture(self, port: PortRef) -> list[ToolOutput]:
        outs = []
        for tool, argv in self.commands(port):
            res = await self.runner.run(argv, self.timeout_s)
            text = res.stdout if res.ok else (res.stdout + res.stderr)
            if tool == "iblinkinfo" and res.ok:
                text = "\n".join(_port_lines(text, port)) or text[-4000:]
            outs.append(ToolOutput(tool=tool, output=text, exit_code=res.exit_code,
                                   argv=tuple(argv)))
        return outs


def _port_lines(text: str, port: PortRef) -> Sequence[str]:
    """The iblinkinfo -l lines of the port (its LID and number on the left end)."""
    pat = re.compile(rf"\s{port.lid}\s+{port.port}\[")
    return [line for line in text.splitlines() if pat.search(line[:120])]


class OpensmChecker:
    """``counters-clean*`` from perfquery (no error counted since the reset); others delegated."""

    def __init__(self, controller: OpensmController, fallback: Checker) -> None:
        self.controller = controller
        self.fallback = fallback

    async def run(self, check: str, port: PortRef, since_ms: int) -> CheckOutcome:
        if not check.startswith("counters-clean"):
            return await self.fallback.run(check, port, since_ms)
        values = await self.controller.counters(port)
        dirty = {k: v for k, v in values.items() if v}
        return CheckOutcome(passed=not dirty,
                            detail=f"{check} on {port.key}: "
                                   + ("clean" if not dirty else f"errors {dirty}"),
                            measured={"counters": values, "since_ms": since_ms})
