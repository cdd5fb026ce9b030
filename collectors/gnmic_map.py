"""gnmic's Kafka output, message by message, to contract ``counters`` and ``port_event``s.

gnmic (``outputs: {type: kafka, format: event | json}``) writes one Kafka message per gNMI
``SubscribeResponse``. As gnmic's own formatters write them (``pkg/formatters/event.go``,
``msg.go``):

* ``event``: a JSON array of ``{name, timestamp (ns), tags, values}`` (one object with
  ``split-events: true``). Path keys are tags (``interface[name=Ethernet8]`` ->
  ``interface_name``), the target's address is ``tags.source``; a JSON value is flattened
  into ``values`` as ``<path>/<leaf>`` keys.
* ``json``: ``{source, subscription-name, timestamp (ns), time, updates: [{Path, values}]}``;
  a value may be a whole container (JSON-IETF), read leaf by leaf here.

**The mapping is the table ``GNMIC_TABLE`` below, and only it** (collectors/README.md prints
it). Each rule is a regular expression matched against the end of the leaf's path with its
keys and module prefixes removed (``/openconfig-interfaces:interfaces/interface[name=x]/
state/counters/in-errors`` -> ``interfaces/interface/state/counters/in-errors``); its field
is a contract counter, an extra kept beside them, or ``oper-status``. ``{1}`` in a field is
the rule's first group (a PFC priority, a queue). Per-priority and per-queue values are kept
as extras, and their totals (``pfc_pause_rx/tx``, ``ecn_marked``) are the sum of the latest
value of each priority/queue seen for that port (SONiC streams one leaf per message).

The device is ``source`` without a ``:port`` suffix (gnmic's target address); the contract
port is the last integer of the interface name (``collectors.common.port_number``).
``oper-status`` makes a ``port_event`` when it changes (the first reading of a port makes
one only when it is down: an up port that was never seen down is no news).

A message is dead-lettered (``GnmicMapError``, the reason in words) when it is not JSON, not
a gnmic event/json message, names no device, interface or valid timestamp, carries a
counter value that is not a number, or none of its leaves is in the table. Leaves not in the
table inside a message that has mapped ones are left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import ValidationError

from collectors.common import port_number, stable_id
from schemas import LEGACY_COUNTER_BITS, ContractError, Counters, PortEvent, PortSample
from schemas.codec import contract_error

SOURCE = "gnmi"
Kind = Literal["counter", "extra", "oper-status"]


@dataclass(frozen=True)
class Rule:
    pattern: str  # matched at the end of the key-less path
    field: str
    kind: Kind
    origin: str  # which model the path is from

    def compiled(self) -> re.Pattern[str]:
        return re.compile(rf"(?:^|/){self.pattern}$")


_OC = "openconfig-interfaces"
_SRL = "SR Linux srl_nokia-interfaces"
_SONIC = "SONiC COUNTERS_DB"

GNMIC_TABLE: tuple[Rule, ...] = (
    # errors and discards
    Rule(r"state/counters/in-errors", "rcv_errors", "counter", _OC),
    Rule(r"state/counters/out-discards", "xmit_discards", "counter", _OC),
    Rule(r"state/counters/out-errors", "out_errors", "extra", _OC),
    Rule(r"state/counters/in-discards", "in_discards", "extra", _OC),
    Rule(r"state/counters/in-fcs-errors", "in_fcs_errors", "extra", _OC),
    Rule(r"state/counters/carrier-transitions", "carrier_transitions", "extra", _OC),
    Rule(r"statistics/in-error-packets", "rcv_errors", "counter", _SRL),
    Rule(r"statistics/out-discarded-packets", "xmit_discards", "counter", _SRL),
    Rule(r"statistics/out-error-packets", "out_errors", "extra", _SRL),
    Rule(r"statistics/in-discarded-packets", "in_discards", "extra", _SRL),
    Rule(r"statistics/in-fcs-error-packets", "in_fcs_errors", "extra", _SRL),
    Rule(r"statistics/carrier-transitions", "carrier_transitions", "extra", _SRL),
    Rule(r"SAI_PORT_STAT_IF_IN_ERRORS", "rcv_errors", "counter", _SONIC),
    Rule(r"SAI_PORT_STAT_IF_OUT_DISCARDS", "xmit_discards", "counter", _SONIC),
    Rule(r"SAI_PORT_STAT_IF_OUT_ERRORS", "out_errors", "extra", _SONIC),
    Rule(r"SAI_PORT_STAT_IF_IN_DISCARDS", "in_discards", "extra", _SONIC),
    # PFC pause frames per priority (totals: pfc_pause_rx / pfc_pause_tx)
    Rule(r"SAI_PORT_STAT_PFC_([0-7])_RX_PKTS", "pfc{1}_rx", "extra", _SONIC),
    Rule(r"SAI_PORT_STAT_PFC_([0-7])_TX_PKTS", "pfc{1}_tx", "extra", _SONIC),
    Rule(r"ethernet/state/counters/in-mac-pause-frames", "in_mac_pause_frames", "extra", _OC),
    Rule(r"ethernet/state/counters/out-mac-pause-frames", "out_mac_pause_frames", "extra", _OC),
    # ECN-marked packets per queue (total: ecn_marked); SONiC names a queue <if>:<n>
    Rule(r"SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS", "ecn_marked_q{queue}", "extra", _SONIC),
    Rule(r"SAI_QUEUE_STAT_DROPPED_PACKETS", "q{queue}_drop_pkts", "extra", _SONIC),
    # traffic, kept beside the contract's counters
    Rule(r"state/counters/(in|out)-(octets|pkts|unicast-pkts|multicast-pkts|broadcast-pkts)",
         "{1}_{2}", "extra", _OC),
    Rule(r"statistics/(in|out)-(octets|packets|unicast-packets|multicast-packets|"
         r"broadcast-packets|mirror-octets|mirror-packets)", "{1}_{2}", "extra", _SRL),
    Rule(r"SAI_PORT_STAT_IF_(IN|OUT)_(OCTETS|UCAST_PKTS)", "{1}_{2}", "extra", _SONIC),
    # link state
    Rule(r"interfaces/interface/state/oper-status", "oper-status", "oper-status", _OC),
    Rule(r"interface/oper-state", "oper-status", "oper-status", _SRL),
    Rule(r"PORT_TABLE/[^/]+/oper_status", "oper-status", "oper-status", "SONiC APPL_DB"),
)
_COMPILED = tuple((rule, rule.compiled()) for rule in GNMIC_TABLE)
_KEYS = re.compile(r"\[[^\]]*\]")
_MODULE = re.compile(r"(^|/)[A-Za-z0-9_.-]+:")
_SONIC_IF = re.compile(r"(?:^|/)(?:COUNTERS|PORT_TABLE)[/:](Ethernet(?:-BP)?[0-9]+)(?::([0-9]+))?(?:/|$)")
_KEY_IF = re.compile(r"interface\[(?:name|interface-id)=([^\]]+)\]")
_BACKPLANE = re.compile(r"^Ethernet-BP\d+$")
_UP = {"UP", "up"}
_DOWN = {"DOWN", "LOWER_LAYER_DOWN", "NOT_PRESENT", "DORMANT", "down", "lower-layer-down",
         "not-present"}
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class GnmicMapError(ContractError):
    """A gnmic message that cannot be mapped; it goes to fabric.dlq with this reason."""


def lookup(path: str) -> tuple[Rule, str] | None:
    """The table's rule for a leaf path and the field it gives (``None``: not mapped)."""
    bare = _MODULE.sub(r"\1", _KEYS.sub("", path)).strip("/")
    if "subinterface" in bare:
        return None  # a subinterface's counters are not the port's
    for rule, pattern in _COMPILED:
        match = pattern.search(bare)
        if match is not None:
            name = rule.field
            for i, group in enumerate(match.groups(), start=1):
                name = name.replace(f"{{{i}}}", group.lower().replace("-", "_"))
            return rule, name
    return None


