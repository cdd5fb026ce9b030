"""A fresh lab (ibsim + the real opensm) per test, on the simulator's ``lab`` preset."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # lab_helpers, shared with the tests

from lab_helpers import LAB_POLICY, StreamsWorker  # noqa: E402

from fabricwatch.lab import UMAD2SIM, LabStack  # noqa: E402
from sim.topology import generate  # noqa: E402

MISSING = [tool for tool in ("ibsim", "opensm", "ibnetdiscover", "perfquery", "iblinkinfo",
                             "ibportstate") if shutil.which(tool) is None]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[LabStack]:
    if shutil.which("ibsim") is None:
        pytest.skip("the ibsim binary is absent (make lab-deps installs ibsim-utils, opensm, "
                    "infiniband-diags)")
    assert not MISSING, f"ibsim is here but not {MISSING}"
    assert UMAD2SIM.exists(), f"{UMAD2SIM} missing"
    net = tmp_path / "lab.net"
    net.write_text(generate("lab").to_ibnetdiscover(), encoding="utf-8")
    stack = LabStack(tmp_path / "state")
    stack.up(net, timeout_s=60)
    try:
        yield stack
    finally:
        stack.down()


@pytest.fixture
def streams_worker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[StreamsWorker]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(LAB_POLICY, encoding="utf-8")
    worker = StreamsWorker(kafka_bootstrap, tmp_path / "worker", policy)
    try:
        yield worker
    finally:
        worker.stop()
