"""Streaming telemetry and NIC counter dumps to ``counters`` events.

Formats: gnmic JSON (``event`` format, the default ``json`` format, and ``protojson``),
``ethtool -S`` of an mlx5 NIC, ``/sys/class/infiniband/<hca>/ports/<n>/...`` dumps as
``grep -r .`` prints them, ``rdma statistic`` output, ``sflowtool`` text, UFM telemetry
JSON, and SONiC ``show pfc counters`` / ``show queue counters`` (text and ``--json``) /
``show queue wredcounters`` / ``pfcwd show stats``.

Ethernet ports. The contract's port is an integer; an interface name becomes the last
integer in it (``Ethernet8`` -> 8, ``ethernet-1/3`` -> 3, ``swp12`` -> 12, ``mgmt0`` -> 0)
and the sample keeps the name in the extra field ``interface``. Two interfaces of one
device that map to the same number are refused (a ``ParseError`` naming both), except
SONiC backplane ports (``Ethernet-BP<n>``), internal ASIC-to-ASIC links with no
front-panel number, which are left out. A name with no number is refused.

Priority counters. ``pfc_pause_rx`` / ``pfc_pause_tx`` are the sum over the eight
priorities (each priority is kept too, as ``pfc<N>_rx`` / ``pfc<N>_tx``); where a NIC
reports only MAC-control pause frames (``rx/tx_pause_ctrl_phy``) those are used.

Values that a tool prints as unknown (``N/A``, sFlow's 4294967295 sentinel) are null.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from collectors.common import (
    DeviceSamples,
    counters_events,
    guarded,
    guid_str,
    lines,
    port_number,
    to_int,
)
from collectors.errors import ParseError
from collectors.gnmic_map import lookup
from collectors.lidmap import LidMap
from schemas import LEGACY_COUNTER_BITS, Counters

MAX_JSON_BYTES = 256 * 1024 * 1024
_BACKPLANE = re.compile(r"^Ethernet-BP\d+$")


class _Ports:
    """Per-device samples keyed by interface name, refusing two names on one number."""

    def __init__(self) -> None:
        self.devices: dict[tuple[str, int | None], DeviceSamples] = {}
        self._names: dict[tuple[str, int | None, int], str] = {}

    def put(self, device: str, interface: str | int, values: dict[str, Any], *,
            ts: int | None = None, line: int | None = None,
            bits: dict[str, int] | None = None) -> None:
        if isinstance(interface, int):
            port, name = interface, None
        else:
            port, name = port_number(interface, line), interface
        seen = self._names.setdefault((device, ts, port), name or str(port))
        if name is not None and seen != name:
            raise ParseError(None, line, f"interfaces {seen!r} and {name!r} of {device!r} "
                                         f"both map to port {port}")
        dev = self.devices.setdefault((device, ts), DeviceSamples(device, ts=ts))
        sample = dev.sample(port)
        if name is not None:
            sample.values["interface"] = name
        sample.values.update(values)
        if bits:
            sample.bits.update(bits)

    def events(self, *, fabric: str, ts: int, source: str, kind: str) -> list[Counters]:
        return counters_events(self.devices, fabric=fabric, ts=ts, source=source, kind=kind)


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _snake(name: str) -> str:
    """``ifInOctets`` -> ``if_in_octets``, ``in-octets`` -> ``in_octets``."""
    return re.sub(r"[^0-9a-zA-Z]+", "_", _CAMEL.sub("_", name)).strip("_").lower()


def _num(value: Any, line: int | None, what: str) -> int | float | None:
    """A counter value: int, float, a numeric string; N/A and empty are None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        text = value.strip().replace(",", "")
        if text.upper() in {"N/A", "NA", ""}:
            return None
        try:
            return int(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                raise ParseError(None, line, f"{what} value {value[:40]!r} is not a "
                                             "number") from None
    raise ParseError(None, line, f"{what} value of type {type(value).__name__} is not a number")


def _pfc_totals(values: dict[str, Any]) -> None:
    for direction in ("rx", "tx"):
        prios = [values.get(f"pfc{p}_{direction}") for p in range(8)]
        known = [v for v in prios if isinstance(v, int)]
        if known:
            values[f"pfc_pause_{direction}"] = sum(known)


def _load_json(text: str) -> Iterator[tuple[int, Any]]:
    """JSON values from a document or JSON lines, each with the line it starts on."""
    if len(text) > MAX_JSON_BYTES:
        raise ParseError(None, None, f"input is larger than {MAX_JSON_BYTES} bytes")
    stripped = text.strip()
    if not stripped:
        raise ParseError(None, None, "input is empty")
    try:
        yield 1, orjson.loads(stripped)
        return
    except orjson.JSONDecodeError as exc:
        first_error = exc
    # JSON lines (gnmic's file output writes one message per line).
    count = 0
    for number, line in lines(text, max_chars=MAX_JSON_BYTES):
        if not line.strip():
            continue
        try:
            yield number, orjson.loads(line)
            count += 1
        except orjson.JSONDecodeError as exc:
            if count == 0:
                raise ParseError(None, first_error.lineno,
                                 f"not JSON: {first_error.msg}") from None
            raise ParseError(None, number, f"not JSON: {exc.msg}") from None


# ---------------------------------------------------------------- gnmic

# Leaf paths -> contract fields: collectors.gnmic_map.GNMIC_TABLE, the one table for gnmic
# (the Kafka consumer uses it too); a leaf it does not name is kept as its snake_case name.
_KEYED_ELEM = re.compile(r"^([^\[]+)\[(?:name|interface|ifname|port)=([^\]]+)\]$")


def _path_interface(path: str) -> str | None:
    """The interface named in a gNMI path string (``.../interface[name=eth1]/...``)."""
    for elem in path.strip("/").split("/"):
        match = _KEYED_ELEM.match(elem)
        if match:
            return match.group(2)
    for elem in path.strip("/").split("/"):  # SONiC: COUNTERS/Ethernet0/SAI_...
        if re.fullmatch(r"Ethernet\d+", elem):
            return elem
    return None


def _gnmi_value(ports: _Ports, device: str, interface: str, leaf: str, value: Any,
                ts: int, line: int) -> None:
    if interface and _BACKPLANE.match(interface):
        return
    key = leaf.rsplit("/", 1)[-1]
    found = lookup(leaf)
    if found is not None and found[0].kind == "oper-status":
        return  # a state, not a counter (the Kafka consumer makes port events of it)
    field = found[1] if found is not None and "{" not in found[1] else _snake(key)
    number = _num(value, line, key) if not isinstance(value, dict | list) else None
    if number is None and isinstance(value, str) and value.upper() not in {"N/A", "NA", ""}:
        return
    values: dict[str, Any] = {field: number}
    ports.put(device, interface, values, ts=ts, line=line,
              bits={field: 64} if field in LEGACY_COUNTER_BITS and number is not None else None)


def _ns_to_ms(value: Any, line: int) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or isinstance(value, bool):
        raise ParseError(None, line, "gNMI timestamp is not an integer of nanoseconds")
    return value // 1_000_000


def _gnmi_messages(doc: Any) -> Iterable[Any]:
    return doc if isinstance(doc, list) else [doc]


def _elem_path(path: Any) -> tuple[str | None, str]:
    """(interface, leaf) of a protojson gNMI Path."""
    interface = None
    names = []
    for elem in (path or {}).get("elem", []) if isinstance(path, dict) else []:
        if not isinstance(elem, dict):
            continue
        names.append(str(elem.get("name", "")))
        keys = elem.get("key") or {}
        if isinstance(keys, dict):
            for key in ("name", "interface", "ifname", "port"):
                if key in keys:
                    interface = str(keys[key])
    return interface, "/".join(names)


_TYPED_VALUES = ("uintVal", "intVal", "floatVal", "doubleVal", "decimalVal", "stringVal")


@guarded
def parse_gnmic(text: str, *, fabric: str, device: str | None = None,
                source: str = "gnmi") -> list[Counters]:
    """gnmic output -> one counters event per device and timestamp.

    ``event`` format: a list (or JSON lines) of ``{name, timestamp, tags, values}``, the
    interface in ``tags.interface_name`` (or any ``*interface*``/``name`` tag) and the device
    in ``tags.source``. Default ``json`` format: ``{source, timestamp, updates: [{Path,
    values}]}``. ``protojson``: ``{update: {timestamp, prefix, update: [{path, val}]}}``.
    ``device`` overrides the target name gnmic reports.
    """
    ports = _Ports()
    seen = 0
    for start, doc in _load_json(text):
        for message in _gnmi_messages(doc):
            if not isinstance(message, dict):
                raise ParseError(None, start, "a gnmic message must be a JSON object")
            if "values" in message and "tags" in message:  # event format
                tags = message.get("tags") or {}
                if not isinstance(tags, dict) or not isinstance(message["values"], dict):
                    raise ParseError(None, start, "event message with malformed tags/values")
                ts = _ns_to_ms(message.get("timestamp"), start)
                interface = next((str(v) for k, v in tags.items()
                                  if "interface" in k or k in ("name", "ifname", "port")),
                                 None)
                target = device or str(tags.get("source") or "")
                if not target:
                    raise ParseError(None, start, "no device: the message has no "
                                                  "tags.source; give --device")
                for leaf, value in message["values"].items():
                    where = interface or _path_interface(leaf)
                    if where is None:
                        continue
                    _gnmi_value(ports, target, where, leaf, value, ts, start)
                    seen += 1
            elif "updates" in message:  # json format
                ts = _ns_to_ms(message.get("timestamp"), start)
                target = device or str(message.get("source") or "")
                if not target:
                    raise ParseError(None, start, "no device: the message has no source; "
                                                  "give --device")
                for update in message.get("updates") or []:
                    if not isinstance(update, dict):
                        raise ParseError(None, start, "an update must be a JSON object")
                    where = _path_interface(str(update.get("Path", "")))
                    for leaf, value in (update.get("values") or {}).items():
                        leaf_where = where or _path_interface(leaf)
                        if leaf_where is None:
                            continue
                        if isinstance(value, dict):  # a container: its leaves
                            for sub, subvalue in value.items():
                                if not isinstance(subvalue, dict | list):
                                    _gnmi_value(ports, target, leaf_where, f"{leaf}/{sub}",
                                                subvalue, ts, start)
                                    seen += 1
                        else:
                            _gnmi_value(ports, target, leaf_where, leaf, value, ts, start)
                            seen += 1
            elif isinstance(message.get("update"), dict):  # protojson
                notification = message["update"]
                ts = _ns_to_ms(notification.get("timestamp"), start)
                prefix_if, prefix_path = _elem_path(notification.get("prefix"))
                prefix = notification.get("prefix") or {}
                target = device or str(prefix.get("target") or message.get("source") or "")
                if not target:
                    raise ParseError(None, start, "no device: the notification has no "
                                                  "prefix.target; give --device")
                for update in notification.get("update") or []:
                    if not isinstance(update, dict):
                        raise ParseError(None, start, "an update must be a JSON object")
                    where, leaf = _elem_path(update.get("path"))
                    where = where or prefix_if
                    val = update.get("val") or {}
                    if where is None or not isinstance(val, dict):
                        continue
                    value = next((val[k] for k in _TYPED_VALUES if k in val), None)
                    if value is None:
                        continue
                    _gnmi_value(ports, target, where, f"{prefix_path}/{leaf}", value, ts,
                                start)
                    seen += 1
            elif message.get("sync_response") or message.get("syncResponse"):
                continue
            else:
                raise ParseError(None, start, "not a gnmic message (event, json or protojson "
                                              "format)")
    if not seen:
        raise ParseError(None, None, "no interface counter found in the gnmic output")
    for dev in ports.devices.values():
        for sample in dev.samples.values():
            _pfc_totals(sample.values)
    return ports.events(fabric=fabric, ts=0, source=source, kind="gnmic")


# ---------------------------------------------------------------- ethtool -S (mlx5)

ETHTOOL_FIELDS: dict[str, str] = {
    "rx_discards_phy": "rx_discards_phy",
    "rx_symbol_err_phy": "symbol_errors",
    "rx_crc_errors_phy": "rcv_errors",
    "link_down_events_phy": "link_downed",
    "tx_discards_phy": "xmit_discards",
    "rx_out_of_buffer": "out_of_buffer",
}
_ETH_LINE = re.compile(r"^\s*([A-Za-z0-9_.\-\[\]]+):\s*(-?\d+)\s*$")
_PER_QUEUE = re.compile(r"^(?:ch|rx|tx|xdpsq|ptp|qos_tx|rx_xsk|tx_xsk)\d+_")
_PRIO_PAUSE = re.compile(r"^(rx|tx)_prio(\d)_pause$")


@guarded
def parse_ethtool(text: str, *, fabric: str, ts: int, device: str, port: int = 1,
                  source: str = "ethtool") -> list[Counters]:
    """``ethtool -S <mlx5 netdev>`` -> one counters event (device and port from options).

    Per-channel and per-queue counters (``ch0_``, ``rx3_``, ...) are dropped; every other
    counter is kept, mapped to the contract where it has a field (64-bit registers).
    """
    values: dict[str, Any] = {}
    seen = False
    for number, line in lines(text):
        stripped = line.strip()
        if not stripped or stripped.endswith("statistics:"):
            seen = seen or stripped.endswith("statistics:")
            continue
        match = _ETH_LINE.match(line)
        if match is None:
            raise ParseError(None, number, f"not ethtool -S output: {stripped[:80]!r}")
        seen = True
        name, raw = match.groups()
        if _PER_QUEUE.match(name):
            continue
        value = int(raw)
        if value < 0:
            raise ParseError(None, number, f"{name} is negative")
        prio = _PRIO_PAUSE.match(name)
        if prio:
            values[f"pfc{prio.group(2)}_{prio.group(1)}"] = value
            continue
        values[ETHTOOL_FIELDS.get(name, _snake(name))] = value
    if not seen or not values:
        raise ParseError(None, None, "no ethtool -S counter found")
    _pfc_totals(values)
    for direction in ("rx", "tx"):
        if f"pfc_pause_{direction}" not in values and f"{direction}_pause_ctrl_phy" in values:
            values[f"pfc_pause_{direction}"] = values[f"{direction}_pause_ctrl_phy"]
    ports = _Ports()
    bits = {f: 64 for f in values if f in LEGACY_COUNTER_BITS}
    ports.put(device, port, values, bits=bits)
    return ports.events(fabric=fabric, ts=ts, source=source, kind="ethtool")


# ---------------------------------------------------------------- RDMA hw_counters, sysfs

HW_COUNTER_FIELDS: dict[str, str] = {
    "np_ecn_marked_roce_packets": "ecn_marked",
    "np_cnp_sent": "cnp_sent",
    "rp_cnp_handled": "cnp_handled",
    "out_of_sequence": "out_of_sequence",
    "local_ack_timeout_err": "local_ack_timeout_err",
}
SYSFS_COUNTER_FIELDS: dict[str, str] = {
    "symbol_error": "symbol_errors",
    "link_error_recovery": "link_error_recovery",
    "link_downed": "link_downed",
    "port_rcv_errors": "rcv_errors",
    "port_rcv_remote_physical_errors": "rcv_remote_phys_errors",
    "port_xmit_discards": "xmit_discards",
    "port_xmit_wait": "xmit_wait",
    "local_link_integrity_errors": "local_link_integrity_errors",
    "excessive_buffer_overrun_errors": "excessive_buffer_overrun",
    # PortXmitPkts / PortRcvPkts: the packets the drop-rate rule divides errors by
    "port_xmit_packets": "port_xmit_pkts",
    "port_rcv_packets": "port_rcv_pkts",
}
_SYSFS_LINE = re.compile(r"^(?:.*/)?([A-Za-z0-9_.\-]+)/ports/(\d+)/([A-Za-z0-9_/\-]+):(.*)$")
_RATE = re.compile(r"\((\d+X)\s+([A-Z0-9]+)\)")


def _hca_device(host: str | None, hca: str, line: int | None) -> str:
    if not host:
        raise ParseError(None, line, "the dump names the HCA but not the host; give the host "
                                     "name (--device HOST), the device becomes HOST/HCA")
    return f"{host}/{hca}"


@guarded
def parse_sysfs_counters(text: str, *, fabric: str, ts: int, host: str | None,
                         source: str = "sysfs") -> list[Counters]:
    """``grep -r . /sys/class/infiniband/<hca>/ports/<n>/`` -> counters, one event per HCA.

    ``counters/*`` are the PMA counters (legacy register widths for the error counters),
    ``hw_counters/*`` the driver's RoCE/transport counters; ``rate``, ``state`` and
    ``phys_state`` give width, speed and state. The device is ``HOST/HCA``.
    """
    ports = _Ports()
    seen = False
    for number, line in lines(text):
        stripped = line.strip()
        if not stripped:
            continue
        match = _SYSFS_LINE.match(stripped)
        if match is None:
            if re.match(r"^(?:.*/)?[A-Za-z0-9_.\-]+/[a-z_]+:", stripped):
                continue  # HCA-level files (fw_ver, board_id, node_desc, ...)
            raise ParseError(None, number, "not a '<hca>/ports/<n>/<file>:<value>' line: "
                                           f"{stripped[:80]!r}")
        hca, port_s, name, value = match.groups()
        group, _, leaf = name.rpartition("/")
        values: dict[str, Any] = {}
        bits: dict[str, int] = {}
        if group in ("counters", "hw_counters"):
            number_value = _num(value, number, leaf)
            table = SYSFS_COUNTER_FIELDS if group == "counters" else HW_COUNTER_FIELDS
            field = table.get(leaf) or _snake(leaf)
            values[field] = number_value
            if group == "counters" and field in LEGACY_COUNTER_BITS:
                bits[field] = LEGACY_COUNTER_BITS[field]
        elif name == "rate":
            rate = _RATE.search(value)
            if rate:
                values["width"], values["speed"] = rate.group(1), rate.group(2)
        elif name in ("state", "phys_state"):
            values[name] = value.split(":", 1)[-1].strip()
        elif name == "link_layer":
            values["link_layer"] = value.strip()
        else:
            continue
        seen = True
        ports.put(_hca_device(host, hca, number), int(port_s), values, bits=bits)
    if not seen:
        raise ParseError(None, None, "no /sys/class/infiniband port counter found")
    return ports.events(fabric=fabric, ts=ts, source=source, kind="sysfs")


_RDMA_LINK = re.compile(r"^link\s+([A-Za-z0-9_.\-]+)/(\d+)\s*(.*)$")


@guarded
def parse_rdma_statistic(text: str, *, fabric: str, ts: int, host: str | None,
                         source: str = "rdma") -> list[Counters]:
    """``rdma statistic [show link ...]`` -> counters (lines that start with a space
    continue the previous ``link HCA/PORT`` record). The device is ``HOST/HCA``."""
    records: list[tuple[int, str, int, list[str]]] = []
    for number, line in lines(text):
        if not line.strip():
            continue
        match = _RDMA_LINK.match(line.strip())
        if match:
            records.append((number, match.group(1), int(match.group(2)),
                            match.group(3).split()))
        elif line[:1].isspace() and records:
            records[-1][3].extend(line.split())
        else:
            raise ParseError(None, number, f"not rdma statistic output: {line.strip()[:80]!r}")
    if not records:
        raise ParseError(None, None, "no 'link HCA/PORT ...' record found")
    ports = _Ports()
    for number, hca, port, tokens in records:
        if len(tokens) % 2:
            raise ParseError(None, number, "counter names and values do not pair up "
                                           "(truncated record?)")
        values: dict[str, Any] = {}
        for name, value in zip(tokens[::2], tokens[1::2], strict=True):
            values[HW_COUNTER_FIELDS.get(name) or _snake(name)] = to_int(value, number, name)
        ports.put(_hca_device(host, hca, number), port, values)
    return ports.events(fabric=fabric, ts=ts, source=source, kind="rdma")


# ---------------------------------------------------------------- sflowtool

SFLOW_FIELDS: dict[str, str] = {
    "ifInErrors": "rcv_errors",
    "ifOutDiscards": "xmit_discards",
}
SFLOW_UNKNOWN = 4294967295  # sFlow's "counter not available"


@guarded
def parse_sflowtool(text: str, *, fabric: str, device: str | None = None,
                    source: str = "sflow") -> list[Counters]:
    """``sflowtool`` text -> counters from each COUNTERSSAMPLE's generic interface block.

    The device is ``device`` or the datagram's ``agent`` address; the port comes from
    ``ifName`` when present, else ``ifIndex``; ``ts`` from ``unixSecondsUTC``. Flow
    samples and non-interface counter blocks (host, OVS) are skipped.
    """
    ports = _Ports()
    agent: str | None = None
    ts: int | None = None
    sample: dict[str, str] | None = None
    sample_line = 0
    in_datagram = False
    seen_datagram = False

    def flush() -> None:
        if sample is None or sample.get("sampleType") != "COUNTERSSAMPLE":
            return
        if "ifIndex" not in sample:
            return
        target = device or agent
        if not target:
            raise ParseError(None, sample_line, "counter sample without an agent; give "
                                                "--device")
        if ts is None:
            raise ParseError(None, sample_line, "counter sample outside a datagram with "
                                                "unixSecondsUTC")
        values: dict[str, Any] = {}
        for key, raw in sample.items():
            if not key.startswith("if") or key in ("ifName", "ifIndex"):
                continue
            number = _num(raw, sample_line, key)
            if number == SFLOW_UNKNOWN:
                number = None
            values[SFLOW_FIELDS.get(key) or _snake(key)] = number
        status = _num(sample.get("ifStatus"), sample_line, "ifStatus")
        if isinstance(status, int):
            values["state"] = "up" if status & 2 else "down"
        interface: str | int = sample.get("ifName") or int(sample["ifIndex"])
        ports.put(target, interface, values, ts=ts, line=sample_line)

    for number, line in lines(text):
        stripped = line.strip()
        if not stripped:
            continue
        key, _, value = stripped.partition(" ")
        value = value.strip()
        if key == "startDatagram":
            in_datagram, seen_datagram, agent, ts = True, True, None, None
        elif key == "endDatagram":
            in_datagram = False
        elif key == "startSample":
            sample, sample_line = {}, number
        elif key == "endSample":
            flush()
            sample = None
        elif not in_datagram:
            raise ParseError(None, number, f"not sflowtool output: {stripped[:80]!r}")
        elif sample is not None:
            sample[key] = value
        elif key == "agent":
            agent = value
        elif key == "unixSecondsUTC":
            ts = to_int(value, number, key) * 1000
    if not seen_datagram:
        raise ParseError(None, None, "no sflowtool datagram found")
    if sample is not None or in_datagram:
        raise ParseError(None, None, "the last datagram is not closed (truncated output?)")
    if not ports.devices:
        raise ParseError(None, None, "no interface counter sample (COUNTERSSAMPLE with "
                                     "ifIndex) found")
    return ports.events(fabric=fabric, ts=0, source=source, kind="sflowtool")


# ---------------------------------------------------------------- UFM telemetry

UFM_FIELDS: dict[str, str] = {
    "SymbolErrors": "symbol_errors",
    "LinkRecovers": "link_error_recovery",
    "LinkDowned": "link_downed",
    "RcvErrors": "rcv_errors",
    "RcvRemotePhysErrors": "rcv_remote_phys_errors",
    "XmtDiscards": "xmit_discards",
    "XmitWait": "xmit_wait",
    "LinkIntegrityErrors": "local_link_integrity_errors",
    "ExcBufOverrunErrors": "excessive_buffer_overrun",
}
_UFM_KEY = re.compile(r"^Infiniband_([A-Za-z0-9]+?)(?:_f)?_u_\w+$")


@guarded
def parse_ufm_telemetry(text: str, *, fabric: str, lids: LidMap | None = None,
                        source: str = "ufm") -> list[Counters]:
    """UFM telemetry JSON (``{values: [{timestamp, node_guid, port_num, Infiniband_*}]}``)
    -> counters; the device is the topology's name for the node GUID, else the GUID."""
    ports = _Ports()
    for start, doc in _load_json(text):
        for message in doc if isinstance(doc, list) else [doc]:
            if not isinstance(message, dict) or not isinstance(message.get("values"), list):
                raise ParseError(None, start, "not a UFM telemetry message (no 'values' list)")
            for entry in message["values"]:
                if not isinstance(entry, dict) or "port_num" not in entry:
                    raise ParseError(None, start, "telemetry entry without port_num")
                guid = entry.get("node_guid") or entry.get("source_id")
                try:
                    node = guid_str(str(guid))
                except ValueError:
                    raise ParseError(None, start, f"node_guid {str(guid)[:40]!r} is not a "
                                                  "GUID") from None
                name = (lids.device_for_guid(node) if lids else None) or node
                stamp = entry.get("timestamp")
                if not isinstance(stamp, int) or isinstance(stamp, bool):
                    raise ParseError(None, start, "telemetry entry without an integer "
                                                  "timestamp (microseconds)")
                values: dict[str, Any] = {}
                for key, value in entry.items():
                    match = _UFM_KEY.match(key)
                    if match is None:
                        continue
                    values[UFM_FIELDS.get(match.group(1)) or _snake(match.group(1))] = (
                        _num(value, start, key))
                port = _num(entry["port_num"], start, "port_num")
                if not isinstance(port, int):
                    raise ParseError(None, start, "port_num is not an integer")
                ports.put(name, port, values, ts=stamp // 1000, line=start)
    if not ports.devices:
        raise ParseError(None, None, "no UFM telemetry entry found")
    return ports.events(fabric=fabric, ts=0, source=source, kind="ufm-telemetry")


# ---------------------------------------------------------------- SONiC show commands

_SONIC_RULE = re.compile(r"^-+(\s+-+)*$")


def _tables(text: str) -> Iterator[tuple[int, list[str], list[tuple[int, list[str]]]]]:
    """(header line, header columns, rows) of each dash-ruled table in SONiC show output."""
    numbered = list(lines(text))
    i = 0
    while i < len(numbered):
        number, line = numbered[i]
        if i + 1 < len(numbered) and _SONIC_RULE.match(numbered[i + 1][1].strip() or "x"):
            rule = numbered[i + 1][1]
            spans = [(m.start(), m.end()) for m in re.finditer(r"-+", rule)]
            header = [line[a:b if k + 1 < len(spans) else None].strip() if k else
                      line[:b].strip() for k, (a, b) in enumerate(spans)]
            rows = []
            i += 2
            while i < len(numbered) and numbered[i][1].strip():
                row_no, row = numbered[i]
                cells = row.split()
                rows.append((row_no, cells))
                i += 1
            yield number, header, rows
        else:
            i += 1


@guarded
def parse_sonic_show(text: str, *, fabric: str, ts: int, device: str,
                     source: str = "sonic") -> list[Counters]:
    """SONiC ``show pfc counters``, ``show queue counters`` (text or ``--json``), ``show
    queue wredcounters`` and ``pfcwd show stats`` -> counters of the switch named ``device``.

    PFC tables give ``pfc<N>_rx``/``pfc<N>_tx`` and their sums; queue tables give
    ``q<type><n>_pkts``/``_bytes``/``_drop_pkts``/``_drop_bytes`` per queue and
    ``queue_drop_pkts`` in total (kept beside the contract, which has no queue field);
    wredcounters tables give ``wred_<type><n>_drop_pkts``/``_ecn_pkts`` per queue,
    ``ecn_marked_q<N>`` for unicast queue N (priority N's egress queue) and their sum over
    all queues as ``ecn_marked`` (unless the text reports that itself); pfcwd tables give
    ``pfcwd_q<n>_status`` and storm detected/restored counts.
    """
    ports = _Ports()
    if text.lstrip().startswith("{"):
        for start, doc in _load_json(text):
            if not isinstance(doc, dict):
                raise ParseError(None, start, "not show queue counters --json output")
            for interface, queues in doc.items():
                if _BACKPLANE.match(interface):
                    continue
                if not isinstance(queues, dict):
                    raise ParseError(None, start, f"{interface}: queues are not an object")
                values: dict[str, Any] = {}
                for queue, stats in queues.items():
                    if not isinstance(stats, dict):
                        raise ParseError(None, start, f"{interface} {queue}: not an object")
                    q = _snake(queue)
                    for key, out in (("totalpacket", "pkts"), ("totalbytes", "bytes"),
                                     ("droppacket", "drop_pkts"), ("dropbytes", "drop_bytes")):
                        values[f"q_{q}_{out}"] = _num(stats.get(key), start, key)
                _queue_total(values)
                ports.put(device, interface, values, line=start)
        if not ports.devices:
            raise ParseError(None, None, "no queue counters found")
        return ports.events(fabric=fabric, ts=ts, source=source, kind="sonic")

    seen = False
    for header_line, header, rows in _tables(text):
        first = header[0] if header else ""
        if first in ("Port Rx", "Port Tx"):
            direction = first[-2:].lower()
            for number, cells in rows:
                if len(cells) != 9:
                    raise ParseError(None, number, "a PFC row needs a port and 8 priorities")
                if _BACKPLANE.match(cells[0]):
                    continue
                values = {f"pfc{p}_{direction}": _num(cells[p + 1], number, f"PFC{p}")
                          for p in range(8)}
                ports.put(device, cells[0], values, line=number)
                seen = True
        elif header == _WRED_HEADER:
            # sonic-utilities scripts/wredstat: a port's queues as UC<n>/MC<n>/ALL<n>
            for number, cells in rows:
                if len(cells) != 6:
                    raise ParseError(None, number, "a wredcounters row needs 6 columns")
                if _BACKPLANE.match(cells[0]):
                    continue
                kind, index = _wred_queue(cells[1], number)
                values = {f"wred_{kind}{index}_drop_pkts": _num(cells[2], number, "WredDrp/pkts"),
                          f"wred_{kind}{index}_ecn_pkts": _num(cells[4], number,
                                                               "EcnMarked/pkts")}
                marks = values[f"wred_{kind}{index}_ecn_pkts"]
                if kind == "uc" and marks is not None:
                    # a unicast queue's index is its traffic class: priority N's queue
                    values[f"ecn_marked_q{index}"] = marks
                ports.put(device, cells[0], values, line=number)
                seen = True
        elif header[:2] == ["Port", "TxQ"]:
            for number, cells in rows:
                if len(cells) != 6:
                    raise ParseError(None, number, "a queue row needs 6 columns")
                if _BACKPLANE.match(cells[0]):
                    continue
                q = _snake(cells[1])
                values = {f"q_{q}_pkts": _num(cells[2], number, "Counter/pkts"),
                          f"q_{q}_bytes": _num(cells[3], number, "Counter/bytes"),
                          f"q_{q}_drop_pkts": _num(cells[4], number, "Drop/pkts"),
                          f"q_{q}_drop_bytes": _num(cells[5], number, "Drop/bytes")}
                ports.put(device, cells[0], values, line=number)
                seen = True
        elif first == "QUEUE":
            for number, cells in rows:
                if len(cells) != 7 or ":" not in cells[0]:
                    raise ParseError(None, number, "a pfcwd row needs PORT:QUEUE and 6 columns")
                interface, _, queue = cells[0].partition(":")
                if _BACKPLANE.match(interface):
                    continue
                detected, _, restored = cells[2].partition("/")
                values = {f"pfcwd_q{queue}_status": cells[1],
                          f"pfcwd_q{queue}_storms_detected": _num(detected, number, "STORM"),
                          f"pfcwd_q{queue}_storms_restored": _num(restored, number, "STORM")}
                ports.put(device, interface, values, line=number)
                seen = True
        else:
            raise ParseError(None, header_line, f"unknown SONiC table {' | '.join(header)[:80]!r}")
    if not seen:
        raise ParseError(None, None, "no SONiC show table found")
    for dev in ports.devices.values():
        for sample in dev.samples.values():
            _pfc_totals(sample.values)
            _queue_total(sample.values)
            _ecn_total(sample.values)
    return ports.events(fabric=fabric, ts=ts, source=source, kind="sonic")


# scripts/wredstat's ``header`` (``show queue wredcounters``)
_WRED_HEADER = ["Port", "TxQ", "WredDrp/pkts", "WredDrp/bytes", "EcnMarked/pkts",
                "EcnMarked/bytes"]
_WRED_QUEUE = re.compile(r"^(UC|MC|ALL)(\d+)$")


def _wred_queue(cell: str, line: int) -> tuple[str, int]:
    m = _WRED_QUEUE.match(cell)
    if m is None:
        raise ParseError(None, line, f"wredcounters queue {cell[:20]!r} is not UC/MC/ALL<n>")
    return m.group(1).lower(), int(m.group(2))


def _ecn_total(values: dict[str, Any]) -> None:
    """``ecn_marked``: the marks of all the port's queues, unless reported otherwise."""
    marks = [v for k, v in values.items() if k.startswith("wred_") and k.endswith("_ecn_pkts")
             and isinstance(v, int)]
    if marks and "ecn_marked" not in values:
        values["ecn_marked"] = sum(marks)


def _queue_total(values: dict[str, Any]) -> None:
    drops = [v for k, v in values.items() if k.startswith("q_") and k.endswith("_drop_pkts")
             and isinstance(v, int)]
    if drops:
        values["queue_drop_pkts"] = sum(drops)


# ---------------------------------------------------------------- mlxlink --json

_FIRST_NUMBER = re.compile(r"^\s*(-?[\d.]+(?:[eE][-+]?\d+)?)")


def _mlx_float(value: Any, what: str) -> float | None:
    if not isinstance(value, str):
        return None
    match = _FIRST_NUMBER.match(value)
    if match is None:
        return None  # "N/A"
    try:
        return float(match.group(1))
    except ValueError:
        raise ParseError(None, None, f"mlxlink {what} {value[:40]!r} is not a number") from None


_MLX_RANGE = re.compile(r"\[\s*(-?[\d.]+)\s*\.\.\s*(-?[\d.]+)\s*\]\s*$")


def _mlx_range(value: Any, what: str) -> tuple[float, float] | None:
    """The ``[low..high]`` an mlxlink module reading ends with (its thresholds), if any."""
    if not isinstance(value, str):
        return None
    match = _MLX_RANGE.search(value)
    if match is None:
        return None
    try:
        low, high = float(match.group(1)), float(match.group(2))
    except ValueError:
        raise ParseError(None, None, f"mlxlink {what} range {value[:60]!r} is not numbers") from None
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise ParseError(None, None, f"mlxlink {what} range {value[:60]!r} is not low..high")
    return low, high


def _mlx_lanes(value: Any, what: str) -> list[float]:
    """Per-lane values, from ``"3.58,3.25,3.23,2.65 [-9.9..6.9]"`` or ``{"values": [...]}``."""
    if isinstance(value, dict):
        items = value.get("values") or []
    elif isinstance(value, str):
        items = value.split("[", 1)[0].split(",")
    else:
        return []
    out = []
    for item in items:
        number = _mlx_float(str(item), what)
        if number is not None:
            out.append(number)
    return out


def _cable_media(text: object) -> str | None:
    """The BER table's media from mlxlink's "Cable Type" (``Optical Module (separated)``,
    ``Passive copper cable``, ``Active copper cable``); None when it says none of them."""
    if not isinstance(text, str):
        return None
    low = text.lower()
    if "optical" in low or "optic" in low:
        return "optic"
    if "copper" in low:
        return "acc" if "active" in low else "dac"
    return None


@guarded
def parse_mlxlink(text: str, *, fabric: str, ts: int, device: str, port: int = 1,
                  source: str = "mlxlink") -> list[Counters]:
    """``mlxlink -m -c [--show_histogram] --json`` -> one sample with BER, FEC, module data.

    ``raw_ber`` / ``effective_ber`` from "Physical Counters and BER Info";
    ``fec_uncorrectable`` = "Effective Physical Errors" (errors FEC did not correct);
    ``fec_corrected`` = codewords in FEC histogram bins 1..15 (with 1 to 15 corrected
    symbols), where the histogram is present; ``module_temp_c``; ``rx_power_dbm`` = the
    weakest lane (all lanes in ``rx_power_dbm_lanes``); the module's vendor, part and serial
    number as evidence for a cable ticket; ``fec_mode`` and ``media`` (from "Cable Type")
    for the BER table's link type. mlxlink does not print which device it read, so
    ``device`` and ``port`` come from the caller.
    """
    docs = list(_load_json(text))
    if len(docs) != 1 or not isinstance(docs[0][1], dict):
        raise ParseError(None, None, "not mlxlink --json output (one JSON object expected)")
    doc = docs[0][1]
    status = doc.get("status")
    if isinstance(status, dict) and status.get("code") not in (0, None):
        raise ParseError(None, None, f"mlxlink reported failure: {str(status.get('message'))[:120]}")
    output = (doc.get("result") or {}).get("output") if isinstance(doc.get("result"), dict) else None
    if not isinstance(output, dict):
        raise ParseError(None, None, "not mlxlink --json output (no result.output object)")
    values: dict[str, Any] = {}
    phys = output.get("Physical Counters and BER Info")
    if isinstance(phys, dict):
        values["raw_ber"] = _mlx_float(phys.get("Raw Physical BER"), "Raw Physical BER")
        values["effective_ber"] = _mlx_float(phys.get("Effective Physical BER"),
                                             "Effective Physical BER")
        for key, field in (("Effective Physical Errors", "fec_uncorrectable"),
                           ("Link Down Counter", "phy_link_down"),
                           ("Link Error Recovery Counter", "link_error_recovery")):
            number = _mlx_float(phys.get(key), key)
            values[field] = None if number is None else int(number)
        raw_errors = _mlx_lanes(phys.get("Raw Physical Errors Per Lane"), "raw errors")
        if raw_errors:
            values["raw_physical_errors"] = int(sum(raw_errors))
    histogram = output.get("Histogram of FEC Errors")
    if isinstance(histogram, dict):
        corrected = 0
        for bin_no in range(1, 16):
            entry = histogram.get(f"Bin {bin_no}")
            counts = entry.get("values") if isinstance(entry, dict) else None
            if isinstance(counts, list) and len(counts) == 2:
                number = _num(counts[1], None, f"FEC histogram bin {bin_no}")
                corrected += int(number or 0)
        values["fec_corrected"] = corrected
    module = output.get("Module Info")
    if isinstance(module, dict):
        values["module_temp_c"] = _mlx_float(module.get("Temperature [C]"), "temperature")
        lanes = _mlx_lanes(module.get("Rx Power Current [dBm]"), "rx power")
        if lanes:
            values["rx_power_dbm"] = min(lanes)
            values["rx_power_dbm_lanes"] = lanes
        # the module's own thresholds, printed after the value: ``61 [-10..80]``
        for key, low, high in (("Temperature [C]", None, "module_temp_high_c"),
                               ("Rx Power Current [dBm]", "rx_power_low_dbm", None)):
            span = _mlx_range(module.get(key), key)
            if span is not None:
                if low:
                    values[low] = span[0]
                if high:
                    values[high] = span[1]
        for key, field in (("Vendor Name", "cable_vendor"), ("Vendor Part Number", "cable_part"),
                           ("Vendor Serial Number", "cable_serial"), ("Identifier", "module")):
            if isinstance(module.get(key), str):
                values[field] = module[key]
        media = _cable_media(module.get("Cable Type"))
        if media is not None:  # the link type the BER table is keyed by
            values["media"] = media
    oper = output.get("Operational Info")
    if isinstance(oper, dict):
        if isinstance(oper.get("Width"), str) and re.fullmatch(r"\d+x", oper["Width"]):
            values["width"] = oper["Width"].upper()
        speed = oper.get("Speed")
        if isinstance(speed, str):
            ib = re.fullmatch(r"IB-([A-Z0-9]+)", speed.strip())
            if ib:
                values["speed"] = ib.group(1)
            else:
                values["eth_speed"] = speed.strip()
        for key, field in (("State", "state"), ("FEC", "fec_mode")):
            if isinstance(oper.get(key), str):
                values[field] = oper[key]
    if not values:
        raise ParseError(None, None, "mlxlink output has none of the sections read here")
    ports = _Ports()
    ports.put(device, port, values)  # register widths: mlxlink does not say
    return ports.events(fabric=fabric, ts=ts, source=source, kind="mlxlink")
