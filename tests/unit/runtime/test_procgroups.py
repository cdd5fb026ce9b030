"""Stopping a process group never signals a group whose number the kernel may have reused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.procgroups import group_members, stop_group


def _leader(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def test_a_group_whose_members_are_all_gone_is_not_signalled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _leader("pass")
    proc.wait(10)  # reaped: the number is free for the kernel to hand out again
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: sent.append((pgid, sig)))
    stop_group(proc.pid, proc, grace_s=1)
    stop_group(proc.pid, None, grace_s=1)
    assert sent == []


def test_a_running_group_is_stopped_with_the_member_its_leader_left_behind() -> None:
    # The leader starts a child in its own group and exits; the child must still be stopped.
    proc = _leader("import subprocess, sys; "
                   "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])")
    proc.wait(10)
    deadline = time.monotonic() + 10
    while not group_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = group_members(proc.pid)
    assert left, "the leader's child should still run in its group"
    stop_group(proc.pid, proc, grace_s=5)
    assert group_members(proc.pid) == []
    for pid in left:  # reparented to init (or a subreaper): gone or a zombie by now
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        assert state == "Z"


def test_a_group_that_ignores_sigterm_is_killed() -> None:
    proc = _leader("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                   "print('ready', flush=True); time.sleep(60)")
    time.sleep(0.5)
    stop_group(proc.pid, proc, grace_s=0.5, kill_wait_s=5)
    assert proc.wait(5) == -signal.SIGKILL
