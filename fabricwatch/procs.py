"""Child processes that fabricwatch starts and must stop: process groups, logs, no orphans
(the group primitives are in ``runtime.procgroups``).

Each child runs in a session (and process group) of its own, so stopping it reaches every
process it forked, and Ctrl-C in the terminal reaches only its owner, which then stops the
children in order. On Linux a child started from the main thread also dies with its owner
(PR_SET_PDEATHSIG), so a killed owner leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from runtime.procgroups import die_with_parent, stop_group


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
