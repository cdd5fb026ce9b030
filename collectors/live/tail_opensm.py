"""``fabricwatch tail opensm PATH``: follow opensm's log and publish ``port_event``s, and the
SM's own events (heavy sweeps with their trigger and ports, its state, trap storms) on
``fabric.sm`` (``collectors.smlog``).

Following. ``LogFollower`` reads complete lines only (a half-written last line waits for its
newline) and keeps its place as (device, inode, offset) in a JSON file in the state folder,
saved only after the events of the lines read were acknowledged by the broker. So:

* rotation by rename (logrotate ``create``): the open handle is read to its end, then the new
  file from its start; nothing is lost;
* truncation in place (``copytruncate``, opensm ``-L`` log limit, opensm ``-e``): a size below
  the offset means the file was cut; reading restarts at 0;
* a follower restart: the saved inode is looked for under the path, then among the rotated
  files next to it (``opensm.log.1``, ``opensm.log-2026...``), read from the saved offset,
  then the current file from 0; a line is neither lost nor read twice (a crash between the
  broker's acknowledgement and the save repeats at most one batch, whose event ids are
  content hashes, so consumers drop the repeats);
* an opensm restart appends to the same file (without ``-e``) and changes nothing here.

Port resolution (the decision issue 12 asks for). opensm 3.3.23 at its default level logs
``log_trap_info: Received Generic Notice type:1 num:128 (Link state change) ... from LID:N``
naming the switch only; it has no per-port "changed state" line at any level (checked:
``-D 0x07`` and ``-V`` logs of a flap carry none). So a fresh trap 128 makes the follower ask
the fabric: opensm logs the directed route to the trapping switch on the next line (``SM
class trap 128: Directed Path Dump ... Path = 0,5``), and ``iblinkinfo -D 0,5 -n 0 -l``
reads that one switch's ports (a whole-fabric ``iblinkinfo --switches-only -l`` takes 20 s
at 10k GPUs; it is the fallback when a route is missing, and the start-up baseline);
compared with the previous reading this gives every switch port whose physical state changed
(``LinkUp`` -> anything else is ``down``, back to ``LinkUp`` is ``up``), stamped with the
trap's time and ``trap: 128``. A trap older than ``fresh_s`` (read while catching up after a
restart) cannot be resolved by asking now: it is counted as unresolved and logged, and
the counters' ``link_downed`` increase later reveals the down to the flap detector. Host
ports leaving and joining the subnet (``drop_mgr_remove_port`` / ``Discovered new port``)
and ports marked unhealthy come from ``collectors.smlog.parse_opensm_log``, with LIDs and
GUIDs resolved through the latest ``topology`` (``lids()``, rebuilt per topology event).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any, Protocol

from collectors.common import stable_id
from collectors.errors import ParseError
from collectors.ibdiags import parse_iblinkinfo
from collectors.lidmap import LidMap
from collectors.live.tools import ToolError, ToolRunner
from collectors.smlog import OpensmState, parse_opensm_log, zone
from schemas import PortEvent, SmEvent

log = logging.getLogger(__name__)

_TRAP = re.compile(r"^(\w{3})\s+(\d{1,2})\s+(\d{2}):(\d{2}):(\d{2})\s+(\d{6})\s+\[[0-9A-Fa-f]+\]"
                   r"\s+0x[0-9A-Fa-f]{2}\s+->\s?log_trap_info: Received Generic Notice "
                   r"type:\d+ num:(\d+) \(([^)]*)\).*?from LID:(\d+)")
# The line opensm writes right after the trap: the directed route to the switch that sent it.
_TRAP_PATH = re.compile(r"SM class trap (\d+): Directed Path Dump of \d+ hop path: Path = ([\d,]+)")
_DR_PATH = re.compile(r"^0(?:,\d{1,3}){0,63}$")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
LINK_TRAPS = {128}
READ_CHUNK = 1 << 20


class PublisherLike(Protocol):
    async def send_many(self, events: Any) -> Any: ...

    async def flush(self) -> Any: ...


# ---------------------------------------------------------------- following the file


@dataclass
class Position:
    dev: int
    inode: int
    offset: int
    head: str = ""  # hash of the file's first head_len bytes: an inode number can be reused
    head_len: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"dev": self.dev, "inode": self.inode, "offset": self.offset,
                "head": self.head, "head_len": self.head_len}


HEAD_BYTES = 256


def _head(path: Path, length: int) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(length)
    except OSError:
        return ""
    return hashlib.sha256(data).hexdigest()[:16] if len(data) == length else ""


def _is(path: Path, pos: Position) -> bool:
    """``path`` is the file ``pos`` was taken in: same inode and same first bytes."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if (st.st_dev, st.st_ino) != (pos.dev, pos.inode):
        return False
    return not pos.head_len or _head(path, pos.head_len) == pos.head


