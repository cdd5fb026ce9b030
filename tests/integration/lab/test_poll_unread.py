"""A poll round that times out on a switch publishes what it read and names what it could not."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]

from collectors.live.poll_ibdiags import IbdiagsPoller, PollConfig, SwitchTarget
from collectors.publish import Publisher
from fabricwatch.lab import LabStack
from schemas import Counters, decode
from schemas.topics import COUNTERS

pytestmark = [pytest.mark.lab, pytest.mark.integration]


async def test_unanswered_switch_ports_are_named_on_the_wire(lab: LabStack,
                                                             kafka_bootstrap: str) -> None:
    ghost = f"ghost-{uuid.uuid4().hex[:8]}"
    fabric = f"lab-{uuid.uuid4().hex[:6]}"
    async with Publisher(kafka_bootstrap) as pub:
        poller = IbdiagsPoller(PollConfig(fabric=fabric, timeout_s=2.0, concurrency=2,
                                          hcas=False), pub, lab.tool_runner())
        await poller.discover()
        # a LID nobody answers (the SM gave out 1..22): its perfquery times out
        report = await poller.sample([*poller.targets[:2], SwitchTarget(ghost, 999, (1, 7))])
    assert set(report.failed) == {ghost} and len(report.published) == 2
    consumer = AIOKafkaConsumer(COUNTERS.name, bootstrap_servers=kafka_bootstrap,
                                auto_offset_reset="earliest", group_id=None)
    await consumer.start()
    got: dict[str, Counters] = {}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(got) < 3:
            batch = await consumer.getmany(timeout_ms=1000)
            for records in batch.values():
                for rec in records:
                    event = decode(rec.value)
                    if isinstance(event, Counters) and event.fabric == fabric:
                        got[event.device] = event
            await asyncio.sleep(0)
    finally:
        await consumer.stop()
    assert set(got) == {ghost, *(t.device for t in poller.targets[:2])}
    unread = got[ghost]
    assert [s.port for s in unread.ports] == [1, 7]
    assert all(s.error and "perfquery of LID 999" in s.error for s in unread.ports)
    assert all(s.symbol_errors is None for s in unread.ports)
    read = got[poller.targets[0].device]
    assert read.ports and all(s.error is None and s.symbol_errors is not None
                              for s in read.ports)
