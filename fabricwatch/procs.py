"""Child processes that fabricwatch starts and must stop: process groups, logs, no orphans.

Each child runs in a session (and process group) of its own, so stopping it reaches every
process it forked, and Ctrl-C in the terminal reaches only its owner, which then stops the
children in order. On Linux a child started from the main thread also dies with its owner
(PR_SET_PDEATHSIG), so a killed owner leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
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
    """SIGTERM the process group, then SIGKILL what is left after ``grace_s``."""

    def gone() -> bool:
        if proc is not None:
            proc.poll()  # reap, or the zombie would count as alive
        return not group_members(pgid)

    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, kill_wait_s)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        end = time.monotonic() + wait
        while time.monotonic() < end and not gone():
            time.sleep(0.1)
        if gone():
            return


class ChildProcess:
    """One fabricwatch child process with its output in a log file."""

    def __init__(self, name: str, args: Sequence[str], log: Path, *,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
        self.name = name
        self.args = list(args)
        self.log = log
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ChildProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        die_with_owner = (sys.platform == "linux"
                          and threading.current_thread() is threading.main_thread())
        with open(self.log, "ab") as out:
            out.write(f"==== fabricwatch: starting {self.name} at {stamp}: "
                      f"{' '.join(self.args)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(  # noqa: S603 - our own argv, no shell
                self.args, cwd=self._cwd, env=self._env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=die_with_parent if die_with_owner else None)
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, grace_s: float = 20.0) -> None:
        if self.proc is None:
            return
        stop_group(self.proc.pid, self.proc, grace_s=grace_s)
        # Reap it: the group can look empty (a zombie leader) before poll() saw the exit.
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