class LogFollower:
    """Complete new lines of ``path`` across rotation, truncation and restarts."""

    def __init__(self, path: Path, state_file: Path) -> None:
        self.path = Path(path)
        self.state_file = Path(state_file)
        self._fh: Any = None
        self._pos: Position | None = None  # where the next unread byte is (complete lines)
        self._committed: dict[str, int] | None = None
        self.lost: list[str] = []  # notes on data that could not be read (rotated away)

    # -- persistence
    def _load(self) -> Position | None:
        try:
            data = json.loads(self.state_file.read_text(encoding="utf-8"))
            return Position(int(data["dev"]), int(data["inode"]), int(data["offset"]),
                            str(data.get("head", "")), int(data.get("head_len", 0)))
        except (FileNotFoundError, KeyError, TypeError, ValueError):
            return None

    def commit(self) -> None:
        """Save the position after the lines returned so far (call once they are published)."""
        if self._pos is None:
            return
        if self._fh is not None and self._pos.head_len < min(HEAD_BYTES, self._pos.offset):
            length = min(HEAD_BYTES, self._pos.offset)
            self._pos.head = hashlib.sha256(os.pread(self._fh.fileno(), length, 0)).hexdigest()[:16]
            self._pos.head_len = length
        data = self._pos.to_json()
        if data == self._committed:
            return
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({**data, "path": str(self.path)}), encoding="utf-8")
        os.replace(tmp, self.state_file)
        self._committed = data

    # -- opening
    def _open(self, path: Path, offset: int, known: Position | None = None) -> bool:
        try:
            fh = open(path, "rb")  # noqa: SIM115 - kept open across calls on purpose
        except FileNotFoundError:
            return False
        st = os.fstat(fh.fileno())
        if st.st_size < offset:
            offset = 0  # cut while we were away
        fh.seek(offset)
        self._close()
        self._fh = fh
        self._pos = Position(st.st_dev, st.st_ino, offset)
        if known is not None and offset:
            self._pos.head, self._pos.head_len = known.head, known.head_len
        return True

    def _close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def _rotated_candidates(self) -> list[Path]:
        parent = self.path.parent
        return sorted(p for p in parent.glob(self.path.name + "*") if p != self.path)

    def _resume(self) -> list[bytes]:
        """First call: pick up from the saved position; returns lines of a rotated file."""
        saved = self._load()
        out: list[bytes] = []
        if saved is None:
            self._open(self.path, 0)
            return out
        if _is(self.path, saved):
            self._open(self.path, saved.offset, saved)
            return out
        for cand in self._rotated_candidates():
            if _is(cand, saved):
                if self._open(cand, saved.offset, saved):
                    out = self._drain()
                break
        else:
            self.lost.append(f"the file read last (inode {saved.inode}) is gone; lines "
                             f"after offset {saved.offset} of it were not read")
        self._close()
        self._open(self.path, 0)
        return out

    # -- reading
    def _drain(self) -> list[bytes]:
        assert self._fh is not None and self._pos is not None  # noqa: S101 - internal
        out: list[bytes] = []
        while True:
            chunk = self._fh.read(READ_CHUNK)
            if not chunk:
                break
            end = chunk.rfind(b"\n")
            if end < 0:
                self._fh.seek(-len(chunk), os.SEEK_CUR)  # a half-written line: wait for it
                break
            out.extend(chunk[: end + 1].splitlines())
            consumed = end + 1
            self._pos.offset += consumed
            if consumed < len(chunk):
                self._fh.seek(consumed - len(chunk), os.SEEK_CUR)
        return out

    def read(self) -> list[str]:
        """New complete lines since the last call (decoded; undecodable bytes replaced)."""
        lines: list[bytes] = []
        if self._pos is None:
            lines += self._resume()
            if self._pos is None:
                return [b.decode("utf-8", "replace") for b in lines]
        if self._fh is None and not self._open(self.path, 0):
            return [b.decode("utf-8", "replace") for b in lines]
        assert self._pos is not None  # noqa: S101 - set by _open
        lines += self._drain()
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None  # rotated and not recreated yet: keep reading the old handle
        if st is not None:
            if (st.st_dev, st.st_ino) != (self._pos.dev, self._pos.inode):
                lines += self._drain()  # the rest of the rotated file, then the new one
                self._open(self.path, 0)
                lines += self._drain()
            elif st.st_size < self._pos.offset:
                self._open(self.path, 0)  # truncated in place
                lines += self._drain()
        return [b.decode("utf-8", "replace") for b in lines]

    def close(self) -> None:
        self._close()


