"""A Faust worker commits a consumer offset only once the table changelog records written
for the messages before it are on the broker (``streams.commit_gate``), even when the
producer buffer hands records on slowly; Faust's own commit passes them (the control).

Real broker, real Faust worker process (``commit_gate_app.py``); the only thing changed in
the worker is a delay before each record leaves the buffer."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # type: ignore[import-untyped]
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # type: ignore[import-untyped]
from aiokafka.errors import KafkaError  # type: ignore[import-untyped]

APP = Path(__file__).with_name("commit_gate_app.py")
MESSAGES = 40
DELAY_S = 0.25  # per record: Faust's flush gives up after 0.1 s without a send
TRICKLE_S = 0.4


async def watch(bootstrap: str, source: str, app_id: str, mode: str
                ) -> tuple[list[tuple[int, int]], str]:
    """(committed offset, changelog records) sampled while the worker runs, and its log."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    ends = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await producer.start()
    await ends.start()
    proc = None
    samples: list[tuple[int, int]] = []
    try:
        await admin.create_topics([NewTopic(source, 1, 1)])
        for i in range(MESSAGES // 2):  # a backlog, then a trickle slower than the hand-on
            await producer.send(source, f"m{i}".encode())
        await producer.flush()

        async def trickle() -> None:
            for i in range(MESSAGES // 2, MESSAGES):
                await asyncio.sleep(TRICKLE_S)
                await producer.send_and_wait(source, f"m{i}".encode())
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(APP), bootstrap, source, app_id, mode, str(DELAY_S),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        sender = asyncio.create_task(trickle())
        changelog = TopicPartition(f"{app_id}-seen-changelog", 0)
        deadline = time.monotonic() + 60 + MESSAGES * DELAY_S
        while time.monotonic() < deadline and proc.returncode is None:
            try:
                offsets = await admin.list_consumer_group_offsets(app_id)
            except KafkaError as exc:  # the group's coordinator not up yet on a new broker
                if not exc.retriable:
                    raise
                offsets = {}
            committed = max((m.offset for tp, m in offsets.items() if tp.topic == source),
                            default=-1)
            if committed >= 0:  # read after the commit: the changelog only grows
                await ends._client.force_metadata_update()
                written = (await ends.end_offsets([changelog]))[changelog]
                samples.append((committed, written))
                if committed == written == MESSAGES:
                    break
            await asyncio.sleep(0.2)
        await sender
    finally:
        await producer.stop()
        await ends.stop()
        await admin.close()
        log = ""
        if proc is not None:
            if proc.returncode is None:
                proc.kill()
            log = (await proc.communicate())[0].decode(errors="replace")[-3000:]
    return samples, log


@pytest.mark.parametrize("mode", ["gated", "plain"])
async def test_an_offset_is_committed_only_after_its_changelog_records(
        kafka_bootstrap: str, mode: str) -> None:
    tag = uuid.uuid4().hex[:8]
    samples, log = await watch(kafka_bootstrap, f"gate-src-{tag}", f"gate-{mode}-{tag}", mode)
    assert samples, log
    ahead = [(c, w) for c, w in samples if c > w]
    if mode == "gated":
        assert not ahead, (ahead, log)
        assert len({c for c, _ in samples}) > 5, samples  # commits went on meanwhile
        # and it is not stuck: everything is committed once the records are out
        assert samples[-1] == (MESSAGES, MESSAGES), (samples[-5:], log)
    else:
        # Faust's own commit passes records still in its buffer: a kill -9 here loses them
        assert ahead, (samples, log)
