"""infiniband-diags poll output to ``counters`` events: perfquery, ibqueryerrors, iblinkinfo.

Register widths. Every sample says in ``counter_bits`` how wide each reported register is,
so that a detector can tell a legacy counter stuck at its maximum (``counter_saturated``)
from a real count: plain ``perfquery`` reads PortCounters (IBA 16.1.3.5: 16-bit error
counters, 8-bit link_downed / link_error_recovery, 4-bit integrity / overrun, 32-bit data
and xmit_wait, see ``schemas.LEGACY_COUNTER_BITS``); ``perfquery -x`` reads
PortCountersExtended, whose registers are 64-bit (its error counters only where the PMA's
CapMask2 says it has them; otherwise they are left null); ``ibqueryerrors`` reads PortCounters.

Counters the contract does not name (data and packet counts, switch relay and constraint
errors, VL15/QP1 drops, the -D/-E detail counters) are kept as extra snake_case fields of
the sample, with their widths too.

Naming. perfquery prints only a LID: the device comes from ``device=`` (the CLI's
``--device``) or from a ``LidMap``; without either the parser says so. ibqueryerrors and
iblinkinfo print node descriptions and GUIDs, named by the pinned rule
(``collectors.ibnetdiscover.device_name``), or through a ``LidMap`` where one is given.

iblinkinfo (decision): one ``counters`` event per device whose samples carry only
``width``, ``speed`` and the extra fields ``state`` (``Active``, ``Down``, ...),
``phys_state`` (``LinkUp``, ``Polling``, ...) and ``speed_gbps``; the degraded-link
detector consumes width and speed from counters. A down port has width and speed null.
The topology itself comes from ibnetdiscover.
"""

from __future__ import annotations

import re
from typing import Any

from collectors.common import (
    DeviceSamples,
    PortValues,
    collapse,
    counters_events,
    guarded,
    lines,
    stable_id,
    to_int,
)
from collectors.errors import ParseError
from collectors.ibnetdiscover import NodeType, device_name
from collectors.lidmap import LidMap
from schemas import LEGACY_COUNTER_BITS, Counters, SmEvent

# perfquery / ibqueryerrors counter name -> contract field (or extra field) name.
PMA_FIELDS: dict[str, str] = {
    "SymbolErrorCounter": "symbol_errors",
    "LinkErrorRecoveryCounter": "link_error_recovery",
    "LinkDownedCounter": "link_downed",
    "PortRcvErrors": "rcv_errors",
    "PortRcvRemotePhysicalErrors": "rcv_remote_phys_errors",
    "PortXmitDiscards": "xmit_discards",
    "PortXmitWait": "xmit_wait",
    "LocalLinkIntegrityErrors": "local_link_integrity_errors",
    "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun",
    # Beyond the contract's list: extra fields.
    "PortRcvSwitchRelayErrors": "rcv_switch_relay_errors",
    "PortXmitConstraintErrors": "xmit_constraint_errors",
    "PortRcvConstraintErrors": "rcv_constraint_errors",
    "VL15Dropped": "vl15_dropped",
    "QP1Dropped": "qp1_dropped",
    "PortXmitData": "xmit_data",
    "PortRcvData": "rcv_data",
    "PortXmitPkts": "xmit_pkts",
    "PortRcvPkts": "rcv_pkts",
    "PortUnicastXmitPkts": "unicast_xmit_pkts",
    "PortUnicastRcvPkts": "unicast_rcv_pkts",
    "PortMulticastXmitPkts": "multicast_xmit_pkts",
    "PortMulticastRcvPkts": "multicast_rcv_pkts",
}
# Widths of the PortCounters registers beyond LEGACY_COUNTER_BITS (IBA 16.1.3.5).
_LEGACY_EXTRA_BITS: dict[str, int] = {
    "rcv_switch_relay_errors": 16,
    "xmit_constraint_errors": 8,
    "rcv_constraint_errors": 8,
    "vl15_dropped": 16,
    "qp1_dropped": 16,
    "xmit_data": 32,
    "rcv_data": 32,
    "xmit_pkts": 32,
    "rcv_pkts": 32,
}
# PortCountersExtended's own counters (the rest of a -x block are the additional ones).
_EXT_DATA_FIELDS = {"xmit_data", "rcv_data", "xmit_pkts", "rcv_pkts", "unicast_xmit_pkts",
                    "unicast_rcv_pkts", "multicast_xmit_pkts", "multicast_rcv_pkts"}
