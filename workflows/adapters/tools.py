"""Fabric tools run by subprocess for evidence and checks: argument lists only, never a shell.

Every value that reaches an argument list is validated first: a LID is a unicast LID
(1..0xBFFF), a port an InfiniBand port number (1..255), a device or CA name matches a strict
pattern and cannot start with ``-`` (so it can never be read as an option). A device name
with shell metacharacters is refused, not quoted.

Evidence (read-only, before anything changes):

* ``perfquery -x <lid> <port>``: extended port counters;
* ``mlxlink -d lid-<lid> -p <port> -m -e -c``: link state, BER, eye, errors;
* ``mlxlink -d lid-<lid> -p <port> --cable --ddm``: the cable's vendor, serial and DDM.

Return-to-service checks are operators' own wrappers (an ``ib_write_bw`` pair on the rail, an
``all_reduce_perf`` run against the baseline), configured as argument templates; a check
passes when its command exits 0.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Mapping, Sequence

from workflows.adapters.base import AdapterRejected, CheckOutcome, ToolOutput
from workflows.remediation.models import PortRef

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./:@+-]{0,127}$")
MAX_OUTPUT = 256 * 1024  # evidence is kept whole up to this; more is truncated and said so


def check_lid(lid: int | None) -> int:
    if lid is None or isinstance(lid, bool) or not 1 <= int(lid) <= 0xBFFF:
        raise AdapterRejected(f"LID {lid!r} is not a unicast LID (1..0xBFFF)")
    return int(lid)


def check_port(port: int) -> int:
    if isinstance(port, bool) or not 1 <= int(port) <= 255:
        raise AdapterRejected(f"port {port!r} is not an InfiniBand port number (1..255)")
    return int(port)


def check_name(value: str, what: str = "device") -> str:
    if not _NAME.match(value):
        raise AdapterRejected(f"{what} {value!r} has characters a fabric tool argument may not")
    return value


async def run_tool(tool: str, argv: Sequence[str], timeout_s: float) -> ToolOutput:
    """Run ``argv`` (argv[0] looked up on PATH) and capture stdout+stderr."""
    exe = shutil.which(argv[0])
    if exe is None:
        return ToolOutput(tool=tool, output=f"{argv[0]}: not installed on this host",
                          exit_code=None, argv=tuple(argv))
    proc = await asyncio.create_subprocess_exec(
        exe, *argv[1:], stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return ToolOutput(tool=tool, output=f"timed out after {timeout_s:.0f} s",
                          exit_code=None, argv=tuple(argv))
    text = out.decode("utf-8", errors="replace")
    if len(text) > MAX_OUTPUT:
        text = text[:MAX_OUTPUT] + f"\n[truncated at {MAX_OUTPUT} bytes]"
    return ToolOutput(tool=tool, output=text, exit_code=proc.returncode, argv=tuple(argv))


class FabricToolsEvidence:
    """``EvidenceSource`` on a host with infiniband-diags and MFT installed."""

    def __init__(self, *, ca: str | None = None, timeout_s: float = 120.0,
                 perfquery: str = "perfquery", mlxlink: str = "mlxlink") -> None:
        self._ca = check_name(ca, "CA") if ca else None
        self._timeout = timeout_s
        self._perfquery = perfquery
        self._mlxlink = mlxlink

    def commands(self, port: PortRef) -> list[tuple[str, list[str]]]:
        lid = check_lid(port.lid)
        num = check_port(port.port)
        check_name(port.device)
        ca = ["-C", self._ca] if self._ca else []
        dev = f"lid-{lid}"
        return [
            ("perfquery", [self._perfquery, *ca, "-x", str(lid), str(num)]),
            ("mlxlink", [self._mlxlink, "-d", dev, "-p", str(num), "-m", "-e", "-c"]),
            ("cable_info", [self._mlxlink, "-d", dev, "-p", str(num), "--cable", "--ddm"]),
        ]

    async def capture(self, port: PortRef) -> list[ToolOutput]:
        outputs = []
        for tool, argv in self.commands(port):
            outputs.append(await run_tool(tool, argv, self._timeout))
        return outputs


class CommandChecker:
    """``Checker`` that runs an operator-supplied argument template per check.

    ``templates`` maps a check name (``ib_write_bw-per-rail``) to an argument list whose
    items may contain ``{device}``, ``{port}``, ``{rail}``, ``{node}``, ``{since_ms}``;
    values are validated before substitution. A check with no template passes with a note
    saying it was not configured (so a fabric without NCCL hosts can still return ports).
    """

    def __init__(self, templates: Mapping[str, Sequence[str]], *, timeout_s: float = 1200.0,
                 unconfigured_passes: bool = True) -> None:
        self._templates = {k: list(v) for k, v in templates.items()}
        self._timeout = timeout_s
        self._unconfigured_passes = unconfigured_passes

    def argv(self, check: str, port: PortRef, since_ms: int) -> list[str] | None:
        template = self._templates.get(check)
        if template is None:
            return None
        values = {"device": check_name(port.device), "port": str(check_port(port.port)),
                  "rail": str(int(port.rail)) if port.rail is not None else "",
                  "node": check_name(port.node, "node") if port.node else "",
                  "since_ms": str(int(since_ms))}
        return [part.format(**values) for part in template]

    async def run(self, check: str, port: PortRef, since_ms: int) -> CheckOutcome:
        argv = self.argv(check, port, since_ms)
        if argv is None:
            return CheckOutcome(passed=self._unconfigured_passes,
                                detail=f"{check}: no command configured")
        out = await run_tool(check, argv, self._timeout)
        return CheckOutcome(passed=out.exit_code == 0,
                            detail=f"{check}: exit {out.exit_code}",
                            measured={"output": out.output[-2000:]})
