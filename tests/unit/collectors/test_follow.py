"""The opensm log follower on a file this test appends to, truncates and rotates."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from collectors.errors import ParseError
from collectors.follow import follow_opensm
from collectors.ibnetdiscover import parse_nodes
from collectors.lidmap import LidMap
from collectors.smlog import Unresolved
from schemas import PortEvent

FIXTURES = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures"
SAMPLE = (Path(__file__).parent / "samples" / "opensm-verbose-port-changes.log").read_text()
LIDS = LidMap.from_nodes(parse_nodes(
    (FIXTURES / "ibnetdiscover" / "topograph-ndr-fattree.txt").read_text()))
LINES = SAMPLE.splitlines(keepends=True)


class Follower:
    def __init__(self, path: Path, *, from_start: bool = False) -> None:
        self.events: list[PortEvent] = []
        self.errors: list[ParseError] = []
        self.unresolved: list[Unresolved] = []
        self.stop = asyncio.Event()

        async def publish(batch: list[PortEvent]) -> None:
            self.events.extend(batch)

        self.task = asyncio.create_task(follow_opensm(
            path, publish, fabric="lab", tz="UTC", lids=LIDS, year=2025, poll_s=0.02,
            from_start=from_start, stop=self.stop, on_error=self.errors.append,
            on_unresolved=self.unresolved.append))

    async def settle(self) -> None:
        await asyncio.sleep(0.3)  # many polls (20 ms each), room for a slow machine

    async def close(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 5)


def _append(path: Path, text: str) -> None:
    with path.open("a") as handle:
        handle.write(text)


async def test_follows_from_the_end_and_waits_for_whole_lines(tmp_path: Path) -> None:
    log = tmp_path / "opensm.log"
    log.write_text("".join(LINES[:4]))  # history: not replayed by a follower
    follower = Follower(log)
    await follower.settle()
    assert follower.events == []
    line = LINES[2]  # leaf port 35 ACTIVE -> DOWN
    _append(log, line[:30])  # half a line: nothing yet
    await follower.settle()
    assert follower.events == []
    _append(log, line[30:])
    await follower.settle()
    await follower.close()
    assert [(e.device, e.port, e.state) for e in follower.events] == [
        ("A09-P1-IBLEAF-04-04", 35, "down")]


async def test_trap_memory_carries_across_batches(tmp_path: Path) -> None:
    log = tmp_path / "opensm.log"
    log.write_text("")
    follower = Follower(log)
    await follower.settle()
    _append(log, LINES[0])  # trap 128 from LID 73
    await follower.settle()
    _append(log, LINES[2])  # the port change of LID 73's switch, in a later batch
    await follower.settle()
    await follower.close()
    assert [(e.port, e.trap) for e in follower.events] == [(35, 128)]


async def test_rotation_truncation_and_a_bad_line(tmp_path: Path) -> None:
    log = tmp_path / "opensm.log"
    log.write_text("")
    follower = Follower(log, from_start=True)
    await follower.settle()
    _append(log, LINES[2] + "Nov 29 17:40:02 000000 [55AEA6C0] 0x04 -> \x00 binary\n"
            + LINES[3])
    await follower.settle()
    assert len(follower.events) == 2 and len(follower.errors) == 1
    os.rename(log, tmp_path / "opensm.log.1")  # logrotate
    log.write_text(LINES[9])  # unknown GUID: unresolved, not an error
    _append(log, LINES[5] + LINES[6])  # DOWN -> INIT (no event), ARMED -> ACTIVE (up)
    await follower.settle()
    log.write_text(LINES[2])  # truncated in place and rewritten
    await follower.settle()
    await follower.close()
    assert [(e.port, e.state) for e in follower.events] == [
        (35, "down"), (32, "down"), (35, "up"), (35, "down")]
    assert [u.reason for u in follower.unresolved] == [
        "GUID 0x0000000000000bad is not in the topology"]