def _number(value: Any, leaf: str) -> int | float:
    if isinstance(value, bool):
        raise GnmicMapError(f"{leaf}: a boolean is not a counter value", "values")
    if isinstance(value, int):
        if value < 0:
            raise GnmicMapError(f"{leaf}: negative counter {value}", "values")
        return value
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        if value < 0:
            raise GnmicMapError(f"{leaf}: negative counter {value}", "values")
        return int(value) if value.is_integer() else value
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
    raise GnmicMapError(f"{leaf}: value {str(value)[:40]!r} is not a number", "values")


@dataclass
class _Leaf:
    device: str
    interface: str
    queue: str | None
    path: str
    value: Any
    ts: int


def _device(source: Any) -> str:
    text = str(source or "").strip()
    if not text:
        raise GnmicMapError("no device: the message has no source (gnmic's target address)",
                            "source")
    host, sep, port = text.rpartition(":")
    return host if sep and port.isascii() and port.isdigit() and host and "]" not in port \
        else text


def _ts_ms(value: Any) -> int:
    # ASCII digits only: str.isdigit() also takes "²", which int() refuses
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise GnmicMapError("no timestamp: gnmic writes an integer of nanoseconds", "timestamp")
    return value // 1_000_000


def _interface(tags: dict[str, Any], path: str) -> tuple[str | None, str | None]:
    for key, value in tags.items():
        if key.endswith(("interface_name", "interface_interface-id")) or key in (
                "ifname", "port_name"):
            return str(value), None
    keyed = _KEY_IF.search(path)
    if keyed:
        return keyed.group(1), None
    sonic = _SONIC_IF.search(path)
    if sonic:
        return sonic.group(1), sonic.group(2)
    return None, None