# ---------------------------------------------------------------- traps to ports


@dataclass
class PortScan:
    """Physical state of every switch port, from one ``iblinkinfo --switches-only -l``."""

    runner: ToolRunner
    fabric: str
    timeout_s: float = 30.0

    async def __call__(self, lids: LidMap | None, path: str | None = None
                       ) -> dict[tuple[str, int], str]:
        """Every switch port, or (``path``, a directed route) the one switch at its end."""
        argv = ["iblinkinfo", *self.runner.local_args()]
        if path is not None:
            if not _DR_PATH.match(path):
                raise ValueError(f"{path!r} is not a directed route")
            argv += ["-D", path, "-n", "0", "-l"]
        else:
            argv += ["--switches-only", "-l"]
        text = await self.runner.check(argv, self.timeout_s)
        states: dict[tuple[str, int], str] = {}
        for ev in parse_iblinkinfo(text, fabric=self.fabric, ts=0, lids=lids):
            for sample in ev.ports:
                extra = sample.model_extra or {}
                states[(ev.device, sample.port)] = str(extra.get("phys_state") or "")
        return states


ScanFn = Callable[..., Any]  # (lids, path=None) -> {(device, port): phys_state}


@dataclass
class TailStats:
    lines: int = 0
    events: int = 0
    traps: int = 0
    stale_traps: int = 0
    unresolved: int = 0
    scans: int = 0
    targeted_scans: int = 0
    scan_failures: int = 0
    notes: list[str] = field(default_factory=list)


def _up(phys: str) -> bool:
    return phys.replace(" ", "").lower() == "linkup"


