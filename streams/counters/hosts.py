"""A host agent's columnar message: its HCAs judged together, the quiet ones only stamped.

A host agent sends one ``counter_columns`` message per host and round whose rows are its
HCAs' ports (``columns.device``). Each HCA is a device with its own state
(``counters_key``), and the message's meaning is its row parts (``Counters.split``: one
part per HCA, id ``{id}/{hca}``), which is what replay applies. Applied part by part, a
host's eight one-port HCAs cost eight envelopes, eight samples built from the columns and
eight passes of the per-sample rules over ~50 counters, for a message that on a healthy
host changes nothing but times.

Here the whole-column checks (``streams.counters.columns.judge``) run once over the host's
rows, against a ``HostView``: the column view laid over one port state of each row, taken
from the HCAs' own device states. An HCA whose rows they find quiet (no tracked counter
moved, no window due, no credit-wait window to close, nothing open, no register at its
maximum, width and speed as last judged) gets exactly what its row part would have done
to it (``stamp``): its ports' times set to the message's, the part's id added to its
recent ids with no outputs (``streams.engine.once``), its state not dirty. Every other HCA
goes as its row part, through the per-sample rules, as before; so does every HCA of a
message the view cannot cover (a state or port not seen yet, a port whose last sample is
not older than the message). ``tests/unit/streams/test_counters_path_host.py`` applies
random host rounds both ways and requires the same states, downs and detections.

No HCA is stamped with a message it has had already: applying a part sets each of its
ports' time to at least the part's (a sample not newer is skipped and leaves a newer time),
so a message newer than every port of its rows has not been applied to these states, and
an id names one event (the contract: a redelivery is the same message, with its ``ts``).
A redelivered message is therefore not newer: the view refuses it, and its row parts find
their ids among the recent ones (``streams.engine.once``). Looking the ids up instead was
a scan of 32 ids scattered in memory per HCA, half a host message's time in the worker.

The view is derived, never stored; it is dropped whenever an HCA of it went the per-sample
way (its rows may have changed), and built again from the states with the next message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streams.counters import columns
from streams.counters.logic import counters_key
from streams.engine import remember
from streams.stale.logic import Report, stream_key

if TYPE_CHECKING:
    from streams.counters.logic import CountersDetector, DeviceState, PortState


class HostView:
    """A ``columns.View`` over a host message's rows and the device states it was laid
    over (by identity: a state read back from the table is another object)."""

    __slots__ = ("devices", "states", "view")

    def __init__(self, view: columns.View, devices: list[Any], states: list[DeviceState]
                 ) -> None:
        self.view = view
        self.devices = devices
        self.states = states

    def covers(self, det: CountersDetector, devices: list[Any], ports: list[int],
               states: list[DeviceState]) -> bool:
        return (self.view.det is det and self.devices == devices and self.view.ports == ports
                and len(self.states) == len(states)
                and all(a is b for a, b in zip(self.states, states, strict=True)))


class HostLayout:
    """What a host message's device and port columns decide, kept while they repeat (a
    host's HCAs are the same round after round): its devices in the order of their row
    parts (``Counters.split``; a row that names no device is the message's own), each
    one's rows, ports, state key (``counters_key``) and stale stream key."""

    __slots__ = ("devices", "keys", "names", "ports", "rows", "streams", "their_ports")

    def __init__(self, fabric: str, source: str, default: str, devices: list[str | None],
                 ports: list[int]) -> None:
        groups: dict[str, list[int]] = {}
        for i, name in enumerate(devices):
            groups.setdefault(name or default, []).append(i)
        self.devices = list(devices)
        self.ports = list(ports)
        self.names = list(groups)
        self.rows = list(groups.values())
        self.keys = [counters_key(fabric, name, source).encode() for name in self.names]
        self.streams = [stream_key(source, name) for name in self.names]
        self.their_ports = [[ports[i] for i in at] for at in self.rows]

    def fits(self, devices: list[str | None], ports: list[int]) -> bool:
        return self.devices == devices and self.ports == ports

    def reports(self, source: str, ts: int, errors: list[str | None] | None
                ) -> list[Report]:
        """The message's stale reports, one per device."""
        if errors is None:
            return [Report(source, name, ts, ports, None, key)
                    for name, ports, key in zip(self.names, self.their_ports, self.streams,
                                                strict=True)]
        return [Report(source, name, ts, ports, [errors[i] for i in at], key)
                for name, ports, at, key in zip(self.names, self.their_ports, self.rows,
                                                self.streams, strict=True)]


def lay(det: CountersDetector, states: list[DeviceState], rows: list[list[int]],
        ports: list[int], devices: list[Any]) -> HostView | None:
    """The view of these device states (one per group of ``rows``) for a message with
    these ports; None while some port has no state yet (its row part creates it)."""
    laid: list[PortState | None] = [None] * len(ports)
    for state, at in zip(states, rows, strict=True):
        known = state["ports"]
        for i in at:
            ps = known.get(str(ports[i]))
            if ps is None:
                return None
            laid[i] = ps
    if any(laid[i] is laid[j] for at in rows for i in at for j in at if i < j):
        return None  # one port named twice by a device (not the per-sample way's order)
    return HostView(columns.View(det, None, list(ports), laid),  # type: ignore[arg-type]
                    list(devices), list(states))


def judge(det: CountersDetector, host: HostView, cols: dict[str, list[Any]], ts: int,
          legacy: bool, unknown: list[str], rows: list[list[int]]) -> list[bool] | None:
    """Per group of ``rows``: whether the device must go the per-sample way; None when the
    column checks cannot judge this message (all go)."""
    picked = columns.judge(det, host.view, cols, ts, legacy, unknown)
    if picked is None:
        return None
    _, slow, waits = picked
    if not slow and not waits:
        return [False] * len(rows)
    marked = set(slow) | set(waits)  # a due credit-wait window is closed the per-sample way
    return [any(i in marked for i in at) for at in rows]


def stamp(box: dict[str, Any], part_id: str, host: HostView, at: list[int], ts: int) -> None:
    """What a quiet device's row part does to its stored value (``once`` of ``step``): its
    ports' sample times move to ``ts``, the part's id joins the recent ids with no outputs,
    and the state is not dirty (only times changed)."""
    states = host.view.states
    for i in at:
        states[i][0] = ts
    remember(box, [part_id, [], []])

