"""Pure mapping from contract events to ledger rows.

``to_rows(event)`` is a pure function: one event in, ``(table, row)`` pairs out, no I/O and
no clock. A ``Counters`` event explodes into one ``counter_ingest`` row per port sample
(raw values only; the writer sends them as columns, ``ledger.columnar``); the engine
derives the per-interval deltas on insert (``sql/migrations/005_counter_deltas.sql`` says
why there and not here).

Timestamps go out as epoch seconds with a millisecond fraction (``ts / 1000``): ClickHouse
parses that exactly into ``DateTime64(3)``, whereas an integer would be read as seconds.
"""

from __future__ import annotations

import hashlib
import re
from operator import attrgetter
from typing import Any

import orjson

from schemas import (
    COUNTER_FIELDS,
    LATER_COUNTER_FIELDS,
    ActionRecord,
    CounterColumns,
    Counters,
    DeadLetter,
    Detection,
    EvidenceRecord,
    Incident,
    JobPlacement,
    Maintenance,
    PortEvent,
    Probe,
    SmEvent,
    Topology,
)
from schemas.events import Event

Row = dict[str, Any]
TableRow = tuple[str, Row]

# The ledger's counter columns: the contract's first counters, then the later ones
# (migration 012). The order is the reset_mask bit order, so it only ever grows at the end.
LEDGER_COUNTER_FIELDS: tuple[str, ...] = (*COUNTER_FIELDS, *LATER_COUNTER_FIELDS)
DELTA_FIELDS: tuple[str, ...] = tuple(f"d_{name}" for name in LEDGER_COUNTER_FIELDS)
_GAUGES = ("raw_ber", "effective_ber", "module_temp_c", "rx_power_dbm")
# Extra PortSample fields a collector may carry the optic's serial number in.
_SERIAL_KEYS = ("optic_serial", "cable_serial", "serial")

# Location naming rule (documented in 002_events.sql, device_location): a switch named
# like `leaf-su01-r3` sits in SU 1 on rail 3.
_SU_RE = re.compile(r"(?:^|[-_.])su(\d+)(?=$|[-_.])", re.IGNORECASE)
_RAIL_RE = re.compile(r"(?:^|[-_.])r(?:ail)?(\d+)(?=$|[-_.])", re.IGNORECASE)


def _sec(ts_ms: int) -> float:
    return ts_ms / 1000


def _json(obj: Any) -> str:
    return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS).decode()


def switch_location(device: str) -> tuple[int | None, int | None]:
    """(su, rail) from a switch name such as ``leaf-su01-r3``; None where it does not say."""
    su = _SU_RE.search(device)
    rail = _RAIL_RE.search(device)
    return (int(su.group(1)) if su else None, int(rail.group(1)) if rail else None)


def dead_letter_id(dl: DeadLetter) -> str:
    """A stable id for a dead letter: its Kafka coordinates, else a hash of what it holds."""
    if dl.source_topic is not None and dl.partition is not None and dl.offset is not None:
        return f"{dl.source_topic}/{dl.partition}/{dl.offset}"
    digest = hashlib.sha256(f"{dl.reason}\x00{dl.path}\x00{dl.raw_b64}".encode()).hexdigest()
    return f"sha256:{digest[:32]}"


# Column order of a raw counter sample on the insert paths: the Arrow table's
# (ledger.columnar.COUNTER_SCHEMA) and the row path's JSONCompactEachRow.
RAW_COUNTER_COLUMNS: tuple[str, ...] = (
    "id", "ts", "fabric", "source", "device", "port", *LEDGER_COUNTER_FIELDS, *_GAUGES,
    "width", "speed", "optic_serial")
_counter_values = attrgetter(*LEDGER_COUNTER_FIELDS)
_rest_values = attrgetter(*_GAUGES, "width", "speed")

# One port sample before deltas: (head, port, counter values, gauges+width+speed+serial)
# where head = (id, ts seconds, fabric, source, device).
RawSample = tuple[tuple[str, float, str, str, str], int, tuple[int | None, ...],
                  tuple[Any, ...]]


def counter_samples(event: Counters) -> list[RawSample]:
    """The port samples of a Counters event as tuples (the row path; the writer's
    columns, ``ledger.columnar.counter_columns``, hold the same samples)."""
    head = (event.id, _sec(event.ts), event.fabric, event.source, event.device)
    out: list[RawSample] = []
    for sample in event.ports:
        if sample.error is not None:
            # A port the collector could not read: its nulls would store as the port's
            # last values and zero the next real delta. Its silence is the stale detector's.
            continue
        device = sample.device or event.device  # a host agent's sample names its HCA
        if device != head[4]:
            head = (*head[:4], device)
        serial: str | None = None
        extra = sample.__pydantic_extra__
        if extra:
            for key in _SERIAL_KEYS:
                value = extra.get(key)
                if isinstance(value, str) and value:
                    serial = value
                    break
        out.append((head, sample.port, _counter_values(sample),
                    (*_rest_values(sample), serial)))
    return out


def counter_rows(event: Counters) -> list[Row]:
    """One raw ``counter_ingest`` row per port sample (the engine adds the deltas)."""
    return [dict(zip(RAW_COUNTER_COLUMNS, (*head, port, *values, *rest), strict=True))
            for head, port, values, rest in counter_samples(event)]


