"""UFM Enterprise REST and UFM Telemetry answers to contract events (pure: JSON/CSV in, events out).

The live poller (``collectors.live.poll_ufm``) does the HTTP; these functions only map what
UFM answered, as NVIDIA documents it (UFM Enterprise REST API Guide) and as NVIDIA's own
port-health (PDR) plugin reads it (``Mellanox/ufm_sdk_3.0``,
``plugins/pdr_deterministic_plugin``):

* ``GET /ufmRest/resources/ports`` -> ``[{name: "<guid>_<n>", guid, system_id, system_name,
  node_description, description: "Switch IB Port" | "Computer IB Port", number,
  external_number, logical_state, physical_state, active_width, active_speed, path, ...}]``:
  the names of the devices (``UfmInventory``).
* ``GET /ufmRest/resources/links`` -> ``[{source_guid, source_port, destination_guid,
  destination_port, source_port_node_description, ..., name}]``: the other end of a port.
* ``GET /ufmRest/app/events`` -> ``[{id, name, type, event_type, severity, timestamp:
  "YYYY-MM-DD HH:MM:SS[.mmm]", category, object_name, object_path, description}]``; older
  UFM puts the event code in ``type``, 6.17+ in ``event_type`` (``type`` is then the object
  type). Codes 329 (link went down) and 328 (link went up) become a ``port_event`` for each
  end of the link, 702 (port is unhealthy) a ``down`` (the codes are
  ``collectors.smlog.UFM_PORT_CODES``, the same as for ``event.log``); others make none.
* ``GET /ufmRest/app/unhealthy_ports`` -> ``[{UnhealthyGUID, UnhealthyPortNumber,
  UnhealthyNode, PeerGUID, PeerPortNumber, Condition, StatusTime, ...}]``: UFM's own
  unhealthy marks. A port newly marked is a ``down`` (reason ``unhealthy``), a mark removed
  an ``up`` (reason ``marked healthy``).
* UFM Telemetry ``GET http://<ufm>:9001/csv/xcset/<instance>`` (the PDR plugin reads
  ``http://127.0.0.1:9002/csv/xcset/low_freq_debug`` with ``pandas.read_csv``): CSV whose
  header starts ``timestamp,source_id,tag,Node_GUID,port_guid,Port_Number`` (timestamp in
  microseconds), then one column per counter; ``UFM_CSV_FIELDS`` maps the counter columns
  to the contract's fields, any other numeric column is kept as an extra.

Event timestamps are UFM's local time without a zone: the caller gives the zone. Ids are
hashes of the UFM event id (or the mark and its time, or the CSV row's content), so a
repeat after a crash dedupes downstream.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any

from pydantic import ValidationError

from collectors.common import DeviceSamples, counters_events, guarded, guid_str, stable_id
from collectors.errors import ParseError
from collectors.ibnetdiscover import device_name
from collectors.smlog import UFM_PORT_CODES, ufm_device, ufm_link_ends, zone
from schemas import LEGACY_COUNTER_BITS, Counters, PortEvent
from schemas.codec import contract_error

SOURCE = "ufm"
_GUID = re.compile(r"^(?:0x)?([0-9a-fA-F]{1,16})$")
_PORT_NAME = re.compile(r"^(?:0x)?([0-9a-fA-F]{1,16})_(\d{1,3})$")
_TS = re.compile(r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?$")

# UFM Telemetry CSV column -> contract field. The first block are the columns NVIDIA's PDR
# plugin reads (constants.py, tests/simulation_telemetry.py); the *Extended names are the
# PortCountersExtended attributes UFM Telemetry exposes (fluentd_telemetry_plugin README).
UFM_CSV_FIELDS: dict[str, str] = {
    "PortRcvErrors": "rcv_errors",
    "PortRcvRemotePhysicalErrors": "rcv_remote_phys_errors",
    "Link_Down_IB": "link_downed",
    "Symbol_Errors": "symbol_errors",
    "phy_symbol_errors": "symbol_errors",
    "phy_effective_errors": "fec_uncorrectable",
    "Module_Temperature": "module_temp_c",
    "PortXmitDiscards": "xmit_discards",
    "PortXmitWait": "xmit_wait",
    "PortXmitWaitExtended": "xmit_wait",
    "SymbolErrorCounterExtended": "symbol_errors",
    "LinkErrorRecoveryCounterExtended": "link_error_recovery",
    "LinkDownedCounterExtended": "link_downed",
    "PortRcvErrorsExtended": "rcv_errors",
    "PortRcvRemotePhysicalErrorsExtended": "rcv_remote_phys_errors",
    "PortXmitDiscardsExtended": "xmit_discards",
    "LocalLinkIntegrityErrorsExtended": "local_link_integrity_errors",
    "ExcessiveBufferOverrunErrorsExtended": "excessive_buffer_overrun",
    "Symbol_BER": "raw_ber",
    "Effective_BER": "effective_ber",
}
_KEY_COLUMNS = ("timestamp", "source_id", "tag", "Node_GUID", "port_guid", "Port_Number")
_KEY_ALIASES = {"node_guid": "Node_GUID", "port_num": "Port_Number", "Port_GUID": "port_guid"}
_FLOAT_FIELDS = {"module_temp_c", "raw_ber", "effective_ber"}
MAX_CSV_BYTES = 512 * 1024 * 1024


def _guid(value: Any) -> str | None:
    match = _GUID.match(str(value or "").strip())
    return guid_str(match.group(1)) if match else None


@dataclass
class UfmInventory:
    """Device names by node GUID and link peers by port, from UFM's ports and links."""

    names: dict[str, str] = field(default_factory=dict)  # 0x-guid -> device
    kinds: dict[str, str] = field(default_factory=dict)  # 0x-guid -> "Switch" | "Computer"
    peers: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)

    def device(self, guid: str, *, kind: str = "", name: str = "") -> str:
        """The contract name of a node: from the ports list, else UFM's name for it."""
        known = self.names.get(guid)
        if known is not None:
            return known
        if name:
            return ufm_device(kind or self.kinds.get(guid, ""), name, guid[2:])
        return guid

    def peer(self, guid: str, port: int) -> tuple[str, int] | None:
        return self.peers.get((guid, port))


