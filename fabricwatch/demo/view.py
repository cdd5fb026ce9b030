"""The demo's live terminal view: a pure model of what to show, and its rich rendering.

``LiveState`` is filled by the watchers in ``fabricwatch.demo.watch`` (Kafka offsets, the
detections topic, Temporal); ``render`` turns it into one rich renderable per refresh.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from schemas import Detection, Incident


@dataclass
class TopicRate:
    end_offset: int = 0
    per_s: float = 0.0
    lag: int | None = None  # of the detectors' consumer group, where it consumes the topic


@dataclass
class LiveState:
    started: float = field(default_factory=time.monotonic)
    phase: str = "starting"
    topics: dict[str, TopicRate] = field(default_factory=dict)
    detections: deque[Detection] = field(default_factory=lambda: deque(maxlen=12))  # shown
    # every detection not yet matched against the scenario (the shown ones are only the
    # last 12: a burst of more between two looks must not hide a fault's detection)
    unmatched: list[Detection] = field(default_factory=list)
    detections_total: int = 0
    detections_by_kind: dict[str, int] = field(default_factory=dict)
    runbooks_by_state: dict[str, int] = field(default_factory=dict)
    breaker: dict[str, tuple[int, int]] = field(default_factory=dict)  # su -> (isolated, limit)
    scenario: list[tuple[str, str]] = field(default_factory=list)  # (fault, status)
    notes: deque[str] = field(default_factory=lambda: deque(maxlen=6))
    incidents: dict[str, Incident] = field(default_factory=dict)  # id -> its latest message

    def add_incident(self, incident: Incident) -> None:
        held = self.incidents.get(incident.incident)
        if held is None or held.ts <= incident.ts:
            self.incidents[incident.incident] = incident

    def add_detection(self, detection: Detection) -> None:
        self.detections.append(detection)
        self.unmatched.append(detection)
        self.detections_total += 1
        kind = detection.detection.value
        self.detections_by_kind[kind] = self.detections_by_kind.get(kind, 0) + 1


def _topics_table(state: LiveState) -> Table:
    table = Table(title="Kafka topics", expand=True)
    table.add_column("topic")
    table.add_column("events/s", justify="right")
    table.add_column("total", justify="right")
    table.add_column("detector lag", justify="right")
    for name, rate in sorted(state.topics.items()):
        table.add_row(name, f"{rate.per_s:,.0f}", f"{rate.end_offset:,}",
                      "-" if rate.lag is None else f"{rate.lag:,}")
    return table


def _detections_table(state: LiveState) -> Table:
    table = Table(title=f"detections ({state.detections_total} in all)", expand=True)
    table.add_column("event time (UTC)")
    table.add_column("kind")
    table.add_column("port")
    table.add_column("severity")
    table.add_column("action")
    for d in reversed(state.detections):
        colour = {"critical": "red", "warning": "yellow"}.get(d.severity.value, "")
        table.add_row(time.strftime("%H:%M:%S", time.gmtime(d.ts / 1000)), d.detection.value,
                      f"{d.device}:{d.port}", Text(d.severity.value, style=colour),
                      d.action.value)
    return table


def _runbooks_table(state: LiveState) -> Table:
    table = Table(title="runbooks by state", expand=True)
    table.add_column("state")
    table.add_column("count", justify="right")
    for name, n in sorted(state.runbooks_by_state.items()):
        table.add_row(name, str(n))
    return table


def _breaker_table(state: LiveState) -> Table:
    table = Table(title="isolation budget per SU (breaker)", expand=True)
    table.add_column("SU")
    table.add_column("isolated / limit", justify="right")
    for su, (used, limit) in sorted(state.breaker.items()):
        style = "bold red" if used >= limit else ""
        table.add_row(su, Text(f"{used} / {limit}", style=style))
    return table


def _scenario_table(state: LiveState) -> Table:
    table = Table(title="scenario", expand=True)
    table.add_column("fault")
    table.add_column("status")
    for fault, status in state.scenario:
        table.add_row(fault, status)
    return table


def _incidents_table(state: LiveState) -> Table:
    table = Table(title="incidents (one cause each: no port runbook for their members)",
                  expand=True)
    table.add_column("cause")
    table.add_column("root")
    table.add_column("members", justify="right")
    table.add_column("state")
    for inc in sorted(state.incidents.values(), key=lambda i: i.started):
        table.add_row(inc.cause.value, inc.root, str(len(inc.members)), inc.state)
    return table


def render(state: LiveState) -> RenderableType:
    elapsed = time.monotonic() - state.started
    header = Text(f"fabricwatch demo — {state.phase} — {elapsed:,.0f} s", style="bold")
    side = Table.grid(expand=True)
    side.add_column()
    side.add_column()
    side.add_row(_runbooks_table(state), _breaker_table(state))
    notes = Text("\n".join(state.notes), style="dim")
    return Panel(Group(header, _topics_table(state), _detections_table(state), side,
                       _incidents_table(state), _scenario_table(state), notes))