def _flatten(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _flatten(f"{prefix.rstrip('/')}/{key}", sub)
    else:
        yield prefix, value


def _leaves(doc: Any) -> Iterator[_Leaf]:
    """Every leaf of one Kafka message in either format."""
    messages = doc if isinstance(doc, list) else [doc]
    if not messages:
        raise GnmicMapError("an empty array: no event", "")
    for message in messages:
        if not isinstance(message, dict):
            raise GnmicMapError("a gnmic message must be a JSON object (or an array of them)", "")
        if "values" in message or "tags" in message or "deletes" in message:  # event
            tags = message.get("tags") or {}
            values = message.get("values")
            if values is None and message.get("deletes"):
                raise GnmicMapError("a delete (no values): deletes are not mapped", "deletes")
            if not isinstance(tags, dict) or not isinstance(values, dict):
                raise GnmicMapError("event format with malformed tags or values", "values")
            device = _device(tags.get("source"))
            ts = _ts_ms(message.get("timestamp"))
            for path, value in values.items():
                for leaf, sub in _flatten(str(path), value):
                    iface, queue = _interface(tags, leaf)
                    if iface is None:
                        raise GnmicMapError(f"{leaf}: no interface in the tags or the path",
                                            "tags")
                    yield _Leaf(device, iface, queue, leaf, sub, ts)
        elif "updates" in message:  # json
            device = _device(message.get("source"))
            ts = _ts_ms(message.get("timestamp"))
            updates = message.get("updates")
            if not isinstance(updates, list):
                raise GnmicMapError("json format: updates is not a list", "updates")
            prefix = str(message.get("prefix") or "")
            for update in updates:
                if not isinstance(update, dict) or not isinstance(update.get("values"), dict):
                    raise GnmicMapError("json format: an update without a values object",
                                        "updates")
                where = f"{prefix}/{update.get('Path') or ''}"
                for key, value in update["values"].items():
                    for leaf, sub in _flatten(str(key), value):
                        iface, queue = _interface({}, f"{where}/{leaf}")
                        if iface is None:
                            raise GnmicMapError(f"{leaf}: no interface in the path", "updates")
                        yield _Leaf(device, iface, queue, leaf, sub, ts)
        else:
            raise GnmicMapError("not a gnmic message (event or json format)", "")


@dataclass
class MapResult:
    counters: list[Counters] = field(default_factory=list)
    port_events: list[PortEvent] = field(default_factory=list)
    ignored: int = 0  # leaves not in the table (next to mapped ones)


@dataclass
class GnmicMapper:
    """Maps messages one at a time; keeps per-port state (latest per-priority values,
    oper-status, interface names) so that totals and state changes are right across them."""

    fabric: str
    _latest: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)
    _oper: dict[tuple[str, int], str] = field(default_factory=dict)
    _names: dict[tuple[str, int], str] = field(default_factory=dict)

    def map(self, raw: bytes) -> MapResult:
        """One Kafka message value -> events; ``GnmicMapError`` when it cannot be mapped."""
        if len(raw) > MAX_MESSAGE_BYTES:
            raise GnmicMapError(f"message larger than {MAX_MESSAGE_BYTES} bytes", "")
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise GnmicMapError(f"not JSON: {exc}", "") from None
        result = MapResult()
        if isinstance(doc, dict) and doc.get("sync-response") is not None and "updates" not in doc:
            return result  # the end of the initial dump: nothing to map, nothing wrong
        samples: dict[tuple[str, int], dict[tuple[int, str], dict[str, Any]]] = {}
        states: list[tuple[str, int, str, str, int]] = []
        unmapped: list[str] = []
        for leaf in _leaves(doc):
            found = lookup(leaf.path)
            if found is None:
                unmapped.append(leaf.path)
                continue
            rule, name = found
            if _BACKPLANE.match(leaf.interface):
                continue  # SONiC's internal ASIC links have no front-panel port
            try:
                port = port_number(leaf.interface)
            except ContractError:
                raise GnmicMapError(f"interface {leaf.interface[:60]!r} has no number to use "
                                    "as the port", "tags") from None
            seen = self._names.setdefault((leaf.device, port), leaf.interface)
            if seen != leaf.interface:
                raise GnmicMapError(f"interfaces {seen!r} and {leaf.interface!r} of "
                                    f"{leaf.device!r} both map to port {port}", "tags")
            if rule.kind == "oper-status":
                states.append((leaf.device, port, leaf.interface, str(leaf.value), leaf.ts))
                continue
            name = name.replace("{queue}", leaf.queue or "0")
            values = samples.setdefault((leaf.device, leaf.ts), {}).setdefault(
                (port, leaf.interface), {})
            values[name] = _number(leaf.value, leaf.path)
        if not samples and not states:
            shown = ", ".join(unmapped[:3]) or "none"
            raise GnmicMapError(f"no leaf of the message is in the mapping table ({shown})",
                                "values")
        result.ignored = len(unmapped)
        try:
            for (device, ts), ports in samples.items():
                result.counters.append(self._counters(device, ts, ports))
            for device, port, iface, value, ts in states:
                event = self._state(device, port, iface, value, ts)
                if event is not None:
                    result.port_events.append(event)
        except ValidationError as exc:
            error = contract_error(exc)
            raise GnmicMapError(f"the message makes an invalid event ({error.path}): "
                                f"{error.reason}", error.path) from None
        return result

    def _counters(self, device: str, ts: int, ports: dict[tuple[int, str], dict[str, Any]],
                  ) -> Counters:
        built = []
        for (port, iface), values in sorted(ports.items()):
            latest = self._latest.setdefault((device, port), {})
            for key, value in values.items():
                if isinstance(value, int) and (key.startswith(("pfc", "ecn_marked_q"))):
                    latest[key] = value
            for total, prefix, suffix in (("pfc_pause_rx", "pfc", "_rx"),
                                          ("pfc_pause_tx", "pfc", "_tx"),
                                          ("ecn_marked", "ecn_marked_q", "")):
                parts = [v for k, v in latest.items() if k.startswith(prefix) and k.endswith(suffix)
                         and k[len(prefix):len(k) - len(suffix)].isdigit()]
                touched = any(k.startswith(prefix) and k.endswith(suffix) for k in values)
                if parts and touched:
                    values[total] = sum(parts)
            bits = {k: 64 for k, v in values.items() if k in LEGACY_COUNTER_BITS
                    and isinstance(v, int)}
            built.append(PortSample(port=port, interface=iface, **values,
                                    counter_bits=bits or None))
        ident = stable_id("gnmic", self.fabric, SOURCE, device, ts,
                          *(p.model_dump_json() for p in built))
        return Counters(id=ident, ts=ts, fabric=self.fabric, source=SOURCE, device=device,
                        ports=built)

    def _state(self, device: str, port: int, iface: str, value: str, ts: int) -> PortEvent | None:
        if value in _UP:
            state = "up"
        elif value in _DOWN:
            state = "down"
        else:
            raise GnmicMapError(f"{iface}: oper-status {value[:30]!r} is neither up nor down",
                                "values")
        before = self._oper.get((device, port))
        self._oper[(device, port)] = state
        if before == state or (before is None and state == "up"):
            return None
        return PortEvent(id=stable_id("gnmic-oper", self.fabric, device, port, state, ts),
                         ts=ts, fabric=self.fabric, source=SOURCE, device=device, port=port,
                         state=state, reason=f"oper-status {value}", interface=iface)
