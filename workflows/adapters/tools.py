"""Fabric tools run by subprocess for evidence and checks: argument lists only, never a shell.

Every value that reaches an argument list is validated first: a LID is a unicast LID
(1..0xBFFF), a port an InfiniBand port number (1..255), a device or CA name matches a strict
pattern and cannot start with ``-`` (so it can never be read as an option). A device name
with shell metacharacters is refused, not quoted.

Evidence (read-only, before anything changes):

* ``perfquery -x <lid> <port>``: extended port counters;
* ``mlxlink -d lid-<lid> -p <port> -m -e -c``: link state, BER, eye, errors;
* ``mlxlink -d lid-<lid> -p <port> --cable --ddm``: the cable's vendor, serial and DDM.

Return-to-service checks run the real tools (``ib_write_bw`` across the link, an
``all_reduce_perf`` canary on the rail) from argument templates in the policy or the
worker's options; their output is parsed into measurements that the runbook judges against
a pinned baseline. A check that is not configured fails closed.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from collectors.errors import ParseError
from schemas.policy import CheckCommand
from workflows.adapters.base import AdapterRejected, CheckOutcome, ToolOutput
from workflows.remediation.models import PortRef
from workflows.remediation.probation import check_kind

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
    except asyncio.CancelledError:
        proc.kill()  # the activity was cancelled: the tool must not run on
        raise
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
    """``Checker`` that runs the configured argument template of a check, never a shell.

    ``commands`` maps a check name (``ib_write_bw-per-rail``) to a ``CheckCommand`` (the
    policy's ``probation.checks``; a bare argument list is taken as one). Placeholders,
    validated before substitution: ``{hca}``, ``{hca_port}`` (the host end of the link,
    from the cable's peer ``node/mlx5_k``), ``{node}``, ``{peer}`` (the rail's probe partner
    from ``partners``), ``{rail}``, ``{device}``, ``{port}``, ``{since_ms}``. A check with
    ``bothDirections`` runs again with ``{node}`` and ``{peer}`` swapped.

    Fail closed: a check with no command, a placeholder with no value (no probe partner for
    the rail), or a tool not installed is ``unconfigured`` (never passed); a non-zero exit
    or output the probe parser refuses is a failure. ib_write_bw and all_reduce_perf output
    is parsed by ``collectors.probes`` into the measurements the baseline is judged on.
    """

    def __init__(self, commands: Mapping[str, CheckCommand | Sequence[str]], *,
                 partners: Mapping[int, str] | None = None, timeout_s: float = 1200.0) -> None:
        self._commands = {k: v if isinstance(v, CheckCommand) else CheckCommand(argv=list(v))
                          for k, v in commands.items()}
        self._partners = dict(partners or {})
        self._timeout = timeout_s

    @property
    def configured(self) -> list[str]:
        return sorted(self._commands)

    def _values(self, port: PortRef, since_ms: int) -> dict[str, str]:
        node, hca, hca_port = port.node or "", "", ""
        if port.peer_device and "/" in port.peer_device:
            host, hca = port.peer_device.split("/", 1)
            node = node or host
            hca_port = str(check_port(port.peer_port or 1))
        peer = self._partners.get(port.rail) if port.rail is not None else None
        return {"device": check_name(port.device), "port": str(check_port(port.port)),
                "rail": str(int(port.rail)) if port.rail is not None else "",
                "node": check_name(node, "node") if node else "",
                "hca": check_name(hca, "HCA") if hca else "", "hca_port": hca_port,
                "peer": check_name(peer, "probe partner") if peer else "",
                "since_ms": str(int(since_ms))}

    def argvs(self, check: str, port: PortRef, since_ms: int) -> list[tuple[str, list[str]]]:
        """(run label, argv) per run; AdapterRejected for a value that cannot be given."""
        cmd = self._commands[check]
        values = self._values(port, since_ms)
        template = [*cmd.prefix, *cmd.argv]
        needed = {name for part in template for name in _FIELDS.findall(part)}
        missing = sorted(n for n in needed if not values.get(n))
        if missing:
            why = {"peer": f"no probe partner for rail {port.rail} (probation.partners)"}
            raise AdapterRejected(f"{check}: " + "; ".join(
                why.get(n, f"no value for {{{n}}} on {port.key}") for n in missing))
        unknown = sorted(needed - set(values))
        if unknown:
            raise AdapterRejected(f"{check}: unknown placeholder(s) {unknown}")
        runs = [("forward", [part.format(**values) for part in template])]
        if cmd.both_directions:
            swapped = {**values, "node": values["peer"], "peer": values["node"]}
            runs.append(("reverse", [part.format(**swapped) for part in template]))
        return runs

    async def run(self, check: str, port: PortRef, since_ms: int) -> CheckOutcome:
        cmd = self._commands.get(check)
        if cmd is None:
            return CheckOutcome(passed=False, unconfigured=True,
                                detail=f"{check}: no command configured (probation.checks or "
                                       f"runbook-worker --check); not run")
        try:
            runs = self.argvs(check, port, since_ms)
        except AdapterRejected as exc:
            return CheckOutcome(passed=False, unconfigured=True, detail=str(exc))
        kind = check_kind(check)
        probes: list[dict[str, Any]] = []
        shown: list[list[str]] = []
        for run, argv in runs:
            shown.append(argv)
            out = await run_tool(check, argv, cmd.timeout or self._timeout)
            if out.exit_code is None and out.output.endswith("not installed on this host"):
                return CheckOutcome(passed=False, unconfigured=True, detail=out.output,
                                    measured={"argv": shown})
            if out.exit_code != 0:
                return CheckOutcome(passed=False, detail=f"{check} ({run}): exit "
                                                         f"{out.exit_code}",
                                    measured={"argv": shown, "output": out.output[-2000:]})
            if kind in ("ib_write_bw", "nccl_allreduce"):
                try:
                    probes += [{"run": run, **row} for row in parse_probe(kind, out.output,
                                                                          port)]
                except ParseError as exc:
                    return CheckOutcome(passed=False, detail=f"{check} ({run}): output not "
                                                             f"understood: {exc}",
                                        measured={"argv": shown,
                                                  "output": out.output[-2000:]})
        measured: dict[str, Any] = {"argv": shown, "scale": cmd.scale}
        if cmd.size is not None:
            measured["size"] = cmd.size
        if kind in ("ib_write_bw", "nccl_allreduce"):
            measured["probes"] = probes
        return CheckOutcome(passed=True, detail=f"{check}: {len(runs)} run(s), exit 0",
                            measured=measured)


_FIELDS = re.compile(r"\{([a-z_]+)\}")


def parse_probe(kind: str, text: str, port: PortRef) -> list[dict[str, Any]]:
    """The measurements of one tool run, by the probe parsers the collectors use."""
    from collectors.probes import parse_ib_write_bw, parse_nccl_tests

    parse = parse_ib_write_bw if kind == "ib_write_bw" else parse_nccl_tests
    rail = port.rail or 0
    return [{"probe": p.probe, "size_bytes": p.size_bytes, "bw_gbps": p.bw_gbps,
             "src": p.src, "dst": p.dst}
            for p in parse(text, fabric=port.fabric, ts=0, rail=rail)]