# Fields perfquery prints that are selectors, not counters.
_SELECTORS = {"PortSelect", "CounterSelect", "CounterSelect2"}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()


def _field_for(name: str) -> str:
    return PMA_FIELDS.get(name) or _snake(name)


# ---------------------------------------------------------------- perfquery

_PQ_HEADER = re.compile(
    r"^#\s*(Port extended counters|Port counters|Port\w* counters|\w+ counters):\s*"
    r"Lid\s+(\d+)\s+port\s+(\d+)(?:\s*\(CapMask:\s*(0x[0-9A-Fa-f]+)"
    r"(?:\s+CapMask2:\s*(0x[0-9A-Fa-f]+))?\))?\s*$"
)
_PQ_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9_]*):\.*(\S+)\s*$")
ALL_PORTS = 255


@guarded
def parse_perfquery(text: str, *, fabric: str, ts: int, device: str | None = None,
                    lids: LidMap | None = None, source: str = "perfquery") -> list[Counters]:
    """``perfquery`` output (basic, ``-x``, ``-D``, ``-E``; one or many blocks) -> counters.

    Each ``# ... Lid L port P`` block is one port sample; blocks of the same LID and port
    merge. The device is ``device`` when given, else the LidMap's name for the LID (a CA's
    LID also gives its port). Port 255 is perfquery's sum over all ports, which is no port:
    it is refused rather than published as a port 255.
    """
    devices: dict[str, DeviceSamples] = {}
    current: PortValues | None = None
    width = 64
    addl_unsupported = False
    seen_block = False
    block: tuple[str, int, set[str]] | None = None  # title, header line, field names seen
    for number, line in lines(text):
        stripped = line.strip()
        if not stripped:
            continue
        match = _PQ_HEADER.match(stripped)
        if match:
            seen_block = True
            _check_complete(block)
            title, lid_s, port_s, _cap, cap2 = match.groups()
            block = (title, number, set())
            lid, port = int(lid_s), int(port_s)
            if port == ALL_PORTS:
                raise ParseError(None, number, "port 255 is perfquery's sum over all ports, "
                                               "not a port; query the ports one by one")
            name = device
            if name is None and lids is not None:
                target = lids.by_lid(lid)
                if target is not None:
                    name = target.device
                    if target.port is not None:
                        port = target.port
            if name is None:
                raise ParseError(None, number, f"perfquery names only LID {lid}; give the "
                                               "device (--device) or a topology to resolve "
                                               "LIDs")
            dev = devices.setdefault(name, DeviceSamples(name))
            current = dev.sample(port)
            addl_unsupported = False
            if title == "Port extended counters":
                width = 64
                if cap2 is not None:
                    current.values["cap_mask2"] = cap2
                    # CapMask2 bit 1 (IsAdditionalPortCountersExtendedSupported): without
                    # it the extended attribute has no error counters, and what an older
                    # perfquery prints there are reserved zeros, not readings.
                    addl_unsupported = not int(cap2, 16) & 0x2
                    if addl_unsupported:
                        current.values["extended_error_counters"] = "unsupported"
            elif title == "Port counters":
                width = 0  # legacy widths, per counter
            else:
                width = 16  # PortRcvErrorDetails / PortXmitDiscardDetails registers
            continue
        if stripped.startswith("#"):
            continue
        match = _PQ_FIELD.match(stripped)
        if match and current is not None:
            name_, value = match.groups()
            if block is not None:
                block[2].add(name_)
            if name_ in _SELECTORS:
                continue
            key = _field_for(name_)
            number_value = to_int(value, number, name_)
            if addl_unsupported and key not in _EXT_DATA_FIELDS:
                continue
            current.values[key] = number_value
            bits = width or LEGACY_COUNTER_BITS.get(key) or _LEGACY_EXTRA_BITS.get(key)
            if bits:
                current.bits[key] = bits
            continue
        if current is None:
            raise ParseError(None, number, f"not perfquery output: {stripped[:80]!r}")
        raise ParseError(None, number, f"unrecognised perfquery line {stripped[:80]!r}")
    if not seen_block:
        raise ParseError(None, None, "no perfquery '# Port counters: Lid L port P' block found")
    _check_complete(block)
    return counters_events(devices, fabric=fabric, ts=ts, source=source, kind="perfquery")