class OpensmTail:
    """Lines of opensm's log -> port events on ``fabric.port-events``."""

    def __init__(self, follower: LogFollower, publisher: PublisherLike, *, fabric: str,
                 tz: str | tzinfo = "UTC", lids: Callable[[], LidMap | None] = lambda: None,
                 scan: ScanFn | None = None, fresh_s: float = 30.0,
                 peers: Callable[[], dict[tuple[str, int], tuple[str, int]]] = dict,
                 clock: Callable[[], float] = time.time) -> None:
        self.follower = follower
        self.publisher = publisher
        self.fabric = fabric
        self.tz = zone(tz)
        self.lids = lids
        self.scan = scan
        self.peers = peers  # port -> the other cable end, from the latest topology
        self.fresh_s = fresh_s
        self.clock = clock
        self.stats = TailStats()
        self._ports: dict[tuple[str, int], str] | None = None
        # The SM's own events (heavy sweeps, state, trap storms) span batches: a sweep
        # begins in one read and ends (SUBNET UP) in a later one, so their parse keeps state.
        self._sm_state = OpensmState(year=datetime.fromtimestamp(clock(), UTC).year)

    def _line_ts(self, m: re.Match[str]) -> int:
        mon, day, hh, mm, ss, usec = m.groups()[:6]
        now = datetime.fromtimestamp(self.clock(), self.tz)
        month = _MONTHS.index(mon) + 1
        year = now.year - 1 if month > now.month else now.year  # a December line in January
        dt = datetime(year, month, int(day), int(hh), int(mm), int(ss), int(usec), tzinfo=self.tz)
        return int(dt.timestamp() * 1000)

    async def baseline(self) -> None:
        """Read every switch port's state once, so the first trap has something to compare."""
        if self.scan is None:
            return
        try:
            self._ports = await self.scan(self.lids())
            self.stats.scans += 1
        except (ToolError, ParseError) as exc:
            self.stats.scan_failures += 1
            log.warning("baseline port scan failed: %s", exc)

    def _peers_unread(self, before: dict[tuple[str, int], str],
                      now: dict[tuple[str, int], str], read: set[str]
                      ) -> set[tuple[str, int]] | None:
        """Switch ports at the far end of a changed cable that were not read (None: a
        changed port whose far end is not known at all)."""
        peers = self.peers()
        far_ends: set[tuple[str, int]] = set()
        for key, new in now.items():
            if key[0] in read and _up(before.get(key, "")) != _up(new):
                far = peers.get(key)
                if far is None:
                    return None
                if far in before and far[0] not in read:
                    far_ends.add(far)
        return far_ends

    async def _full_scan(self, lids: LidMap | None, need: set[tuple[str, int]]
                         ) -> dict[tuple[str, int], str]:
        """The whole fabric; read again (up to 3 times) while a port in ``need`` is missing,
        as a scan that overlaps opensm's sweep can come back without some switches."""
        now: dict[tuple[str, int], str] = {}
        if self.scan is None:
            return now
        for attempt in range(3):
            now = await self.scan(lids)
            self.stats.scans += 1
            if need <= set(now):
                break
            await asyncio.sleep(0.3 * (attempt + 1))
        return now

    async def _trap_events(self, traps: list[tuple[int, str, int]],
                           paths: dict[int, str] | None = None) -> list[PortEvent]:
        """One scan for a burst of fresh traps; the changed ports become events.

        When opensm logged the directed route of every trapping switch (the ``SM class trap
        128: Directed Path Dump`` line after each trap) only those switches are read
        (``iblinkinfo -D ROUTE -n 0``: one switch's ports, not the fabric's; 20 s -> well
        under a second at 10k GPUs); otherwise the whole fabric is scanned.
        """
        if self.scan is None or not traps:
            return []
        lids = self.lids()
        routes = [paths[lid] for lid in sorted({t[2] for t in traps})
                  if paths and lid in paths]
        targeted = self._ports is not None and len(routes) == len({t[2] for t in traps})
        try:
            if targeted:
                now = dict(self._ports or {})
                read: set[str] = set()
                for route in routes:
                    part = await self.scan(lids, path=route)
                    now.update(part)
                    read |= {d for d, _ in part}
                self.stats.targeted_scans += len(routes)
                need = self._peers_unread(self._ports or {}, now, read)
                if need is None or need:
                    # A cable to another switch changed and that switch's trap is not in
                    # this batch (or was suppressed): read the fabric rather than guess.
                    now = await self._full_scan(lids, need or set())
            else:
                now = await self._full_scan(lids, set())
        except (ToolError, ParseError, ValueError) as exc:
            self.stats.scan_failures += 1
            self.stats.unresolved += len(traps)
            log.warning("port scan after trap failed: %s", exc)
            return []
        before = self._ports
        # A port missing from a reading (a scan cut short by a busy SM) is unknown, not down:
        # it keeps its last known state.
        self._ports = {**(before or {}), **now}
        if before is None:
            self.stats.unresolved += len(traps)
            return []
        ts, line, lid = traps[0]
        events = []
        for key in sorted(now):
            old, new = before.get(key), now[key]
            if old is None or _up(old) == _up(new):
                continue
            device, port = key
            state = "up" if _up(new) else "down"
            events.append(PortEvent(
                id=stable_id("opensm-trap", self.fabric, line, device, port, state),
                ts=ts, fabric=self.fabric, source="opensm", device=device, port=port,
                state=state, trap=128, phys_state=new or None,
                reason=f"trap 128 from LID {lid}; {old} -> {new or '?'}"))
        if not events:
            self.stats.unresolved += 1  # changed and changed back before the scan
        return events

    def sm_events(self, text: str) -> list[SmEvent]:
        """The SM's own events in a batch (``fabric.sm``), the sweep under way kept between."""
        try:
            result = parse_opensm_log(text, fabric=self.fabric, tz=self.tz,
                                      year=self._sm_state.year, lids=self.lids(),
                                      state=self._sm_state)
        except ParseError:
            return []
        return result.sm_events

    async def process(self, lines: list[str]) -> list[PortEvent]:
        """Events for a batch of complete lines (published by ``step``)."""
        self.stats.lines += len(lines)
        events: list[PortEvent] = []
        lids = self.lids()
        text = "\n".join(lines)
        now_ms = int(self.clock() * 1000)
        traps: list[tuple[int, str, int]] = []
        paths: dict[int, str] = {}
        pending_lid: int | None = None
        for line in lines:
            pm = _TRAP_PATH.search(line)
            if pm and pending_lid is not None and int(pm.group(1)) in LINK_TRAPS:
                paths.setdefault(pending_lid, pm.group(2))
                pending_lid = None
                continue
            m = _TRAP.match(line)
            if m is None or int(m.group(7)) not in LINK_TRAPS:
                continue
            self.stats.traps += 1
            ts = self._line_ts(m)
            if now_ms - ts > self.fresh_s * 1000:
                self.stats.stale_traps += 1
                continue
            traps.append((ts, line, int(m.group(9))))
            pending_lid = int(m.group(9))
        events += await self._trap_events(traps, paths)
        if text.strip():
            try:
                year = datetime.fromtimestamp(self.clock(), UTC).year
                result = parse_opensm_log(text, fabric=self.fabric, tz=self.tz, year=year,
                                          lids=lids)
                events += result.events
                self.stats.unresolved += len(result.unresolved)
            except ParseError:
                pass  # a batch of banner or dump lines only
        return events

    async def step(self) -> int:
        """Read what is new, publish its events, then save the position."""
        lines = self.follower.read()
        for note in self.follower.lost:
            log.warning("%s", note)
            self.stats.notes.append(note)
        self.follower.lost.clear()
        if not lines:
            return 0
        events: list[PortEvent | SmEvent] = [*await self.process(lines)]
        # the ports the traps were for: the ports of the sweep they forced
        self._sm_state.sweep_ports += [e.key for e in events if isinstance(e, PortEvent)
                                       and e.key not in self._sm_state.sweep_ports]
        events += self.sm_events("\n".join(lines))
        if events:
            await self.publisher.send_many(events)
            await self.publisher.flush()
            self.stats.events += len(events)
        self.follower.commit()
        return len(events)

    async def run(self, stop: asyncio.Event, *, poll_s: float = 0.2) -> None:
        if self._ports is None:
            await self.baseline()
        while not stop.is_set():
            await self.step()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), poll_s)


