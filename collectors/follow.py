"""Follow a growing opensm log and hand each new batch of port events to a publisher.

The follower polls the file (``poll_s``), reads what was appended, parses complete lines
only (a line still being written waits for its newline) and carries the parser's state
(year, traps since the last SUBNET UP, line numbers) from batch to batch. A rotated log
(another inode) or a truncated one (smaller than what was read) is read again from its
start. A line the parser refuses is reported through ``on_error`` and skipped: one bad
line must not stop the follower. Lines that name a LID or GUID the topology does not know
go to ``on_unresolved``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from datetime import datetime, tzinfo
from pathlib import Path

from collectors.errors import ParseError
from collectors.lidmap import LidMap
from collectors.smlog import OpensmState, Unresolved, infer_year, parse_opensm_log, zone
from schemas import PortEvent

MAX_PENDING_BYTES = 1024 * 1024  # a "line" longer than this without a newline is garbage


async def follow_opensm(path: Path, publish: Callable[[list[PortEvent]], Awaitable[None]], *,
                        fabric: str, tz: str | tzinfo, lids: LidMap | None,
                        year: int | None = None, from_start: bool = False,
                        poll_s: float = 0.25, stop: asyncio.Event | None = None,
                        on_error: Callable[[ParseError], None] | None = None,
                        on_unresolved: Callable[[Unresolved], None] | None = None,
                        on_ready: Callable[[int], None] | None = None) -> None:
    """Follow ``path`` until ``stop`` is set (or forever), publishing each batch's events.

    Without ``from_start`` the follower begins at the current end of the file, as
    ``tail -f`` does: the history is for ``fabricwatch ingest opensm`` to replay.
    ``on_ready`` is called once, with the byte offset the follower starts from, when it has
    first looked at the file: lines appended after that are published.
    """
    zone_info = zone(tz)
    stop = stop or asyncio.Event()
    state: OpensmState | None = None
    inode: int | None = None
    offset = 0
    pending = b""
    while not stop.is_set():
        try:
            info = os.stat(path)
        except FileNotFoundError:
            info = None  # between a rotation's rename and the new file: wait
        if info is not None:
            if inode != info.st_ino or info.st_size < offset:
                if inode is not None or from_start:
                    offset = 0  # rotated or truncated: the new file from its start
                else:
                    offset = info.st_size  # first look: start at the end
                inode, pending = info.st_ino, b""
                if on_ready is not None:
                    on_ready(offset)
                    on_ready = None
            if info.st_size > offset:
                with path.open("rb") as handle:
                    handle.seek(offset)
                    chunk = handle.read(info.st_size - offset)
                offset += len(chunk)
                pending += chunk
                cut = pending.rfind(b"\n")
                if cut < 0 and len(pending) > MAX_PENDING_BYTES:
                    pending = b""  # no newline in a megabyte: not a log line, drop it
                if cut >= 0:
                    complete, pending = pending[:cut + 1], pending[cut + 1:]
                    text = complete.decode("utf-8", errors="replace")
                    if state is None:
                        now = datetime.now(tz=zone_info)
                        state = OpensmState(year=year or infer_year(text, now=now))
                    events = _parse(text, state, fabric=fabric, tz=zone_info, lids=lids,
                                    on_error=on_error, on_unresolved=on_unresolved)
                    if events:
                        await publish(events)
        try:
            await asyncio.wait_for(stop.wait(), timeout=poll_s)
        except TimeoutError:
            pass


def _parse(text: str, state: OpensmState, *, fabric: str, tz: tzinfo, lids: LidMap | None,
           on_error: Callable[[ParseError], None] | None,
           on_unresolved: Callable[[Unresolved], None] | None) -> list[PortEvent]:
    try:
        result = parse_opensm_log(text, fabric=fabric, tz=tz, year=state.year, lids=lids,
                                  state=state)
    except ParseError:
        # Somewhere in the batch is a line the parser refuses: go line by line so that
        # only that line is lost.
        events: list[PortEvent] = []
        for line in text.splitlines(keepends=True):
            try:
                one = parse_opensm_log(line, fabric=fabric, tz=tz, year=state.year,
                                       lids=lids, state=state)
            except ParseError as error:
                state.lines_before += 1
                if on_error is not None:
                    on_error(error)
                continue
            events.extend(one.events)
            for note in one.unresolved:
                if on_unresolved is not None:
                    on_unresolved(note)
        return events
    for note in result.unresolved:
        if on_unresolved is not None:
            on_unresolved(note)
    return result.events