def _check_complete(block: tuple[str, int, set[str]] | None) -> None:
    """A counters block must reach the field perfquery always prints last in it, or the
    output was cut off (and a missing counter would read as "not reported")."""
    if block is None:
        return
    title, line, seen = block
    if title == "Port counters":
        last = "PortRcvPkts"
    elif title == "Port extended counters":
        # The error counters section (after CounterSelect2) ends with VL15Dropped or later.
        last = "VL15Dropped" if "CounterSelect2" in seen else "PortMulticastRcvPkts"
    else:
        return  # the -D/-E detail registers vary with the version
    if last not in seen:
        raise ParseError(None, line, f"the '# {title}' block ends before {last}: the output "
                                     "is cut off")


# ---------------------------------------------------------------- ibqueryerrors

_QE_HEADER = re.compile(r'^Errors for\s+(?:(0x[0-9a-fA-F]+)\s+)?"(.*)"\s*$')
_QE_PORT = re.compile(r"^GUID\s+(0x[0-9a-fA-F]+)\s+port\s+(\d+|ALL):\s*(.*)$")
_QE_COUNTER = re.compile(r"\[(\w+)\s*==\s*(\d+)\]")
_QE_LINK = re.compile(r"^Link info:\s*(.*)$")


@guarded
def parse_ibqueryerrors(text: str, *, fabric: str, ts: int, lids: LidMap | None = None,
                        source: str = "ibqueryerrors") -> list[Counters]:
    """``ibqueryerrors`` (also ``-r``, ``-c``) -> counters of the ports it lists.

    Only the counters ibqueryerrors shows are reported (it shows those past its
    thresholds); the others are null, not zero. The ``port ALL`` aggregate lines are
    skipped (the per-port lines carry the same counts). With ``-r`` the ``Link info:``
    line adds width, speed and state. A header with a GUID is a switch; one without is a
    CA, whose name falls back to the port GUID on the port line.
    """
    devices: dict[str, DeviceSamples] = {}
    header: tuple[str | None, str] | None = None
    last: PortValues | None = None
    seen = False
    for number, line in lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith("##"):
            continue
        match = _QE_HEADER.match(stripped)
        if match:
            header = (match.group(1), match.group(2))
            seen = True
            last = None
            continue
        match = _QE_PORT.match(stripped)
        if match:
            if header is None:
                raise ParseError(None, number, "port line before any 'Errors for' header")
            guid, port_s, rest = match.groups()
            pairs = _QE_COUNTER.findall(rest)
            if rest.strip() and not pairs:
                raise ParseError(None, number, f"no [Counter == value] in {rest[:80]!r}")
            if port_s == "ALL":
                last = None
                continue
            node_guid, desc = header
            node_type: NodeType = "switch" if node_guid else "ca"
            name = None
            if lids is not None:
                name = lids.device_for_guid(node_guid or guid)
            if name is None:
                name = device_name(desc, node_guid or guid, node_type)
            dev = devices.setdefault(name, DeviceSamples(name))
            sample = dev.sample(int(port_s))
            for counter, value in pairs:
                key = _field_for(counter)
                sample.values[key] = int(value)
                bits = LEGACY_COUNTER_BITS.get(key) or _LEGACY_EXTRA_BITS.get(key)
                if bits:
                    sample.bits[key] = bits
            last = sample
            continue
        match = _QE_LINK.match(stripped)
        if match:
            if last is not None:
                link = _LINK_CORE.search(match.group(1))
                if link is None:
                    raise ParseError(None, number, "unreadable 'Link info:' line")
                last.values.update(_link_fields(link))
            continue
        raise ParseError(None, number, f"not ibqueryerrors output: {stripped[:80]!r}")
    if not seen:
        raise ParseError(None, None, "no 'Errors for' block found (no errors reported, or "
                                     "not ibqueryerrors output)")
    return counters_events(devices, fabric=fabric, ts=ts, source=source, kind="ibqueryerrors")


# ---------------------------------------------------------------- iblinkinfo

