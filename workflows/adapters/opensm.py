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

On a fabric whose SM protects PortInfo with an M_Key (``m_key`` and
``m_key_protection_level`` in opensm.conf, as the audit's OSM001 asks), a Set without the key
is dropped by the port. The key (``FABRICWATCH_SECRETS__M_KEY_FILE``, or ``__M_KEY``) is
passed to ``ibportstate`` as ``-y KEY``, the only way infiniband-diags 44 takes it without a
terminal (its prompt form, ``-y x``, fails when stdin is not a tty). It is in that one argument
list and nowhere else: every message, error and recorded argv shows ``-y ****``, and tool
output is scrubbed of it. (The argument is visible in ``/proc/PID/cmdline`` to processes that
can read this one's, for the second the tool runs: run the worker in its own container.)
``perfquery`` is a performance-management MAD, which the M_Key does not cover.

With a topology (``topology``: the runbook worker's inventory, which ``fabric.topology``
keeps current), a port the fabric does not have is refused before any tool runs.

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
from typing import Protocol

from pydantic import SecretStr

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


_MKEY = re.compile(r"^(?:0x[0-9a-fA-F]{1,16}|[0-9]{1,20})$")
MASK = "****"


def _target(port: PortRef) -> tuple[str, str]:
    try:
        return str(check_lid(port.lid)), str(check_port(port.port))
    except ValueError as exc:
        raise AdapterRejected(f"{port.key}: {exc}") from None


def check_m_key(key: SecretStr) -> SecretStr:
    """An M_Key as ibportstate reads it: 0x and up to 16 hex digits, or decimal (64 bits)."""
    text = key.get_secret_value().strip()
    if not _MKEY.match(text) or int(text, 0) >= 1 << 64:
        raise ValueError("the M_Key is not 0x followed by up to 16 hex digits (nor a 64-bit "
                         "decimal); its value is not shown")
    return SecretStr(text)


def mask_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the value after ``-y`` / ``--m_key`` replaced by ``****``."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg in ("-y", "--m_key"):
            out[i + 1] = MASK
    return out


class PortDirectory(Protocol):
    """The fabric's ports as known now; None while no topology has been seen."""

    def has_port(self, device: str, port: int) -> bool | None: ...


class OpensmController:
    """``Controller`` over infiniband-diags (``ibportstate``, ``perfquery``)."""

    name = "opensm"

    def __init__(self, runner: ToolRunner, *, records: RecordSink | None = None,
                 timeout_s: float = 30.0, m_key: SecretStr | None = None,
                 topology: PortDirectory | None = None) -> None:
        self.runner = runner
        self.records = records
        self.timeout_s = timeout_s
        self._m_key = check_m_key(m_key) if m_key is not None else None
        self.topology = topology

    def _smp_args(self) -> list[str]:
        """Arguments of a subnet-management MAD: the local HCA, and the M_Key if set."""
        key = ["-y", self._m_key.get_secret_value()] if self._m_key is not None else []
        return [*self.runner.local_args(), *key]

    def _scrub(self, text: str) -> str:
        if self._m_key is None:
            return text
        raw = self._m_key.get_secret_value()
        value = int(raw, 0)
        forms = {raw, hex(value), f"0x{value:016x}"}
        if value >= 1000:  # a decimal form short enough to be any number is left alone
            forms.add(str(value))
        for form in sorted(forms, key=len, reverse=True):
            text = re.sub(re.escape(form), MASK, text, flags=re.IGNORECASE)
        return text

    def _where(self, argv: Sequence[str]) -> str:
        return " ".join(mask_argv(argv))

    def _target(self, port: PortRef) -> tuple[str, str]:
        known = self.topology.has_port(port.device, port.port) if self.topology else None
        if known is False:
            raise AdapterRejected(f"{port.key}: the fabric's topology has no such port")
        return _target(port)

    async def _tool(self, argv: list[str]) -> str:
        res = await self.runner.run(argv, self.timeout_s)
        if res.exit_code is None:
            raise AdapterError(f"{argv[0]}: "
                               f"{self._scrub(res.stderr.strip()) or 'did not finish'}")
        if res.exit_code != 0:
            raise AdapterError(f"{self._where(argv)}: exit {res.exit_code}: "
                               f"{self._scrub(res.stderr.strip()[-300:])}")
        return res.stdout

    async def phys_state(self, port: PortRef) -> str:
        """The port's own PhysLinkState (the first PortInfo block ibportstate prints).

        ibportstate then queries the peer port as well and exits non-zero when that fails
        (ibsim answers no directed route from a LID-routed start), so the port's own block is
        what counts, whatever the exit code.
        """
        lid, num = self._target(port)
        argv = ["ibportstate", *self._smp_args(), lid, num, "query"]
        res = await self.runner.run(argv, self.timeout_s)
        m = _PHYS.search(res.stdout)
        if m is None:
            raise AdapterError(f"{self._where(argv)}: no PhysLinkState (exit {res.exit_code}):"
                               f" {self._scrub(res.stderr.strip()[-300:])}")
        return m.group(1)

    async def _set(self, port: PortRef, op: str) -> None:
        # The exit code is not the verdict (see phys_state): the query after it is.
        lid, num = self._target(port)
        await self.runner.run(["ibportstate", *self._smp_args(), lid, num, op], self.timeout_s)

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
        lid, num = self._target(port)
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
        self._target(port)
        return None  # a technician does the rung; the checks judge it

    async def counters(self, port: PortRef) -> dict[str, int | None]:
        lid, num = self._target(port)
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
