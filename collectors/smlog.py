"""Subnet-manager logs to ``port_event``s: the opensm log and UFM's ``event.log``.

Both logs stamp lines in the SM host's local time without a zone (opensm also without a
year), so the caller must give the zone (``tz``, an IANA name such as ``Europe/Oslo``) and,
for opensm, the year of the first line (a December -> January step rolls it over).

Event ids are a hash of the fabric, the source, the line's text and which end of a link it
describes, so a replay of the same log lines dedupes downstream.

opensm lines that make events
-----------------------------
- ``osm_pi_rcv_process: Switch 0x<guid> port <n> changed state from ACTIVE to DOWN``, as
  issue 4 quotes it: ``down`` when the new state is DOWN, ``up`` when it is ACTIVE; INIT and
  ARMED are steps on the way and make no event. The GUID is resolved through the LidMap.
  opensm 3.3.23's own logs of a flap (default, ``-D 0x07``, ``-V``) carry no such line;
  ``collectors.live.tail_opensm`` resolves trap 128 by asking the fabric instead.
- ``Marking unhealthy physical port by lid:<lid> num:<port>`` (verbose, after trap 129-131):
  the SM takes the port out of use, so ``down`` with reason ``unhealthy``.
- ``drop_mgr_remove_port: Removed port with GUID:0x.. LID range [a, b] of node:<desc>``
  (default level): a CA port left the subnet, ``down``; ``state_mgr_report_new_ports:
  Discovered new port with GUID:0x.. LID range [a,b] of node: <desc>``: ``up``. The LID
  gives device and port through the LidMap. A switch's own removal is no port event.

The SM's own events (``SmLogResult.sm_events``, ``fabric.sm``), quoted from opensm's format
strings: a heavy sweep from its first sign (``Entering DISCOVERING state``, the first trap 128
or 144 since ``SUBNET UP``, ``Forcing heavy sweep. Received trap:%u`` / ``Received signal
%s``, the ``INITIATING HEAVY SWEEP`` banner) to ``SUBNET UP``, with its trigger, the ports
that changed and the devices that sent the traps (without a sign of its start, ``start`` is
None); ``Entering %s state`` (MASTER, STANDBY, DISCOVERING, NOT-ACTIVE) for the SM named by
``Setting IS_SM on port 0x..``; ``Received trap %u times consecutively`` (a count, the trap
being the thread's last ``log_trap_info``) and ``Disabling noisy physical port 0x%016x: lid
%u, num %u`` as trap storms. The verbose lines need opensm's ``-V``/``-D 0x07``.

``log_trap_info: Received Generic Notice ... num:128 (Link state change) ... from LID:73``
names the switch but neither the port nor the direction (the SM learns those only by
sweeping), so it makes no event by itself: it is remembered, and the port changes of that
switch logged before the next ``SUBNET UP`` carry ``trap: 128``. ``GID out of service`` /
``GID in service`` repeat the remove / new-port lines and are not counted twice.

UFM event.log
-------------
``<date> <time>[.ms] [<id>] [<code>] <LEVEL> [<topic>] <type> [<desc>]: <text>``. Code 329
(``Link went down: (Switch:NAME:1/17/1)GUID:33 - (Switch:NAME2:...)GUID:8, cable S/N: ..``)
makes a ``down`` for both ends; code 328 (link went up) an ``up`` for both; 702 (port is
unhealthy) a ``down`` with reason ``unhealthy``. Counter alarms (110 symbol error rate, 112
link downed counter, ...) make no port event: the counters themselves arrive on
``fabric.counters``, and a 112 next to a 329 would count one down twice.

Lines that cannot be resolved to a device (no topology given, an unknown LID) are not
errors: they are returned as ``Unresolved`` notes so a follower can report them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from collectors.common import collapse, guarded, lines, stable_id
from collectors.errors import ParseError
from collectors.ibnetdiscover import NodeType, device_name
from collectors.lidmap import LidMap
from schemas import PortEvent, SmEvent

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"),
    start=1)}
_OSM_LINE = re.compile(
    r"^(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+(\d{1,2})\s+"
    r"(\d{2}):(\d{2}):(\d{2})\s+(\d{6})\s+\[([0-9A-Fa-f]+)\]\s+0x[0-9A-Fa-f]{2}\s+->\s?(.*)$"
)
_TRAP = re.compile(r"log_trap_info: Received Generic Notice type:\d+ num:(\d+) \(([^)]*)\)"
                   r".*?from LID:(\d+)")
_CHANGED = re.compile(r"(?:Switch|CA|Router|port)?\s*(0x[0-9A-Fa-f]+)\s+port\s+(\d+)\s+"
                      r"changed state from\s+(\w+)\s+to\s+(\w+)")
_UNHEALTHY = re.compile(r"Marking unhealthy physical port by lid:\s*(\d+)\s+num:\s*(\d+)")
_REMOVED = re.compile(r"Removed port with GUID:(0x[0-9A-Fa-f]+) LID range "
                      r"\[(0x[0-9A-Fa-f]+|\d+),\s*(0x[0-9A-Fa-f]+|\d+)\] of node:\s*(.*)$")
_NEW_PORT = re.compile(r"Discovered new port with GUID:(0x[0-9A-Fa-f]+) LID range "
                       r"\[(0x[0-9A-Fa-f]+|\d+),\s*(0x[0-9A-Fa-f]+|\d+)\] of node:\s*(.*)$")
_SUBNET_UP = re.compile(r"^SUBNET UP\s*$")
# The SM's own lines (opensm/osm_sm_state_mgr.c, osm_state_mgr.c, osm_trap_rcv.c,
# osm_opensm.c), quoted from the source's format strings.
_IS_SM = re.compile(r"osm_opensm_bind: Setting IS_SM on port (0x[0-9A-Fa-f]+)")
_ENTERING = re.compile(r"^Entering (MASTER|STANDBY|DISCOVERING|NOT-ACTIVE) state\s*$")
_FORCING_TRAP = re.compile(r"Forcing heavy sweep\. Received trap:(\d+)")
_FORCING_SIGNAL = re.compile(r"Forcing heavy sweep\. Received signal (.+?)\s*$")
_CONSECUTIVE = re.compile(r"Received trap (\d+) times consecutively")
_NOISY = re.compile(r"Disabling noisy physical port (0x[0-9A-Fa-f]+): lid (\d+), num (\d+)")
# A banner line of OSM_LOG_MSG_BOX (verbose): "****** INITIATING HEAVY SWEEP ******".
_BANNER = re.compile(r"^\*+\s*([A-Z][A-Z0-9 ()-]*?)\s*\*+$")
_SM_STATES = {"MASTER": "master", "STANDBY": "standby", "DISCOVERING": "discovering",
              "NOT-ACTIVE": "not_active"}


@dataclass(frozen=True)
class Unresolved:
    """A line that describes a port change but could not be tied to a device and port."""

    line: int
    reason: str
    text: str


@dataclass
class SmLogResult:
    events: list[PortEvent] = field(default_factory=list)
    unresolved: list[Unresolved] = field(default_factory=list)
    lines_read: int = 0
    # What the SM itself did (fabric.sm): heavy sweeps, its state, trap storms.
    sm_events: list[SmEvent] = field(default_factory=list)


def zone(tz: str | tzinfo) -> tzinfo:
    """A tzinfo from an IANA zone name (``UTC`` included), or the tzinfo given."""
    if isinstance(tz, tzinfo):
        return tz
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ParseError(None, None, f"unknown time zone {tz!r}; give an IANA name such as "
                                     "UTC or Europe/Oslo") from None


def infer_year(text: str, *, now: datetime) -> int:
    """The year of an opensm log's first line, which opensm does not print.

    ``now``'s year, unless the first line's month and day are more than a day after
    ``now`` (a December log read in January): then the year before.
    """
    for _number, line in lines(text):
        match = _OSM_LINE.match(line)
        if match is None:
            continue
        month, day = _MONTHS[match.group(1)], int(match.group(2))
        try:
            first = datetime(now.year, month, day, tzinfo=now.tzinfo)
        except ValueError:  # 29 Feb in a year without one
            return now.year - 1
        return now.year - 1 if (first - now).days >= 1 else now.year
    return now.year


def _int(text: str) -> int:
    return int(text, 16) if text.lower().startswith("0x") else int(text)


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


@dataclass
class OpensmState:
    """What reading an opensm log carries from one chunk to the next (for a follower)."""

    year: int
    last_month: int = 0
    traps: dict[str, int] = field(default_factory=dict)  # device -> trap since SUBNET UP
    lines_before: int = 0  # lines of earlier chunks, so that line numbers stay absolute
    sm: str | None = None  # this SM's port GUID ("Setting IS_SM on port ..."), once seen
    # The heavy sweep under way (since its first sign, until SUBNET UP): its start (None:
    # not seen), its trigger, the ports that changed and the devices that sent traps.
    sweep_start: int | None = None
    sweep_pending: bool = False
    sweep_trigger: str | None = None
    sweep_ports: list[str] = field(default_factory=list)
    sweep_devices: list[str] = field(default_factory=list)
    last_ts: int | None = None
    last_trap: dict[str, tuple[int, int]] = field(default_factory=dict)  # thread -> (trap, lid)


# Traps that make opensm (sweep_on_trap, the default) force a heavy sweep
# (osm_trap_rcv.c): 128 link state change, 144 local changes.
SWEEP_TRAPS = frozenset({128, 144})
MAX_SWEEP_PORTS = 4096


def _sweep_begins(st: OpensmState, ts: int, trigger: str | None) -> None:
    """The first sign of a heavy sweep since SUBNET UP starts it; later signs add to it."""
    if not st.sweep_pending:
        st.sweep_pending = True
        st.sweep_start = ts
    if st.sweep_trigger is None and trigger is not None:
        st.sweep_trigger = trigger


def _sweep_clear(st: OpensmState) -> None:
    st.sweep_pending = False
    st.sweep_start = None
    st.sweep_trigger = None
    st.sweep_ports = []
    st.sweep_devices = []


@guarded
def parse_opensm_log(text: str, *, fabric: str, tz: str | tzinfo, year: int,
                     lids: LidMap | None = None, source: str = "opensm",
                     state: OpensmState | None = None, sm: str | None = None) -> SmLogResult:
    """opensm log text -> port events, SM events (and the change lines it could not resolve).

    ``state`` carries the year, the trap memory, the sweep under way and the line count
    from one chunk of a followed log to the next; a chunk without any opensm line is then
    no error. ``sm`` names this SM until its log says its port GUID (``Setting IS_SM on
    port``); without either, the ``source``.
    """
    zone_info = zone(tz)
    result = SmLogResult()
    chunked = state is not None
    st = state if state is not None else OpensmState(year=year)
    traps = st.traps
    matched_any = False
    for number, line in lines(text):
        number += st.lines_before
        result.lines_read = number
        match = _OSM_LINE.match(line)
        if match is None:
            banner = _BANNER.match(line.strip())
            if banner and banner.group(1) == "INITIATING HEAVY SWEEP" and st.last_ts:
                _sweep_begins(st, st.last_ts, None)
            continue  # banners, notice dumps, blank lines: parts of multi-line records
        matched_any = True
        mon, day, hh, mm, ss, usec, thread, message = match.groups()
        month = _MONTHS[mon]
        if st.last_month == 12 and month == 1:
            st.year += 1
        st.last_month = month
        try:
            local = datetime(st.year, month, int(day), int(hh), int(mm), int(ss), int(usec),
                             tzinfo=zone_info)
        except ValueError as exc:
            raise ParseError(None, number, f"bad timestamp: {exc}") from None
        ts = _ms(local)
        st.last_ts = ts

        def emit(device: str, port: int, state: str, *, trap: int | None = None,
                 reason: str | None = None, phys: str | None = None,
                 _number: int = number, _line: str = line, _ts: int = ts) -> None:
            result.events.append(PortEvent(
                id=stable_id("opensm", fabric, source, _line, device, port),
                ts=_ts, fabric=fabric, source=source, device=device, port=port,
                state=state, trap=trap, phys_state=phys, reason=reason))
            if f"{device}:{port}" not in st.sweep_ports:  # the next SUBNET UP's sweep
                st.sweep_ports.append(f"{device}:{port}")

        def sm_event(event: str, _line: str = line, _ts: int = ts, **fields: object) -> None:
            result.sm_events.append(SmEvent.model_validate({
                "id": stable_id("opensm-sm", fabric, source, _line, event), "ts": _ts,
                "fabric": fabric, "source": source, "event": event,
                "sm": st.sm or sm or source, **fields}))

        text = message.strip()
        if _SUBNET_UP.match(text):
            traps.clear()
            if st.sweep_pending or st.sweep_start is not None:
                sm_event("sweep", start=st.sweep_start, end=ts, trigger=st.sweep_trigger,
                         ports=st.sweep_ports[:MAX_SWEEP_PORTS],
                         devices=st.sweep_devices[:MAX_SWEEP_PORTS])
            else:  # a heavy sweep whose beginning this log level does not show
                sm_event("sweep", start=None, end=ts, trigger=None,
                         ports=st.sweep_ports[:MAX_SWEEP_PORTS])
            _sweep_clear(st)
            continue
        if is_sm := _IS_SM.search(text):
            st.sm = is_sm.group(1).lower()
            continue
        if entering := _ENTERING.match(text):
            new_sm_state = _SM_STATES[entering.group(1)]
            sm_event("state", state=new_sm_state)
            if new_sm_state in ("master", "discovering") and not st.sweep_pending:
                _sweep_begins(st, ts, "start-up" if new_sm_state == "discovering"
                              else "became master")
            continue
        if forcing := _FORCING_TRAP.search(text):
            _sweep_begins(st, ts, f"trap {forcing.group(1)}")
            continue
        if forcing := _FORCING_SIGNAL.search(text):
            _sweep_begins(st, ts, f"signal {forcing.group(1)}")
            continue
        if consecutive := _CONSECUTIVE.search(text):
            count = int(consecutive.group(1))
            seen = st.last_trap.get(thread)
            where = lids.by_lid(seen[1]) if lids and seen else None
            sm_event("trap_storm", count=count, trap=seen[0] if seen else None,
                     device=where.device if where else None,
                     port=where.port if where and where.port is not None else None)
            continue
        if noisy := _NOISY.search(text):
            lid, port = int(noisy.group(2)), int(noisy.group(3))
            target = lids.by_lid(lid) if lids else None
            if target is None:
                result.unresolved.append(Unresolved(number, f"LID {lid} is not in the "
                                                    "topology", line))
            seen = st.last_trap.get(thread)
            sm_event("trap_storm", disabled=True, trap=seen[0] if seen else None,
                     device=target.device if target else None,
                     port=port if target else None)
            continue
        trap = _TRAP.search(message)
        if trap:
            lid = int(trap.group(3))
            st.last_trap[thread] = (int(trap.group(1)), lid)
            device = lids.device_for_lid(lid) if lids else None
            if device is not None:
                traps[device] = int(trap.group(1))
            if int(trap.group(1)) in SWEEP_TRAPS:  # sweep_on_trap: this trap forces one
                _sweep_begins(st, ts, f"trap {trap.group(1)}")
                name = device or f"lid:{lid}"
                if name not in st.sweep_devices:
                    st.sweep_devices.append(name)
            continue
        changed = _CHANGED.search(message)
        if changed:
            guid, port_s, old, new = changed.groups()
            new_state = {"DOWN": "down", "ACTIVE": "up"}.get(new.upper())
            if new_state is None:
                continue
            device = lids.device_for_guid(guid) if lids else None
            if device is None:
                result.unresolved.append(Unresolved(number, f"GUID {guid} is not in the "
                                                    "topology", line))
                continue
            emit(device, int(port_s), new_state, trap=traps.get(device),
                 reason=f"{old.upper()} -> {new.upper()}")
            continue
        unhealthy = _UNHEALTHY.search(message)
        if unhealthy:
            lid, port = int(unhealthy.group(1)), int(unhealthy.group(2))
            target = lids.by_lid(lid) if lids else None
            if target is None:
                result.unresolved.append(Unresolved(number, f"LID {lid} is not in the "
                                                    "topology", line))
                continue
            emit(target.device, port, "down", reason="unhealthy", trap=traps.get(target.device))
            continue
        for pattern, direction in ((_REMOVED, "down"), (_NEW_PORT, "up")):
            found = pattern.search(message)
            if not found:
                continue
            guid, lid_lo, _lid_hi, _desc = found.groups()
            target = lids.by_lid(_int(lid_lo)) if lids else None
            if target is None:
                result.unresolved.append(Unresolved(
                    number, f"LID {_int(lid_lo)} (port GUID {guid}) is not in the topology",
                    line))
            elif target.port is not None:  # a CA port; a switch leaving is no port event
                emit(target.device, target.port, direction,
                     reason="left the subnet" if direction == "down" else "joined the subnet")
            break
    st.lines_before = result.lines_read if result.lines_read else st.lines_before
    if not matched_any and not chunked:
        raise ParseError(None, None, "no opensm log line found ('Mon DD HH:MM:SS usec "
                                     "[thread] 0xNN -> message')")
    return result


# ---------------------------------------------------------------- UFM event.log

_UFM_LINE = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?\s+"
    r"\[(\d+)\]\s+\[(\d+)\]\s+([A-Z]+)\s+\[([^\]]*)\]\s+(\S+)\s+\[(.*?)\]\s*:\s*(.*)$"
)
_UFM_END = re.compile(
    r"\((Switch|Computer|Host|Gateway|Router)\s*:\s*([^:()]*):([^:()]*)\)\s*(?:0x)?([0-9A-Fa-f]{16})"
    r"\s*:\s*(\d+)"
)
_UFM_CODES: dict[int, tuple[str, str | None]] = {
    329: ("down", "link went down"),
    328: ("up", "link went up"),
    702: ("down", "unhealthy"),
}


# The UFM event codes that are port state changes, shared with the REST poller
# (collectors.ufm_rest): the REST API's ``description`` is the event.log line's text.
UFM_PORT_CODES = _UFM_CODES


def ufm_link_ends(text: str) -> list[tuple[str, str, str, int]]:
    """``(type, name, guid, port)`` of each ``(Type:NAME:label)GUID:port`` end in ``text``;
    empty when an end is cut off (a link event names its ends whole or not at all)."""
    ends = _UFM_END.findall(text)
    if not ends or text.count(" - (") >= len(ends):
        return []
    return [(kind, name, guid, int(port)) for kind, name, _label, guid, port in ends]


def ufm_device(kind: str, name: str, guid: str, lids: LidMap | None = None) -> str:
    """The contract device of a UFM end: the topology's name for the GUID, else UFM's."""
    return _ufm_device(kind, name, guid, lids)


def _ufm_device(kind: str, name: str, guid: str, lids: LidMap | None) -> str:
    if lids is not None:
        known = lids.device_for_guid(guid)
        if known is not None:
            return known
    node_type: NodeType = "switch" if kind == "Switch" else "ca"
    text = collapse(name)
    if node_type == "switch" and text:
        return text  # UFM already shows the switch's NAME, not its MF0; description
    return device_name(text, guid, node_type)


@guarded
def parse_ufm_events(text: str, *, fabric: str, tz: str | tzinfo,
                     lids: LidMap | None = None, source: str = "ufm") -> SmLogResult:
    """UFM ``event.log`` text -> port events for link down / up / unhealthy codes."""
    zone_info = zone(tz)
    result = SmLogResult()
    matched_any = False
    for number, line in lines(text):
        result.lines_read = number
        stripped = line.strip()
        if not stripped:
            continue
        match = _UFM_LINE.match(stripped)
        if match is None:
            raise ParseError(None, number, "not a UFM event.log line (expected 'DATE TIME "
                                           f"[id] [code] LEVEL [topic] ...'): {stripped[:80]!r}")
        matched_any = True
        date, clock, frac, _event_id, code_s, level, _topic, _otype, _obj, body = match.groups()
        micro = int((frac or "0").ljust(6, "0"))
        try:
            local = datetime.fromisoformat(f"{date}T{clock}").replace(microsecond=micro,
                                                                     tzinfo=zone_info)
        except ValueError as exc:
            raise ParseError(None, number, f"bad timestamp: {exc}") from None
        ts = _ms(local)
        mapping = _UFM_CODES.get(int(code_s))
        if mapping is None:
            continue
        state, reason = mapping
        ends = _UFM_END.findall(body)
        if not ends or body.count(" - (") >= len(ends):
            # a link event always names its ends, each whole: this line is cut or garbled
            raise ParseError(None, number, f"UFM event {code_s} names no "
                                           "(Type:NAME:label)GUID:port end (is the line cut "
                                           f"off?): {stripped[:80]!r}")
        for index, (kind, name, _label, guid, port) in enumerate(ends):
            device = _ufm_device(kind, name, guid, lids)
            result.events.append(PortEvent(
                id=stable_id("ufm", fabric, source, stripped, index),
                ts=ts, fabric=fabric, source=source, device=device, port=int(port),
                state=state, reason=f"{reason} (UFM {code_s} {level})"))
    if not matched_any:
        raise ParseError(None, None, "no UFM event.log line found")
    return result
