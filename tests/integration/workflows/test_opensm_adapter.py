"""The ibportstate controller against the real ibsim (ibsim-utils) and infiniband-diags:
isolate disables the port's physical link, un-isolate enables it, both idempotent."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.topology import generate
from workflows.adapters.base import AdapterError
from workflows.adapters.opensm import IbPortStateController
from workflows.remediation.models import PortRef

IBSIM = shutil.which("ibsim")
IBSIM_RUN = shutil.which("ibsim-run")
IBPORTSTATE = shutil.which("ibportstate") or "/usr/sbin/ibportstate"

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(IBSIM is None or IBSIM_RUN is None or not Path(IBPORTSTATE).exists(),
                       reason="needs ibsim-utils and infiniband-diags"),
]


@pytest.fixture
def ibsim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A running ibsim of the simulator's lab fabric; yields the first switch's name."""
    assert IBSIM is not None
    fab = generate("lab")
    net = tmp_path / "net"
    net.write_text(fab.to_ibnetdiscover())
    monkeypatch.setenv("IBSIM_SOCKNAME", f"/tmp/fw-ibsim-{uuid.uuid4().hex[:8]}")
    log = tmp_path / "ibsim.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([IBSIM, "-s", "-n", str(net)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=dict(os.environ))
    try:
        deadline = time.monotonic() + 30
        while b"parsed" not in log.read_bytes() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
        time.sleep(0.5)
        yield fab.switches[0].name
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_ibportstate_isolates_on_ibsim(ibsim: str) -> None:
    assert IBSIM_RUN is not None
    # no SM runs here, so the attached switch is addressed by direct route "0"
    ctl = IbPortStateController(wrapper=[IBSIM_RUN], ibportstate=IBPORTSTATE,
                                address=lambda p: ["-D", "0"])
    port = PortRef(fabric="lab", device=ibsim, port=1)
    assert not await ctl.is_isolated(port)
    assert await ctl.isolate(port) is True
    assert await ctl.phys_state(port) == "Disabled"
    assert await ctl.isolate(port) is False  # a retry changes nothing
    assert await ctl.unisolate(port) is True
    assert await ctl.phys_state(port) != "Disabled"
    assert await ctl.unisolate(port) is False
    with pytest.raises(AdapterError):
        await ctl.is_isolated(port.model_copy(update={"port": 99}))  # no such port