async def follow_topology(bootstrap: str, fabric: str, on_topology: Callable[[Any], None],
                          stop: asyncio.Event, *, ready: asyncio.Event | None = None) -> None:
    """Feed ``on_topology`` every topology event of ``fabric`` (from the topic's start)."""
    from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]

    from schemas import ContractError, Topology, decode
    from schemas.topics import TOPOLOGY

    consumer = AIOKafkaConsumer(TOPOLOGY.name, bootstrap_servers=bootstrap,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                group_id=None)
    await consumer.start()
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for rec in records:
                    try:
                        ev = decode(rec.value)
                    except ContractError:
                        continue
                    if isinstance(ev, Topology) and ev.fabric == fabric:
                        on_topology(ev)
            if ready is not None and not ready.is_set():
                ends = await consumer.end_offsets(list(consumer.assignment()))
                behind = False
                for tp, off in ends.items():
                    behind = behind or await consumer.position(tp) < off
                if ends and not behind:
                    ready.set()
    finally:
        await consumer.stop()


class LatestLids:
    """The LidMap of the newest topology seen (``follow_topology``'s callback)."""

    def __init__(self) -> None:
        self.ts = -1
        self.map: LidMap | None = None
        self.peer_map: dict[tuple[str, int], tuple[str, int]] = {}

    def peers(self) -> dict[tuple[str, int], tuple[str, int]]:
        return self.peer_map

    def __call__(self) -> LidMap | None:
        return self.map

    def update(self, topology: Any) -> None:
        if topology.ts >= self.ts:
            self.ts = topology.ts
            self.map = LidMap.from_topology(topology)
            peers: dict[tuple[str, int], tuple[str, int]] = {}
            for link in topology.links:
                peers[(link.a_device, link.a_port)] = (link.b_device, link.b_port)
                peers[(link.b_device, link.b_port)] = (link.a_device, link.a_port)
            self.peer_map = peers
