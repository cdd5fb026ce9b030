"""Process groups from /proc: who is in one, and how to stop one without hitting a stranger.

Used by every layer that starts a child in a session of its own (the stack, the cluster, the
evidence tools), so it lives below them all. Pids, and so process-group ids, are reused: a
group is signalled only while a member of it lives.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state letter, process group, start ticks) of ``pid`` from /proc, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; fields after the last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[2]), int(fields[19])


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = proc_stat(int(entry.name))
        if stat is not None and stat[1] == pgid and stat[0] != "Z":
            members.append(int(entry.name))
    return members


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to SIGTERM this child when the thread that started it exits."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def stop_group(pgid: int, proc: subprocess.Popen[bytes] | None = None, *,
               grace_s: float = 20.0, kill_wait_s: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL what is left after ``grace_s``.

    A group with no live member is not signalled at all: once its leader is reaped and its
    members are gone, the kernel may hand the number to a new process, and a session leader
    started since (another test's server, say) would take the signal meant for this group.
    """

    def gone() -> bool:
        if proc is not None:
            proc.poll()  # reap, or the zombie would count as alive
        return not group_members(pgid)

    if gone():
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, kill_wait_s)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        end = time.monotonic() + wait
        while time.monotonic() < end and not gone():
            time.sleep(0.1)
        if gone():
            return
