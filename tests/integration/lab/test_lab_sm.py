"""The subnet manager as the real opensm, sminfo and saquery report it (ibsim lab).

The poller's ``sminfo`` / ``saquery -s`` round and the opensm log follower publish on
``fabric.sm``; both name the same master SM, and the log's start-up heavy sweep is measured.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]

from collectors.live.poll_ibdiags import IbdiagsPoller, PollConfig, PollReport
from collectors.live.tail_opensm import LogFollower, OpensmTail
from collectors.publish import Publisher
from fabricwatch.lab import LabStack
from schemas import SmEvent, decode
from schemas.topics import SM

pytestmark = [pytest.mark.lab, pytest.mark.integration]


async def test_sminfo_saquery_and_the_log_name_one_master(lab: LabStack, kafka_bootstrap: str,
                                                          tmp_path: Path) -> None:
    fabric = f"lab-sm-{uuid.uuid4().hex[:6]}"
    async with Publisher(kafka_bootstrap) as pub:
        poller = IbdiagsPoller(PollConfig(fabric=fabric, timeout_s=30.0), pub,
                               lab.tool_runner())
        report = PollReport(ts=int(time.time() * 1000))
        await poller.read_sm(report)
        await pub.flush()
        assert report.sm_failed == {}
        follower = LogFollower(lab.opensm_log, tmp_path / "tail.json")
        try:
            tail = OpensmTail(follower, pub, fabric=fabric)
            log_events = tail.sm_events("\n".join(follower.read()))
        finally:
            follower.close()
    consumer = AIOKafkaConsumer(SM.name, bootstrap_servers=kafka_bootstrap,
                                auto_offset_reset="earliest", group_id=None)
    await consumer.start()
    got: list[SmEvent] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(got) < 2:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                for rec in records:
                    ev = decode(rec.value)
                    if isinstance(ev, SmEvent) and ev.fabric == fabric:
                        got.append(ev)
    finally:
        await consumer.stop()
    by_source = {e.source: e for e in got}
    master = by_source["sminfo"]
    assert master.event == "state" and master.state == "master"
    standby = by_source["saquery"]
    assert standby.event == "standby" and standby.sms == []  # the lab runs one SM
    # the log's own "Entering MASTER state" names the same SM (its port GUID)
    states = [e for e in log_events if e.event == "state" and e.state == "master"]
    assert states and states[-1].sm == master.sm
    sweeps = [e for e in log_events if e.event == "sweep"]
    assert sweeps and sweeps[0].trigger == "start-up"
    assert sweeps[0].duration_ms is not None and sweeps[0].duration_ms >= 0
