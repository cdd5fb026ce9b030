"""Running infiniband-diags tools: argument lists only, validated values, timeouts, process groups.

``ToolRunner`` runs one tool with an optional extra environment and working directory (the
lab's ``libumad2sim`` preload and ibsim socket name; nothing on a real host). Each tool runs in
its own session so that a timeout kills the whole process group, never a stray child. Values
that reach an argument list are checked first (``check_lid``, ``check_port``, ``check_guid``),
so a LID or port can never be read as an option and there is never a shell.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runtime.procgroups import group_members

_GUID = re.compile(r"^0x[0-9a-fA-F]{1,16}$")
_ARG = re.compile(r"^[A-Za-z0-9_.,:=/+@-]{1,256}$")
MAX_OUTPUT = 1 << 30  # iblinkinfo -l of a 10k-GPU fabric is ~25 MB; past this, refuse, never cut


class ToolError(RuntimeError):
    """A tool that could not run, timed out or exited non-zero (the message says which)."""


def check_lid(lid: object) -> int:
    """A unicast LID, 1..0xBFFF."""
    if isinstance(lid, bool) or not isinstance(lid, int) or not 1 <= lid <= 0xBFFF:
        raise ValueError(f"LID {lid!r} is not a unicast LID (1..0xBFFF)")
    return lid


def check_port(port: object) -> int:
    """An InfiniBand port number, 1..254 (255 means "all ports" to perfquery)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 254:
        raise ValueError(f"port {port!r} is not an InfiniBand port number (1..254)")
    return port


def check_guid(guid: str) -> str:
    if not _GUID.match(guid):
        raise ValueError(f"GUID {guid!r} is not 0x followed by up to 16 hex digits")
    return guid


def check_arg(arg: str) -> str:
    """A free argument (``lab run``): no spaces, quotes or shell characters, no leading '-' value tricks."""
    if not _ARG.match(arg):
        raise ValueError(f"argument {arg!r} has characters a fabric tool argument may not")
    return arg


def port_list(ports: Sequence[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``1-3,5`` (perfquery's port-list syntax)."""
    nums = sorted({check_port(p) for p in ports})
    if not nums:
        raise ValueError("no ports")
    parts: list[str] = []
    start = prev = nums[0]
    for n in nums[1:] + [-1]:
        if n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = n
    return ",".join(parts)


@dataclass(frozen=True, slots=True)
class ToolResult:
    argv: tuple[str, ...]
    exit_code: int | None
    stdout: str
    stderr: str
    elapsed_s: float
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.truncated


@dataclass(frozen=True)
class ToolRunner:
    """Runs tools with ``env`` added to this process's environment and ``cwd``.

    ``ca`` / ``ca_port`` select the local HCA (``-C``/``-P``) on hosts with several.
    """

    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    ca: str | None = None
    ca_port: int | None = None

    def local_args(self) -> list[str]:
        out: list[str] = []
        if self.ca:
            out += ["-C", check_arg(self.ca)]
        if self.ca_port is not None:
            out += ["-P", str(check_port(self.ca_port))]
        return out

    async def run(self, argv: Sequence[str], timeout_s: float) -> ToolResult:
        """Run ``argv``; on timeout the process group is killed and exit_code is None."""
        exe = shutil.which(argv[0])
        if exe is None:
            return ToolResult(tuple(argv), None, "", f"{argv[0]}: not installed on this host",
                              0.0)
        env = dict(os.environ)
        env.update(self.env)
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            exe, *argv[1:], stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, cwd=self.cwd, start_new_session=True)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
        except TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            return ToolResult(tuple(argv), None, "", f"timed out after {timeout_s:g} s",
                              time.monotonic() - started)
        except asyncio.CancelledError:
            _kill_group(proc.pid)  # a cancelled poll leaves no tool behind
            raise
        return ToolResult(tuple(argv), proc.returncode,
                          out[:MAX_OUTPUT].decode("utf-8", errors="replace"),
                          err[:MAX_OUTPUT].decode("utf-8", errors="replace"),
                          time.monotonic() - started, truncated=len(out) > MAX_OUTPUT)

    async def check(self, argv: Sequence[str], timeout_s: float) -> str:
        """Run and return stdout; ``ToolError`` unless it exited 0."""
        res = await self.run(argv, timeout_s)
        if res.truncated:
            raise ToolError(f"{' '.join(argv)}: output over {MAX_OUTPUT} bytes; not parsed")
        if not res.ok:
            why = res.stderr.strip().splitlines()[-1:] or [f"exit {res.exit_code}"]
            raise ToolError(f"{' '.join(argv)}: {why[0]}")
        return res.stdout


def _kill_group(pid: int) -> None:
    # The tool is its own session leader: pgid == pid. A group with no live member is left
    # alone: its number may already be a new process's (pids are reused).
    if not group_members(pid):
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