# Lane rate as iblinkinfo prints it (Gbps per lane) -> the IB speed name.
GBPS_TO_SPEED: dict[str, str] = {
    "2.5": "SDR", "5.0": "DDR", "10.0": "QDR", "14.0625": "FDR", "10.3125": "FDR10",
    "25.78125": "EDR", "53.125": "HDR", "106.25": "NDR", "212.5": "XDR",
}
_LINK_CORE = re.compile(
    r"(\d+)\s+(\d+)\[\s*[^\]]*\]\s*==\(\s*(?:(\d+X)\s+)?(?:([\d.]+)\s+Gbps\s+)?"
    r"([A-Za-z]+)\s*/\s*([A-Za-z ]+?)\s*\)==>"
)
_LI_SWITCH = re.compile(r"^Switch:\s*(0x[0-9a-fA-F]+)\s+(.*):\s*$")
_LI_CA = re.compile(r"^(CA|Router):\s*(.*):\s*$")
# A disabled port's line ends with iblinkinfo's own "Port not available" instead (no note).
_LI_TAIL = re.compile(r'"[^"]*"\s*\(.*\)\s*$|==>\s*"Port not available"\s*$')
_LI_PORT_GUID = re.compile(r'^(0x[0-9a-fA-F]+)\s+(?:"(.*?)"\s+)?(\d+\s+\d+\[)')


def _link_fields(match: re.Match[str]) -> dict[str, Any]:
    _lid, _port, width, gbps, state, phys = match.groups()
    out: dict[str, Any] = {"state": state, "phys_state": collapse(phys)}
    if width and state.lower() != "down":
        out["width"] = width.upper()
    if gbps and state.lower() != "down":
        out["speed"] = GBPS_TO_SPEED.get(gbps)
        out["speed_gbps"] = float(gbps)
    return out


@guarded
def parse_iblinkinfo(text: str, *, fabric: str, ts: int, lids: LidMap | None = None,
                     source: str = "iblinkinfo") -> list[Counters]:
    """``iblinkinfo`` (grouped default, ``-l`` line mode, ``-d``) -> width/speed/state.

    One ``counters`` event per device; each sample has ``width``, ``speed`` and the extra
    ``state``/``phys_state``/``speed_gbps``. In line mode a node's type is not printed:
    an ``MF0;`` description is taken as a switch, anything else as a CA.
    """
    devices: dict[str, DeviceSamples] = {}
    group: tuple[NodeType, str | None, str] | None = None
    seen = False
    for number, line in lines(text):
        stripped = line.strip()
        if not stripped:
            continue
        match = _LI_SWITCH.match(stripped)
        if match:
            group = ("switch", match.group(1), match.group(2))
            continue
        match = _LI_CA.match(stripped)
        if match and "==(" not in stripped:
            group = ("ca" if match.group(1) == "CA" else "router", None, match.group(2))
            continue
        link = _LINK_CORE.search(stripped)
        if link is None:
            raise ParseError(None, number, f"not iblinkinfo output: {stripped[:80]!r}")
        if not _LI_TAIL.search(stripped):
            # Every port line ends with the peer description and a parenthesised note;
            # without them the line was cut off.
            raise ParseError(None, number, "incomplete iblinkinfo line (truncated output?)")
        seen = True
        lid, port = int(link.group(1)), int(link.group(2))
        lead = _LI_PORT_GUID.match(stripped)
        guid = lead.group(1) if lead else None
        if lead and lead.group(2) is not None:  # line mode: GUID "desc" on every line
            desc = lead.group(2)
            node_type: NodeType = "switch" if collapse(desc).startswith("MF0;") else "ca"
        elif group is not None:
            node_type, group_guid, desc = group
            guid = group_guid or guid
        else:
            raise ParseError(None, number, "port line before any 'Switch:' or 'CA:' header")
        name = lids.device_for_lid(lid) if lids is not None else None
        if name is None:
            if guid is None:
                raise ParseError(None, number, "no GUID to name this node by")
            name = device_name(desc, guid, node_type)
        dev = devices.setdefault(name, DeviceSamples(name))
        dev.sample(port).values.update(_link_fields(link))
    if not seen:
        raise ParseError(None, None, "no iblinkinfo port line found")
    return counters_events(devices, fabric=fabric, ts=ts, source=source, kind="iblinkinfo")


# ---------------------------------------------------------------- ibstat / ibstatus

_IBSTAT_CA = re.compile(r"^CA '([^']+)'\s*$")
_IBSTAT_PORT = re.compile(r"^Port (\d+):\s*$")
_IBSTAT_KV = re.compile(r"^([A-Za-z][A-Za-z_ ]*?):\s*(.*)$")
_IBSTATUS_HEAD = re.compile(r"^Infiniband device '([^']+)' port (\d+) status:\s*$")
_RATE_WIDTH_SPEED = re.compile(r"\((\d+X)\s+([A-Z0-9]+)\)")


