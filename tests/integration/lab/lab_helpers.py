"""Helpers of the lab tests: the stream worker as a process, the lab's policy."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from runtime.procgroups import stop_group

FABRICWATCH = str(Path(sys.executable).parent / "fabricwatch")


class StreamsWorker:
    """``fabricwatch worker`` (the Faust stream processors) as a real process, own app id."""

    def __init__(self, bootstrap: str, state_dir: Path, policy: Path) -> None:
        self.bootstrap = bootstrap
        self.state_dir = state_dir
        self.policy = policy
        self.app_id = f"fw-lab-{uuid.uuid4().hex[:8]}"
        self.log = state_dir / f"worker-{self.app_id}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, within_s: float = 120.0) -> None:
        env = {**os.environ, "FABRICWATCH_STATE_DIR": str(self.state_dir),
               "FABRICWATCH_KAFKA__BOOTSTRAP": self.bootstrap}
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(  # noqa: S603 - fixed argv
                [FABRICWATCH, "worker", "--no-ledger", "--app-id", self.app_id,
                 "--policy", str(self.policy)],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if b"Worker ready" in self.log.read_bytes():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited: {self.tail()}")
            time.sleep(0.2)
        raise AssertionError(f"worker not ready in {within_s:g} s: {self.tail()}")

    def tail(self) -> str:
        return self.log.read_bytes()[-3000:].decode(errors="replace")

    def stop(self) -> None:
        if self.proc is None:
            return
        # The worker's whole group, its leftovers too; never a group whose number was reused.
        stop_group(self.proc.pid, self.proc, grace_s=30)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)

LAB_POLICY = """
fabricHealth:
  flapDampening: {window: 30m, maxLinkDowns: 2, action: isolatePort}
  # ibsim reports every link as SDR (issue 12): expect what the lab can give
  degradedLink: {expectWidth: 4X, expectSpeed: SDR, action: isolatePort}
  breaker: {maxIsolatedPortsPerSU: 50%}
  runbook: {cleanCountersWait: 1s}
  # ibsim has no HCA that runs perftest or NCCL: the lab waives those probation checks
  probation:
    waive: [ib_write_bw-per-rail, nccl-allreduce-baseline]
    waivedBy: lab
    waiveReason: ibsim has no HCA to run perftest or NCCL
"""
