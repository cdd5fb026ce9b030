"""The simulator's ibnetdiscover file is a net file the real ibsim loads, and the real
ibnetdiscover, run against that ibsim, discovers the same fabric (names, ports, LIDs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.ibnetdiscover import parse_ibnetdiscover
from sim.topology import generate

IBSIM = shutil.which("ibsim")
IBSIM_RUN = shutil.which("ibsim-run")
IBNETDISCOVER = shutil.which("ibnetdiscover") or "/usr/sbin/ibnetdiscover"

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(IBSIM is None or IBSIM_RUN is None or not Path(IBNETDISCOVER).exists(),
                       reason="needs ibsim-utils and infiniband-diags"),
]


@pytest.fixture
def ibsim_with(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """The net file path to fill, and an environment with a socket name of this test alone."""
    net = tmp_path / "net"
    env = dict(os.environ, IBSIM_SOCKNAME=f"/tmp/fw-ibsim-{uuid.uuid4().hex[:8]}")
    env.pop("IBSIM_SERVER_NAME", None)
    env.pop("IBSIM_SERVER_PORT", None)
    yield net, env


def _discover(net: Path, env: dict[str, str], log: Path) -> str:
    assert IBSIM is not None and IBSIM_RUN is not None
    with open(log, "wb") as out:
        proc = subprocess.Popen([IBSIM, "-s", "-n", str(net)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 30
        while b"parsed" not in log.read_bytes() and time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"ibsim exited: {log.read_text()}")
            time.sleep(0.1)
        time.sleep(0.5)
        result = subprocess.run([IBSIM_RUN, IBNETDISCOVER], capture_output=True, text=True,
                                env=env, timeout=120, check=False)
        assert result.returncode == 0, result.stderr
        return result.stdout
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("preset", ["lab", "su"])
def test_ibsim_loads_and_rediscovers(preset: str, ibsim_with: tuple[Path, dict[str, str]],
                                     tmp_path: Path) -> None:
    net, env = ibsim_with
    fab = generate(preset)
    net.write_text(fab.to_ibnetdiscover())
    text = _discover(net, env, tmp_path / "ibsim.log")
    seen = parse_ibnetdiscover(text, fabric=preset, ts=0)
    # ibsim trains every link at SDR (it does not model NDR); everything else must match.
    ours = [{k: v for k, v in row.items() if k != "speed"} for row in fab.topology_links()]
    theirs = [link.model_dump(exclude={"speed"}) for link in seen.links]
    assert theirs == ours
    nodes = {n["name"]: n for n in seen.model_dump()["nodes"]}
    for sw in fab.switches:
        assert nodes[sw.name]["lids"]["0"] == sw.lid
    for hca in fab.hcas[:8]:
        assert nodes[hca.device]["guid"] == f"0x{hca.guid:016x}"