def _hca_name(host: str | None, hca: str, line: int) -> str:
    if not host:
        raise ParseError(None, line, "the output names the HCA but not the host; give the "
                                     "host name (--device HOST), the device becomes HOST/HCA")
    return f"{host}/{hca}"


def _state_word(value: str) -> str:
    """``4: ACTIVE`` -> ``ACTIVE``; ``Active`` stays."""
    return value.split(":", 1)[-1].strip()


@guarded
def parse_ibstat(text: str, *, fabric: str, ts: int, host: str | None,
                 source: str = "ibstat") -> list[Counters]:
    """``ibstat`` -> per HCA port ``state``, ``phys_state``, ``rate_gbps``, ``lid``,
    ``port_guid``, ``link_layer`` (extra fields). ibstat prints only the total rate, which
    does not say width and speed apart (100 is 4X EDR or 2X HDR), so those stay null. An
    ``ibpanic:`` line means ibstat failed part-way: the output is refused as incomplete."""
    devices: dict[str, DeviceSamples] = {}
    hca: str | None = None
    sample: PortValues | None = None
    for number, line in lines(text):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("ibpanic:"):
            raise ParseError(None, number, f"ibstat failed part-way ({stripped[8:80].strip()}); "
                                           "its output is incomplete")
        match = _IBSTAT_CA.match(stripped)
        if match:
            hca, sample = match.group(1), None
            continue
        match = _IBSTAT_PORT.match(stripped)
        if match:
            if hca is None:
                raise ParseError(None, number, "Port line before any CA line")
            name = _hca_name(host, hca, number)
            sample = devices.setdefault(name, DeviceSamples(name)).sample(int(match.group(1)))
            continue
        match = _IBSTAT_KV.match(stripped)
        if match is None or hca is None:
            raise ParseError(None, number, f"not ibstat output: {stripped[:80]!r}")
        key, value = match.group(1).strip(), match.group(2).strip()
        if sample is None:
            continue  # CA-level lines (type, firmware, GUIDs)
        if key == "State":
            sample.values["state"] = value
        elif key == "Physical state":
            sample.values["phys_state"] = value
        elif key == "Rate":
            sample.values["rate_gbps"] = float(to_int(value, number, "Rate"))
        elif key == "Base lid":
            sample.values["lid"] = to_int(value, number, "Base lid")
        elif key == "Port GUID":
            sample.values["port_guid"] = value
        elif key == "Link layer":
            sample.values["link_layer"] = value
    if not devices:
        raise ParseError(None, None, "no 'CA ... Port N:' record found")
    return counters_events(devices, fabric=fabric, ts=ts, source=source, kind="ibstat")


@guarded
def parse_ibstatus(text: str, *, fabric: str, ts: int, host: str | None,
                   source: str = "ibstat") -> list[Counters]:
    """``ibstatus`` -> per HCA port width and speed (``(4X HDR)``), ``state``,
    ``phys_state``, ``rate_gbps``, ``lid`` (hex in ibstatus), ``link_layer``."""
    devices: dict[str, DeviceSamples] = {}
    sample: PortValues | None = None
    for number, line in lines(text):
        stripped = line.strip()
        if not stripped:
            continue
        match = _IBSTATUS_HEAD.match(stripped)
        if match:
            name = _hca_name(host, match.group(1), number)
            sample = devices.setdefault(name, DeviceSamples(name)).sample(int(match.group(2)))
            continue
        match = _IBSTAT_KV.match(stripped)
        if match is None or sample is None:
            raise ParseError(None, number, f"not ibstatus output: {stripped[:80]!r}")
        key, value = match.group(1).strip(), match.group(2).strip()
        if key == "state":
            sample.values["state"] = _state_word(value)
        elif key == "phys state":
            sample.values["phys_state"] = _state_word(value)
        elif key == "base lid":
            sample.values["lid"] = to_int(value, number, "base lid")
        elif key == "link_layer":
            sample.values["link_layer"] = value
        elif key == "rate":
            rate = re.match(r"([\d.]+)\s*Gb/sec", value)
            if rate is None:
                raise ParseError(None, number, f"unreadable rate {value[:40]!r}")
            sample.values["rate_gbps"] = float(rate.group(1))
            pair = _RATE_WIDTH_SPEED.search(value)
            if pair and sample.values.get("state", "").upper() == "ACTIVE":
                sample.values["width"], sample.values["speed"] = pair.group(1), pair.group(2)
    if not devices:
        raise ParseError(None, None, "no \"Infiniband device '...' port N status:\" record")
    return counters_events(devices, fabric=fabric, ts=ts, source=source, kind="ibstatus")


