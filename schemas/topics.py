"""The topic registry: every contract topic's name, key and default partition count, in one place."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    key: str  # what the message key is, as documented in the contract
    kinds: tuple[str, ...]  # the event kinds this topic carries
    partitions: int  # default; settings may override per deployment
    doc: str


PORT_EVENTS = Topic("fabric.port-events", "device:port", ("port_event",), 12,
                    "link state changes from SM traps, UFM, SONiC")
COUNTERS = Topic("fabric.counters", "device", ("counters", "counter_columns"), 12,
                 "per-device batches of cumulative port counters")
PROBES = Topic("fabric.probes", "rail", ("probe",), 4, "active probe results per rail")
TOPOLOGY = Topic("fabric.topology", "fabric", ("topology",), 1, "discovered topology snapshots")
DETECTIONS = Topic("fabric.detections", "device:port", ("detection",), 12,
                   "detections, one episode id per incident")
ACTIONS = Topic("fabric.actions", "device:port", ("action", "evidence"), 4,
                "runbook actions and evidence records")
JOBS = Topic("fabric.jobs", "job", ("job",), 4,
             "job placements (nodes, start, end, GPUs per node) from Slurm, Kubernetes, sim")
INCIDENTS = Topic("fabric.incidents", "fabric", ("incident",), 1,
                  "incidents: one root cause (switch or node reboot, SM event, maintenance, "
                  "breaker) and its member ports")
MAINTENANCE = Topic("fabric.maintenance", "fabric", ("maintenance",), 1,
                    "maintenance windows and exclusions, honoured by the worker and by replay")
SM = Topic("fabric.sm", "fabric", ("sm_event",), 1,
           "the subnet manager: heavy sweeps, master/standby state, trap storms (opensm log, "
           "sminfo, saquery)")
DLQ = Topic("fabric.dlq", "source topic", ("dead_letter",), 1,
            "messages that failed validation, with the reason and the raw bytes")

ALL_TOPICS: tuple[Topic, ...] = (PORT_EVENTS, COUNTERS, PROBES, TOPOLOGY, DETECTIONS, ACTIONS,
                                 JOBS, INCIDENTS, MAINTENANCE, SM, DLQ)
BY_NAME: dict[str, Topic] = {t.name: t for t in ALL_TOPICS}
INPUT_TOPICS: tuple[Topic, ...] = (PORT_EVENTS, COUNTERS, PROBES, TOPOLOGY, SM)


def topic_for_kind(kind: str) -> Topic:
    """The topic an event of ``kind`` is published to."""
    for topic in ALL_TOPICS:
        if kind in topic.kinds:
            return topic
    raise KeyError(kind)