def _port_no(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ParseError(None, None, f"{what} is not a port number")
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ParseError(None, None, f"{what} {str(value)[:20]!r} is not a port number") from None
    if not 0 <= number <= 255:
        raise ParseError(None, None, f"{what} {number} is outside 0..255")
    return number


@guarded
def parse_inventory(ports: Any, links: Any) -> UfmInventory:
    """``/resources/ports`` and ``/resources/links`` answers -> names and peers."""
    if not isinstance(ports, list) or not isinstance(links, list):
        raise ParseError(None, None, "ports and links must be JSON lists")
    inv = UfmInventory()
    for entry in ports:
        if not isinstance(entry, dict):
            raise ParseError(None, None, "a ports entry is not an object")
        guid = _guid(entry.get("system_id") or entry.get("systemID") or entry.get("guid"))
        if guid is None:
            continue
        switch = "Switch" in str(entry.get("description", ""))
        kind = "Switch" if switch else "Computer"
        if switch:
            name = str(entry.get("system_name") or "").strip() or guid
        else:
            name = device_name(str(entry.get("node_description") or ""), guid, "ca")
        inv.names.setdefault(guid, name)
        inv.kinds.setdefault(guid, kind)
    for entry in links:
        if not isinstance(entry, dict):
            raise ParseError(None, None, "a links entry is not an object")
        a, b = _guid(entry.get("source_guid")), _guid(entry.get("destination_guid"))
        if a is None or b is None:
            continue
        pa = _port_no(entry.get("source_port"), "source_port")
        pb = _port_no(entry.get("destination_port"), "destination_port")
        inv.peers[(a, pa)] = (b, pb)
        inv.peers[(b, pb)] = (a, pa)
    return inv


def event_code(event: Mapping[str, Any]) -> int | None:
    """The UFM event code: ``event_type`` (6.17+) or a numeric ``type`` (older)."""
    for key in ("event_type", "type"):
        value = event.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().isdigit():
            return int(value.strip())
    return None


def event_ms(value: Any, tz: tzinfo) -> int:
    """UFM's ``YYYY-MM-DD HH:MM:SS[.mmm]`` in the zone ``tz`` -> epoch milliseconds."""
    match = _TS.match(str(value or "").strip())
    if match is None:
        raise ParseError(None, None, f"event timestamp {str(value)[:40]!r} is not "
                                     "'YYYY-MM-DD HH:MM:SS[.mmm]'")
    date, clock, frac = match.groups()
    try:
        local = datetime.fromisoformat(f"{date}T{clock}").replace(
            microsecond=int((frac or "0").ljust(6, "0")), tzinfo=tz)
    except ValueError as exc:
        raise ParseError(None, None, f"bad event timestamp: {exc}") from None
    return int(local.timestamp() * 1000)


@dataclass
class EventsResult:
    events: list[PortEvent] = field(default_factory=list)
    last_id: int = 0  # the highest event id read (the caller's next "after")
    skipped: list[str] = field(default_factory=list)  # port events that could not be mapped
    unhealthy: set[str] = field(default_factory=set)  # "<0xguid>_<port>" of the 702 events


def _event_id(event: Mapping[str, Any]) -> int:
    value = event.get("id")
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ParseError(None, None, "an event has no integer id")
    try:
        return int(value)
    except ValueError:
        raise ParseError(None, None, f"event id {str(value)[:20]!r} is not an integer") from None


@guarded
def parse_events(events: Any, *, fabric: str, tz: str | tzinfo, after: int,
                 inventory: UfmInventory | None = None) -> EventsResult:
    """``/app/events`` answer -> port events of the events with an id above ``after``.

    Both ends come from the description (``(Switch:NAME:label)GUID:port - (...)``); where
    it names only the port (``object_name`` ``<guid>_<port>``), the links give the peer.
    """
    if not isinstance(events, list):
        raise ParseError(None, None, "the events answer must be a JSON list")
    zone_info = zone(tz)
    inv = inventory or UfmInventory()
    result = EventsResult(last_id=after)
    fresh = []
    for entry in events:
        if not isinstance(entry, dict):
            raise ParseError(None, None, "an events entry is not an object")
        ident = _event_id(entry)
        if ident > after:
            fresh.append((ident, entry))
    for ident, entry in sorted(fresh, key=lambda pair: pair[0]):
        result.last_id = max(result.last_id, ident)
        code = event_code(entry)
        if code is None or code not in UFM_PORT_CODES:
            continue
        try:
            result.events += _port_events(ident, code, entry, fabric, zone_info, inv, result)
        except (ParseError, ValidationError) as exc:
            # one bad event must not hold back the ones after it: named, and passed
            why = exc.reason if isinstance(exc, ParseError) else contract_error(exc).reason
            result.skipped.append(f"event {ident} ({code}): {why}")
    return result


def _port_events(ident: int, code: int, entry: Mapping[str, Any], fabric: str, zone_info: tzinfo,
                 inv: UfmInventory, result: EventsResult) -> list[PortEvent]:
    state, reason = UFM_PORT_CODES[code]
    ts = event_ms(entry.get("timestamp"), zone_info)
    severity = str(entry.get("severity") or "")[:32]  # UFM's text, bounded in the reason
    text = str(entry.get("description") or "")
    found = [(_guid(g) or guid_str(g), k, n, p) for k, n, g, p in ufm_link_ends(text)]
    ends = [(inv.device(g, kind=k, name=n), p) for g, k, n, p in found]
    if not ends:
        named = _PORT_NAME.match(str(entry.get("object_name") or "").strip())
        if named is not None:
            guid, port = guid_str(named.group(1)), int(named.group(2))
            found = [(guid, "", "", port)]
            ends = [(inv.device(guid), port)]
            peer = inv.peer(guid, port) if code != 702 else None
            if peer is not None:
                ends.append((inv.device(peer[0]), peer[1]))
    if not ends:
        raise ParseError(None, None, "names no port (no link ends in the description, no "
                                     "<guid>_<port> object_name)")
    events = [PortEvent(id=stable_id("ufm-rest", fabric, ident, index), ts=ts, fabric=fabric,
                        source=SOURCE, device=device, port=port, state=state,
                        reason=f"{reason} (UFM {code} {severity})".replace(" )", ")"),
                        ufm_event_id=ident)
              for index, (device, port) in enumerate(ends)]
    if code == 702:
        result.unhealthy.update(f"{g}_{p}" for g, _k, _n, p in found)
    return events


def unhealthy_key(entry: Mapping[str, Any]) -> tuple[str, int] | None:
    guid = _guid(entry.get("UnhealthyGUID"))
    if guid is None:
        return None
    return guid, _port_no(entry.get("UnhealthyPortNumber"), "UnhealthyPortNumber")


@guarded
def parse_unhealthy(marks: Any, *, fabric: str, ts: int, previous: Iterable[str],
                    inventory: UfmInventory | None = None,
                    reported: Iterable[str] = ()) -> tuple[list[PortEvent], set[str]]:
    """``/app/unhealthy_ports`` answer -> events for marks added or removed since
    ``previous`` (a set of ``<0xguid>_<port>``), and the current set.

    A new mark whose port a 702 event (port is unhealthy) already reported (``reported``)
    makes no second ``down``: the flap detector counts every down."""
    if not isinstance(marks, list):
        raise ParseError(None, None, "the unhealthy_ports answer must be a JSON list")
    inv = inventory or UfmInventory()
    before = set(previous)
    now: dict[str, tuple[str, int, Mapping[str, Any]]] = {}
    for entry in marks:
        if not isinstance(entry, dict):
            raise ParseError(None, None, "an unhealthy_ports entry is not an object")
        key = unhealthy_key(entry)
        if key is None:
            continue
        now[f"{key[0]}_{key[1]}"] = (key[0], key[1], entry)
    out = []
    for name in sorted(set(now) - before - set(reported)):
        guid, port, entry = now[name]
        condition = entry.get("Condition")
        why = (",".join(map(str, condition)) if isinstance(condition, list)
               else str(condition or ""))[:200]
        device = inv.device(guid, kind=str(entry.get("UnhealthyNodeType") or ""),
                            name=str(entry.get("UnhealthyNode") or ""))
        out.append(PortEvent(
            id=stable_id("ufm-unhealthy", fabric, name, entry.get("StatusTime")), ts=ts,
            fabric=fabric, source=SOURCE, device=device, port=port, state="down",
            reason=f"unhealthy (UFM mark{': ' + why if why else ''})"))
    for name in sorted(before - set(now)):
        guid_s, _, port_s = name.rpartition("_")
        healed = _guid(guid_s)
        if healed is None or not port_s.isdigit():
            continue
        out.append(PortEvent(
            id=stable_id("ufm-healthy", fabric, name, ts), ts=ts, fabric=fabric, source=SOURCE,
            device=inv.device(healed), port=int(port_s), state="up",
            reason="marked healthy (UFM unhealthy mark removed)"))
    return out, set(now)


def _cell(value: str, column: str, line: int) -> int | float | None:
    text = value.strip()
    if text in ("", "N/A", "NA", "nan", "NaN"):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text.rstrip("Cc"))  # PDR: Module_Temperature may read "45C"
    except ValueError:
        raise ParseError(None, line, f"{column} value {text[:30]!r} is not a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        return None
    return number


@guarded
def parse_telemetry_csv(text: str, *, fabric: str,
                        inventory: UfmInventory | None = None) -> list[Counters]:
    """UFM Telemetry ``/csv/xcset/...`` text -> one counters event per device and time."""
    if len(text) > MAX_CSV_BYTES:
        raise ParseError(None, None, f"telemetry CSV is larger than {MAX_CSV_BYTES} bytes")
    if "\x00" in text:
        raise ParseError(None, None, "NUL byte: binary data, not telemetry CSV")
    inv = inventory or UfmInventory()
    try:
        return _telemetry_rows(csv.reader(io.StringIO(text, newline="")), fabric, inv)
    except csv.Error as exc:
        raise ParseError(None, None, f"not CSV: {exc}") from None


def _telemetry_rows(reader: Any, fabric: str, inv: UfmInventory) -> list[Counters]:
    header = next(reader, None)
    if header is None or not header:
        raise ParseError(None, 1, "telemetry CSV is empty")
    # UFM Telemetry's JSON form (and some CSV instances) spell the keys in lower case
    header = [_KEY_ALIASES.get(h.strip(), h.strip()) for h in header]
    missing = [c for c in ("timestamp", "Node_GUID", "Port_Number") if c not in header]
    if missing:
        raise ParseError(None, 1, f"not UFM telemetry CSV: no {', '.join(missing)} column")
    col = {name: i for i, name in enumerate(header)}
    devices: dict[tuple[str, int], DeviceSamples] = {}
    for line, row in enumerate(reader, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise ParseError(None, line, f"row has {len(row)} cells, the header {len(header)} "
                                         "(cut off?)")
        guid = _guid(row[col["Node_GUID"]])
        if guid is None:
            raise ParseError(None, line, f"Node_GUID {row[col['Node_GUID']][:30]!r} is not a GUID")
        port = _port_no(row[col["Port_Number"]], f"line {line}: Port_Number")
        stamp = _cell(row[col["timestamp"]], "timestamp", line)
        if not isinstance(stamp, int):
            raise ParseError(None, line, "timestamp is not an integer of microseconds")
        values: dict[str, Any] = {}
        bits: dict[str, int] = {}
        for name, index in col.items():
            if name in _KEY_COLUMNS:
                continue
            number = _cell(row[index], name, line)
            target = UFM_CSV_FIELDS.get(name)
            if target is None:
                values.setdefault(f"ufm_{name}", number)
                continue
            if target in _FLOAT_FIELDS:
                values[target] = None if number is None else float(number)
            elif number is None:
                values.setdefault(target, None)
            elif isinstance(number, float) and not number.is_integer():
                raise ParseError(None, line, f"{name} {number} is not a whole count")
            elif number < 0:
                raise ParseError(None, line, f"{name} {number} is negative")
            else:
                values[target] = int(number)
                if name.endswith("Extended") and target in LEGACY_COUNTER_BITS:
                    bits[target] = 64  # PortCountersExtended: a 64-bit register
        device = inv.device(guid)
        dev = devices.setdefault((device, stamp // 1000), DeviceSamples(device, ts=stamp // 1000))
        sample = dev.sample(port)
        sample.values.update(values)
        sample.bits.update(bits)
    if not devices:
        raise ParseError(None, None, "no telemetry row found")
    return counters_events(devices, fabric=fabric, ts=0, source=SOURCE, kind="ufm-telemetry-csv")