def topology_rows(event: Topology) -> list[TableRow]:
    """The snapshot row, each link from both ends, and the devices' SU / rail."""
    ts = _sec(event.ts)
    out: list[TableRow] = [("topology_snapshots", {
        "snapshot_id": event.id, "ts": ts, "fabric": event.fabric, "source": event.source,
        "links": len(event.links)})]
    located: dict[str, tuple[int | None, int | None]] = {}
    for link in event.links:
        for end, (dev, port, peer, peer_port) in (
            ("a", (link.a_device, link.a_port, link.b_device, link.b_port)),
            ("b", (link.b_device, link.b_port, link.a_device, link.a_port)),
        ):
            out.append(("topology_links", {
                "snapshot_id": event.id, "ts": ts, "fabric": event.fabric, "device": dev,
                "port": port, "peer_device": peer, "peer_port": peer_port,
                "width": link.width, "speed": link.speed, "end": end}))
            if "/" not in dev:
                located.setdefault(dev, switch_location(dev))
    # Host HCAs (`node0042/mlx5_3`) take the SU and rail of the leaf they are cabled to.
    for link in event.links:
        for dev, peer in ((link.a_device, link.b_device), (link.b_device, link.a_device)):
            if "/" in dev and dev not in located:
                su, rail = located.get(peer, (None, None))
                if su is not None or rail is not None:
                    located[dev] = (su, rail)
    for dev, (su, rail) in sorted(located.items()):
        if su is not None or rail is not None:
            out.append(("device_location", {"fabric": event.fabric, "device": dev, "su": su,
                                             "rail": rail, "ts": ts}))
    return out


def to_rows(event: Event | DeadLetter) -> list[TableRow]:
    """Every ledger row ``event`` maps to, as ``(table, row)`` pairs. Pure."""
    if isinstance(event, CounterColumns):
        event = event.rows()
    if isinstance(event, Counters):
        return [("counter_ingest", row) for row in counter_rows(event)]
    if isinstance(event, DeadLetter):
        return [("dead_letters", {
            "id": dead_letter_id(event), "ts": _sec(event.ts), "reason": event.reason,
            "path": event.path, "source_topic": event.source_topic,
            "partition": event.partition, "offset": event.offset, "raw_b64": event.raw_b64})]
    common = {"id": event.id, "ts": _sec(event.ts), "fabric": event.fabric,
              "source": event.source}
    if isinstance(event, PortEvent):
        return [("port_events", {**common, "device": event.device, "port": event.port,
                                 "state": event.state, "trap": event.trap,
                                 "phys_state": event.phys_state, "reason": event.reason})]
    if isinstance(event, Probe):
        return [("probes", {**common, "probe": event.probe, "src": event.src,
                            "dst": event.dst, "rail": event.rail,
                            "size_bytes": event.size_bytes, "bw_gbps": event.bw_gbps,
                            "baseline_gbps": event.baseline_gbps})]
    if isinstance(event, Topology):
        return topology_rows(event)
    if isinstance(event, Detection):
        return [("detections", {**common, "device": event.device, "port": event.port,
                                "detection": event.detection.value,
                                "severity": event.severity.value,
                                "action": event.action.value, "episode": event.episode,
                                "evidence": _json(event.evidence),
                                "incident": event.incident,
                                "maintenance": event.maintenance})]
    if isinstance(event, ActionRecord):
        return [("actions", {**common, "device": event.device, "port": event.port,
                             "workflow_id": event.workflow_id, "step": event.step,
                             "actor": event.actor, "outcome": event.outcome,
                             "before": None if event.before is None else _json(event.before),
                             "after": None if event.after is None else _json(event.after),
                             "note": event.note, "dry_run": int(event.dry_run)})]
    if isinstance(event, EvidenceRecord):
        return [("evidence", {**common, "device": event.device, "port": event.port,
                              "workflow_id": event.workflow_id, "tool": event.tool,
                              "output": event.output, "exit_code": event.exit_code})]
    if isinstance(event, JobPlacement):
        return [("job_placements", {**common, "job": event.job, "name": event.name,
                                    "state": event.state, "nodes": list(event.nodes),
                                    "start": None if event.start is None else _sec(event.start),
                                    "end": None if event.end is None else _sec(event.end),
                                    "gpus_per_node": event.gpus_per_node})]
    if isinstance(event, Incident):
        return [("incidents", {**common, "incident": event.incident,
                               "cause": event.cause.value, "root": event.root,
                               "state": event.state, "started": _sec(event.started),
                               "ended": None if event.ended is None else _sec(event.ended),
                               "members": list(event.members), "su": event.su,
                               "reason": event.reason, "evidence": _json(event.evidence)})]
    if isinstance(event, Maintenance):
        return [("maintenance_windows", {**common, "window": event.window,
                                         "scope": event.scope, "target": event.target,
                                         "start": _sec(event.start), "end": _sec(event.end),
                                         "state": event.state, "reason": event.reason,
                                         "actor": event.actor,
                                         "exclusion": int(event.exclusion)})]
    if isinstance(event, SmEvent):
        return sm_rows(event, common)
    raise TypeError(f"no ledger table for {type(event).__name__}")


def sm_rows(event: SmEvent, common: Row) -> list[TableRow]:
    """An SM event's row, and a heavy sweep's own row in ``sm_sweeps``."""
    rows: list[TableRow] = [("sm_events", {
        **common, "event": event.event, "sm": event.sm, "state": event.state,
        "priority": event.priority, "sms": list(event.sms or []), "trap": event.trap,
        "count": event.count, "device": event.device, "port": event.port,
        "disabled": int(event.disabled), "trigger": event.trigger,
        "ports": list(event.ports)})]
    if event.event == "sweep" and event.end is not None:
        rows.append(("sm_sweeps", {
            **common, "sm": event.sm,
            "start": None if event.start is None else _sec(event.start),
            "end": _sec(event.end), "duration_ms": event.duration_ms,
            "trigger": event.trigger, "ports": list(event.ports),
            "devices": list(event.devices)}))
    return rows
