"""The wire contract: event models, topic registry, codec and policy. Imports nothing of ours."""

from schemas.codec import dead_letter, decode, decode_obj, dumps, encode, loads
from schemas.errors import ContractError
from schemas.events import (
    COUNTER_FIELDS,
    GAUGE_FIELDS,
    LATER_COUNTER_FIELDS,
    LEGACY_COUNTER_BITS,
    TRAFFIC_FIELDS,
    Action,
    ActionRecord,
    CounterColumns,
    Counters,
    CountersMessage,
    DeadLetter,
    Detection,
    DetectionKind,
    Envelope,
    Event,
    EvidenceRecord,
    Incident,
    IncidentCause,
    JobPlacement,
    Maintenance,
    PortEvent,
    PortSample,
    Probe,
    Severity,
    SmEvent,
    Topology,
    TopologyLink,
    columns_wire,
    message_key,
    port_key,
    ts_to_ms,
)

__all__ = [
    "COUNTER_FIELDS", "GAUGE_FIELDS", "LATER_COUNTER_FIELDS", "LEGACY_COUNTER_BITS",
    "TRAFFIC_FIELDS", "Action", "ActionRecord",
    "ContractError", "CounterColumns", "Counters", "CountersMessage", "DeadLetter",
    "Detection", "DetectionKind", "Envelope", "Event",
    "EvidenceRecord", "Incident", "IncidentCause", "JobPlacement", "Maintenance",
    "PortEvent", "PortSample", "Probe", "Severity", "SmEvent", "Topology",
    "TopologyLink",
    "columns_wire", "dead_letter", "decode", "decode_obj", "dumps", "encode", "loads",
    "message_key", "port_key", "ts_to_ms",
]