# ---------------------------------------------------------------- sminfo

# infiniband-diags sminfo.c: printf("sminfo: sm lid %d sm guid 0x%" PRIx64 ", activity
# count %u priority %d state %d %s\n", ...), the state's name one of statestr[].
_SMINFO = re.compile(r"^sminfo: sm lid (\d+) sm guid (0x[0-9a-fA-F]+), activity count (\d+) "
                     r"priority (\d+) state (\d+) (SMINFO_[A-Z]+|\?\?\?)\s*$")
_SMINFO_STATES = {0: "not_active", 1: "discovering", 2: "standby", 3: "master"}


@guarded
def parse_sminfo(text: str, *, fabric: str, ts: int, source: str = "sminfo") -> SmEvent:
    """``sminfo`` output -> the SM's ``state`` event (``fabric.sm``).

    Without arguments sminfo asks the SM the local port's PortInfo names (the master):
    ``sm`` is that SM's port GUID, ``state`` its SMInfo state. The id is the fabric, the
    GUID, the state and the activity count, so polling an idle SM twice dedupes.
    """
    found = None
    for number, line in lines(text):
        stripped = line.strip()
        if not stripped:
            continue
        found = _SMINFO.match(stripped)
        if found is None:
            raise ParseError(None, number, "not an sminfo line ('sminfo: sm lid N sm guid "
                                           f"0x..., activity count N ...'): {stripped[:80]!r}")
        break
    if found is None:
        raise ParseError(None, None, "no sminfo line found")
    lid_s, guid, act_s, prio_s, state_s, _name = found.groups()
    state = _SMINFO_STATES.get(int(state_s))
    if state is None:
        raise ParseError(None, None, f"sminfo state {state_s} is not one of 0..3")
    prio = int(prio_s)
    if prio > 15:
        raise ParseError(None, None, f"sminfo priority {prio} is outside 0..15")
    guid = guid.lower()
    return SmEvent(id=stable_id("sminfo", fabric, guid, state, act_s), ts=ts, fabric=fabric,
                   source=source, event="state", sm=guid, state=state, priority=prio,
                   lid=int(lid_s), activity=int(act_s))


# ---------------------------------------------------------------- saquery -s

_SAQ_FIELD = re.compile(r"^\s*(EndPortLid|base_lid|master_sm_base_lid)\.+(\d+)\s*$")


@guarded
def parse_saquery_sms(text: str, *, fabric: str, ts: int,
                      source: str = "saquery") -> SmEvent:
    """``saquery -s`` output -> the ``standby`` event: every SM port but the master.

    ``saquery -s`` lists the PortInfoRecords of the ports whose CapabilityMask says IsSM
    ("IsSM ports", then "IsSMdisabled ports"). The master is the port whose ``base_lid`` is
    its ``master_sm_base_lid``; the others are the standbys. SMs are named by LID
    (``lid:N``), as saquery gives them; ``sm`` is the master as this answer names it.
    """
    section: str | None = None
    records: list[dict[str, int]] = []
    for number, line in lines(text):
        stripped = line.strip()
        if stripped in ("IsSM ports", "IsSMdisabled ports"):
            section = stripped
            continue
        if stripped == "PortInfoRecord dump:":
            if section is None:
                raise ParseError(None, number, "a PortInfoRecord before 'IsSM ports'")
            if section == "IsSM ports":
                records.append({})
            continue
        found = _SAQ_FIELD.match(line)
        if found and section == "IsSM ports" and records:
            records[-1][found.group(1)] = int(found.group(2))
    if section is None:
        raise ParseError(None, None, "no 'IsSM ports' section (not saquery -s output)")
    masters = {r["master_sm_base_lid"] for r in records if "master_sm_base_lid" in r}
    if len(masters) != 1:
        raise ParseError(None, None, f"the IsSM ports name {len(masters)} master SM LIDs, "
                                     "not one")
    master = masters.pop()
    standbys = sorted({f"lid:{r['base_lid']}" for r in records
                       if "base_lid" in r and r["base_lid"] != master})
    return SmEvent(id=stable_id("saquery-s", fabric, master, *standbys, ts // 60_000),
                   ts=ts, fabric=fabric, source=source, event="standby", sm=f"lid:{master}",
                   sms=standbys)
