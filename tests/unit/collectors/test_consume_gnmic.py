"""The gnmic consumer's handling of one record: events, or a dead letter with the reason."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson

from collectors.gnmic_map import GnmicMapper, MapResult
from collectors.live.consume_gnmic import GnmicConsumer
from schemas.topics import DLQ

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "gnmic"


class Recorder:
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.raw: list[tuple[str, bytes | None, bytes]] = []

    async def send_many(self, events: Any) -> int:
        self.events.extend(events)
        return len(events)

    async def send_raw(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.raw.append((topic, key, value))

    async def flush(self) -> int:
        return 0


class Broken(GnmicMapper):
    def map(self, raw: bytes) -> MapResult:
        raise RuntimeError("a bug")


async def test_records_become_events_or_dead_letters_keyed_by_the_source_topic() -> None:
    pub = Recorder()
    seen: list[str] = []
    consumer = GnmicConsumer("127.0.0.1:1", "gnmic-out", pub, GnmicMapper("f"),
                             on_dead_letter=seen.append)
    await consumer.handle((FIX / "event-format-sonic-counters-db.json").read_bytes(),
                          partition=0, offset=0)
    await consumer.handle(b"garbage", partition=0, offset=1)
    assert [e.device for e in pub.events] == ["leaf-su01-r3"]
    ((topic, key, value),) = pub.raw
    letter = orjson.loads(value)
    assert (topic, key, letter["source_topic"], letter["offset"]) == (DLQ.name, b"gnmic-out",
                                                                      "gnmic-out", 1)
    assert base64.b64decode(letter["raw_b64"]) == b"garbage" and "not JSON" in letter["reason"]
    assert seen == ["gnmic-out"]
    assert (consumer.stats.messages, consumer.stats.events, consumer.stats.dead_letters) == (2, 1, 1)


async def test_a_bug_in_the_mapper_dead_letters_the_message_and_goes_on() -> None:
    pub = Recorder()
    consumer = GnmicConsumer("127.0.0.1:1", "t", pub, Broken("f"))
    await consumer.handle(b"{}", partition=2, offset=7)
    await consumer.handle(None, partition=2, offset=8)
    reasons = [orjson.loads(v)["reason"] for _t, _k, v in pub.raw]
    assert reasons == ["processing failed: RuntimeError('a bug')"] * 2
