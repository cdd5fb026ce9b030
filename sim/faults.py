"""The fault catalogue: what can go wrong on the simulated fabric, when, and how often.

A fault names a port (``DEVICE:PORT``) or, for whole-switch faults, a device, and a
schedule: it starts ``at`` after the simulation starts, happens ``count`` times ``every``
so often (flaps: one bounce per occurrence), each occurrence lasting ``for`` (None = until
repaired). Faults are given by API (``Fault(...)``), by CLI spec
(``flap:leaf-su01-r3:5,count=4,every=60s,at=30s``) or in a YAML/JSON file (a list of specs
or of mappings with the same keys, optionally under ``faults:``).

Kinds and how an operator sees them (``sim.telemetry`` makes them visible):

==================  ========================================================================
flap                N bounces, ``every`` apart (or ``within`` a span): trap 128 down/up
                    events, link_downed and link_error_recovery climbing on both ends
link_down           the link goes down (and comes back after ``for``, if given)
degraded_width      the link retrains at ``width`` (default 2X): one bounce, then a lower
                    width in every counters sample and slower probes on that rail
degraded_speed      the same at ``speed`` (default HDR)
ber                 pre-FEC BER ramps to ``raw`` (default 5e-5) over ``ramp``: raw_ber,
                    fec_corrected, then effective_ber and symbol errors rise
symbol_errors       symbol errors rising to ``per_hour`` (default 2000/h) over ``ramp``
counter_saturation  ``counter`` (default symbol_errors) pegged at its register maximum
swap                the cable of this port and the one of ``with`` swapped ends (topology)
missing_link        the cable is not there: absent from discovery, port down
pause_storm         RoCE: one queue paused nonstop, PFC pause frames at line rate; the port
                    sends nothing (stuck), or with ``drain=1`` still sends (heavy
                    congestion, not a storm: the watchdog's rule must not fire)
ecn_misconfig       RoCE: ECN thresholds wrong on a switch (or port): many pauses, few marks
hot_uplink          ECMP polarization: this uplink carries most traffic (data at line rate,
                    its ECMP peers ``share`` less; xmit_wait, probes)
optic_overheat      the module's temperature climbs to ``temp`` (default 75 °C) over ``ramp``
optic_power         the module's Rx power falls by ``db`` (default 6 dB) over ``ramp``
slow_link           slow but not dead: counters clean, only probes across it are slower
spine_reboot        every port of the switch down at once, back after ``for`` (default 3m),
                    then ``bounces`` (default 2) more down/up bounces 15 s apart
sm_failover         the master SM (``sm-1``) dies and the standby named (``sm-2``) takes
                    over: fabric.sm says ``sm-2`` is master, lists no standby, and the new
                    master runs a heavy sweep
sweep_storm         this port's traps force ``count`` (default 8) heavy sweeps ``every``
                    (default 5s) apart, each naming the port (a link that retrains within
                    the sweep: no down reaches the poller)
==================  ========================================================================

The simulated subnet manager (``sim.telemetry``) is ``sm-1`` (master) with ``sm-2`` as its
standby; it says so on fabric.sm at the first step.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from schemas import LEGACY_COUNTER_BITS
from schemas.policy import SPEED_RANK, WIDTH_RANK, parse_duration_s
from sim.topology import Fabric, Link, TopologyError, degrade

FaultKind = Literal[
    "flap", "link_down", "degraded_width", "degraded_speed", "ber", "symbol_errors",
    "counter_saturation", "swap", "missing_link", "pause_storm", "ecn_misconfig",
    "hot_uplink", "slow_link", "spine_reboot", "optic_overheat", "optic_power",
    "sm_failover", "sweep_storm",
]
KINDS: tuple[str, ...] = (
    "flap", "link_down", "degraded_width", "degraded_speed", "ber", "symbol_errors",
    "counter_saturation", "swap", "missing_link", "pause_storm", "ecn_misconfig",
    "hot_uplink", "slow_link", "spine_reboot", "optic_overheat", "optic_power",
    "sm_failover", "sweep_storm",
)
# The simulated subnet managers: the master at start, and its standby.
SIM_SMS: tuple[str, ...] = ("sm-1", "sm-2")
ALIASES = {"saturate": "counter_saturation", "saturation": "counter_saturation",
           "down": "link_down", "width": "degraded_width", "speed": "degraded_speed",
           "swapped": "swap", "swap_cable": "swap", "missing": "missing_link",
           "pause": "pause_storm", "ecn": "ecn_misconfig", "hot": "hot_uplink",
           "slow": "slow_link", "reboot": "spine_reboot", "switch_reboot": "spine_reboot",
           "overheat": "optic_overheat", "optic_temp": "optic_overheat",
           "rx_power": "optic_power", "failover": "sm_failover", "sweeps": "sweep_storm"}
DEVICE_FAULTS = frozenset({"spine_reboot", "ecn_misconfig", "sm_failover"})  # the port is optional
SM_FAULTS = frozenset({"sm_failover", "sweep_storm"})  # seen on fabric.sm
ROCE_FAULTS = frozenset({"pause_storm", "ecn_misconfig"})
TOPOLOGY_FAULTS = frozenset({"swap", "missing_link", "degraded_width", "degraded_speed"})
# Every parameter a spec may carry, with its type; unknown keys are refused.
_PARAMS: dict[str, str] = {
    "at": "duration", "every": "duration", "within": "duration", "for": "duration",
    "count": "int", "down": "duration", "ramp": "duration", "width": "str", "speed": "str",
    "raw": "float", "per_hour": "float", "counter": "str", "with": "str", "factor": "float",
    "share": "float", "prio": "int", "rate": "float", "bounces": "int", "temp": "float",
    "db": "float", "drain": "int",
}
_SPEC = re.compile(r"^\s*([A-Za-z_]+)\s*:\s*([^:,\s]+)(?::(\d+))?\s*(?:,(.*))?$")
DEFAULTS: dict[str, dict[str, Any]] = {
    "flap": {"count": 4, "every_ms": 60_000, "down_ms": 2_000},
    "degraded_width": {"width": "2X"},
    "degraded_speed": {"speed": "HDR"},
    "ber": {"raw": 5e-5, "ramp_ms": 600_000},
    "symbol_errors": {"per_hour": 2000.0, "ramp_ms": 600_000},
    "counter_saturation": {"counter": "symbol_errors", "per_hour": 100.0},
    "slow_link": {"factor": 0.6},
    "hot_uplink": {"share": 0.9, "factor": 0.7},
    "pause_storm": {"prio": 3, "rate": 80_000.0, "drain": 0},
    "optic_overheat": {"temp": 75.0},
    "optic_power": {"db": 6.0},
    "ecn_misconfig": {"rate": 3_000.0},
    # Links to a rebooting switch come back and drop again while its firmware settles;
    # with 2 extra bounces every peer port sees 3 downs: the flap rule fires on all at once.
    "spine_reboot": {"for_ms": 180_000, "bounces": 2},
    "sweep_storm": {"count": 8, "every_ms": 5_000},
}


class FaultError(ValueError):
    """A fault spec or file that does not describe a fault this fabric can have."""


@dataclass(frozen=True)
class Fault:
    """One injected fault. Times are milliseconds after the simulation start."""

    kind: str
    device: str
    port: int | None = None
    at_ms: int = 0
    every_ms: int | None = None
    count: int = 1
    for_ms: int | None = None  # how long each occurrence lasts; None = until repaired
    down_ms: int = 2_000  # a bounce's down time (flap, retrain)
    ramp_ms: int = 0
    width: str | None = None
    speed: str | None = None
    raw: float | None = None
    per_hour: float | None = None
    counter: str | None = None
    with_device: str | None = None
    with_port: int | None = None
    factor: float | None = None
    share: float | None = None
    prio: int | None = None
    rate: float | None = None
    bounces: int | None = None  # spine_reboot: extra bounces of every link after the boot
    temp: float | None = None  # optic_overheat: the module's temperature at the ramp's end
    db: float | None = None  # optic_power: how far Rx power falls
    drain: int | None = None  # pause_storm: 1 = the paused port still transmits
    label: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        kind = ALIASES.get(self.kind, self.kind)
        if kind not in KINDS:
            raise FaultError(f"unknown fault kind {self.kind!r}; expected one of "
                             f"{', '.join(KINDS)}")
        object.__setattr__(self, "kind", kind)
        for name, value in DEFAULTS.get(kind, {}).items():
            if getattr(self, name) in (None, 1 if name == "count" else None):
                object.__setattr__(self, name, value)
        if kind not in DEVICE_FAULTS and self.port is None:
            raise FaultError(f"{kind} needs a port: {kind}:DEVICE:PORT")
        if self.count < 1:
            raise FaultError(f"count must be at least 1, not {self.count}")
        if self.at_ms < 0:
            raise FaultError("at must not be negative")
        for name in ("raw", "per_hour", "rate", "bounces", "share", "prio", "every_ms",
                     "for_ms", "down_ms", "ramp_ms"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise FaultError(f"{name.removesuffix('_ms')} must not be negative, not {value}")
        if self.share is not None and self.share > 1:
            raise FaultError("share must be between 0 and 1")
        if self.prio is not None and self.prio > 7:
            raise FaultError("prio must be a priority 0-7")
        if self.count > 1 and not self.every_ms:
            raise FaultError(f"{kind}: count={self.count} needs every= (or within=)")
        if self.counter is not None and self.counter not in LEGACY_COUNTER_BITS:
            raise FaultError(f"counter {self.counter!r} has no legacy width to saturate; "
                             f"expected one of {', '.join(LEGACY_COUNTER_BITS)}")
        if self.width is not None:
            object.__setattr__(self, "width", self.width.upper())
            if self.width not in WIDTH_RANK:
                raise FaultError(f"unknown width {self.width!r}")
        if self.speed is not None:
            object.__setattr__(self, "speed", self.speed.upper())
            if self.speed not in SPEED_RANK:
                raise FaultError(f"unknown speed {self.speed!r}")
        if kind == "swap" and (self.with_device is None or self.with_port is None):
            raise FaultError("swap needs the other cable's end: swap:DEV:PORT,with=DEV2:PORT2")
        if self.drain is not None and self.drain not in (0, 1):
            raise FaultError("drain is 0 (the paused queue is stuck) or 1 (it drains)")
        if self.db is not None and self.db <= 0:
            raise FaultError("db is how far Rx power falls, more than 0")
        if self.counter == "xmit_wait":
            raise FaultError("the simulator reads the 64-bit extended PortXmitWait, which "
                             "does not saturate")
        if self.factor is not None and not 0 <= self.factor <= 1:
            raise FaultError("factor must be between 0 and 1")
        if not self.label:
            object.__setattr__(self, "label", self.spec())

    # -- schedule --------------------------------------------------------------------------

    def occurrences(self) -> list[tuple[int, int | None]]:
        """(start, end) of each occurrence in ms after the simulation start; end None = open."""
        out = []
        for i in range(self.count):
            start = self.at_ms + i * (self.every_ms or 0)
            if self.kind == "flap":
                end: int | None = start + self.down_ms
            else:
                end = None if self.for_ms is None else start + self.for_ms
            out.append((start, end))
        return out

    def bounce_times(self, end: int) -> list[tuple[int, int]]:
        """(down, up) of the extra bounces after a switch reboot that ended at ``end``."""
        return [(end + 15_000 * k, end + 15_000 * k + 5_000)
                for k in range(1, (self.bounces or 0) + 1)]

    def active(self, t_ms: int) -> tuple[int, int | None] | None:
        """The occurrence in force at ``t_ms`` (ms after start), if any."""
        for start, end in self.occurrences():
            if start <= t_ms and (end is None or t_ms < end):
                return start, end
        return None

    def started(self, t_ms: int) -> bool:
        return self.at_ms <= t_ms

    # -- identity --------------------------------------------------------------------------

    @property
    def target(self) -> str:
        return self.device if self.port is None else f"{self.device}:{self.port}"

    def spec(self) -> str:
        """The CLI spec that gives this fault back."""
        parts = [f"{self.kind}:{self.target}"]
        for name, value in (("at", _dur(self.at_ms) if self.at_ms else None),
                            ("count", self.count if self.count != 1 else None),
                            ("every", _dur(self.every_ms) if self.every_ms else None),
                            ("for", _dur(self.for_ms) if self.for_ms is not None else None),
                            ("width", self.width), ("speed", self.speed), ("raw", self.raw),
                            ("per_hour", self.per_hour), ("counter", self.counter),
                            ("with", f"{self.with_device}:{self.with_port}"
                             if self.with_device else None),
                            ("factor", self.factor), ("share", self.share),
                            ("prio", self.prio), ("rate", self.rate),
                            ("bounces", self.bounces if self.kind == "spine_reboot" and
                             self.bounces != 2 else None),
                            ("temp", self.temp), ("db", self.db),
                            ("drain", self.drain if self.drain else None)):
            if value is not None:
                parts.append(f"{name}={value}")
        return ",".join(parts)

    # -- checks against a fabric -----------------------------------------------------------

    def check(self, fabric: Fabric) -> None:
        """Refuse a fault the fabric cannot have (unknown device, uncabled port, ...)."""
        if self.kind == "sm_failover":
            if self.device not in SIM_SMS[1:]:
                raise FaultError(f"{self.label}: the simulated standby SM is "
                                 f"{', '.join(SIM_SMS[1:])}")
            return
        try:
            dev = fabric.device(self.device)
            if self.port is not None:
                fabric.require_link(self.device, self.port)
            if self.kind == "swap" and self.with_device is not None:
                assert self.with_port is not None  # noqa: S101 - checked in __post_init__
                other = fabric.require_link(self.with_device, self.with_port)
                if other is fabric.require_link(self.device, self.port or 0):
                    raise FaultError("swap needs two different cables")
        except TopologyError as exc:
            raise FaultError(f"{self.label}: {exc}") from None
        if self.kind == "spine_reboot" and not hasattr(dev, "tier"):
            raise FaultError(f"{self.label}: spine_reboot needs a switch, not an HCA")
        if self.kind in ROCE_FAULTS and fabric.params.transport != "roce":
            raise FaultError(f"{self.label}: {self.kind} is a RoCE fault; this fabric runs "
                             "InfiniBand (generate it with transport='roce', or "
                             "--transport roce)")
        if self.kind == "ecn_misconfig" and not hasattr(dev, "tier"):
            raise FaultError(f"{self.label}: ECN thresholds are set on a switch")
        if self.kind in ("degraded_width", "degraded_speed"):
            # a degradation trains the link below what it is cabled for, or it is no fault
            link = fabric.require_link(self.device, self.port or 0)
            if self.kind == "degraded_width" and WIDTH_RANK[self.width or ""] >= WIDTH_RANK.get(
                    link.width.upper(), 0):
                raise FaultError(f"{self.label}: width {self.width} is not below the link's "
                                 f"{link.width.upper()}")
            if self.kind == "degraded_speed" and SPEED_RANK[self.speed or ""] >= SPEED_RANK.get(
                    link.speed.upper(), 0):
                raise FaultError(f"{self.label}: speed {self.speed} is not below the link's "
                                 f"{link.speed.upper()}")
        if self.kind == "hot_uplink":
            link = fabric.require_link(self.device, self.port or 0)
            if link.tier == "host":
                raise FaultError(f"{self.label}: hot_uplink needs a leaf or spine uplink")

    # -- topology --------------------------------------------------------------------------

    def apply_to_links(self, links: list[Link], fabric: Fabric) -> list[Link]:
        """The discovered links with this fault in effect (a no-op for telemetry faults)."""
        if self.kind not in TOPOLOGY_FAULTS or self.port is None:
            return links
        mine = fabric.require_link(self.device, self.port)
        if self.kind == "missing_link":
            return [x for x in links if x.cable_id != mine.cable_id]
        if self.kind == "degraded_width":
            return [degrade(x, width=self.width) if x.cable_id == mine.cable_id else x
                    for x in links]
        if self.kind == "degraded_speed":
            return [degrade(x, speed=self.speed) if x.cable_id == mine.cable_id else x
                    for x in links]
        assert self.with_device is not None and self.with_port is not None  # noqa: S101
        other = fabric.require_link(self.with_device, self.with_port)
        return swap_links(links, mine, (self.device, self.port), other,
                          (self.with_device, self.with_port))


def swap_links(links: list[Link], one: Link, one_end: tuple[str, int], two: Link,
               two_end: tuple[str, int]) -> list[Link]:
    """Exchange the far ends of two cables: ``one_end`` now meets what ``two_end`` met."""
    far_one = one.other_end(*one_end)
    far_two = two.other_end(*two_end)
    new_one = _rewire(one, one_end, far_two)
    new_two = _rewire(two, two_end, far_one)
    out = []
    for link in links:
        if link.cable_id == one.cable_id:
            out.append(new_one)
        elif link.cable_id == two.cable_id:
            out.append(new_two)
        else:
            out.append(link)
    return out


def _rewire(link: Link, keep: tuple[str, int], far: tuple[str, int]) -> Link:
    if keep == (link.a_device, link.a_port):
        return replace(link, b_device=far[0], b_port=far[1])
    return replace(link, a_device=far[0], a_port=far[1])


def _dur(ms: int) -> str:
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0 and ms >= size:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _ms(value: Any, name: str) -> int:
    try:
        return int(round(parse_duration_s(value) * 1000))
    except ValueError as exc:
        raise FaultError(f"{name}: {exc}") from None


def _port_ref(text: str, name: str) -> tuple[str, int]:
    device, sep, port = str(text).rpartition(":")
    if not sep or not device or not port.isdigit():
        raise FaultError(f"{name}={text!r} is not DEVICE:PORT")
    return device, int(port)


def from_mapping(data: Mapping[str, Any]) -> Fault:
    """A fault from a mapping of spec keys (``kind``, ``device``, ``port``, ``at``, ...)."""
    items = dict(data)
    target = items.pop("target", None)
    kind = items.pop("kind", None)
    device = items.pop("device", None)
    port = items.pop("port", None)
    if target is not None and device is None:
        device, _, port_text = str(target).partition(":")
        port = int(port_text) if port_text.isdigit() else None
    if not isinstance(kind, str) or not isinstance(device, str) or not device:
        raise FaultError(f"a fault needs kind and device: {dict(data)!r}"[:300])
    if port is not None and (isinstance(port, bool) or not str(port).isdigit()):
        raise FaultError(f"port must be a number, not {port!r}")
    kwargs: dict[str, Any] = {"kind": kind, "device": device,
                              "port": None if port is None else int(port)}
    within = None
    for key, value in items.items():
        kind_of = _PARAMS.get(key)
        if kind_of is None:
            raise FaultError(f"unknown fault parameter {key!r}; expected one of "
                             f"{', '.join(_PARAMS)}")
        if kind_of == "duration":
            ms = _ms(value, key)
            if key == "within":
                within = ms
            else:
                kwargs[{"at": "at_ms", "every": "every_ms", "for": "for_ms",
                        "down": "down_ms", "ramp": "ramp_ms"}[key]] = ms
        elif kind_of == "int":
            try:
                kwargs[key] = int(value)
            except (TypeError, ValueError):
                raise FaultError(f"{key} must be an integer, not {value!r}") from None
        elif kind_of == "float":
            try:
                kwargs[key] = float(value)
            except (TypeError, ValueError):
                raise FaultError(f"{key} must be a number, not {value!r}") from None
        elif key == "with":
            kwargs["with_device"], kwargs["with_port"] = _port_ref(value, key)
        else:
            kwargs[key] = str(value)
    if within is not None:
        count = int(kwargs.get("count", DEFAULTS.get(ALIASES.get(kind, kind), {})
                               .get("count", 1)))
        kwargs["count"] = count
        kwargs["every_ms"] = within // max(1, count - 1) if count > 1 else within
    try:
        return Fault(**kwargs)
    except TypeError as exc:
        raise FaultError(str(exc)) from None


def parse_spec(spec: str) -> Fault:
    """A fault from ``KIND:DEVICE[:PORT][,key=value...]``."""
    match = _SPEC.match(spec)
    if not match:
        raise FaultError(f"fault spec {spec!r} is not KIND:DEVICE[:PORT][,key=value...]")
    kind, device, port, rest = match.groups()
    data: dict[str, Any] = {"kind": kind, "device": device}
    if port is not None:
        data["port"] = int(port)
    for part in (rest or "").split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise FaultError(f"{spec!r}: {part!r} is not key=value")
        data[key.strip()] = value.strip()
    return from_mapping(data)


def load_file(path: Path) -> list[Fault]:
    """Faults from a YAML or JSON file: a list of specs or mappings, or ``{faults: [...]}``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FaultError(f"cannot read faults file {path}: {exc.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise FaultError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: "
                         f"{exc}") from None
    if isinstance(data, dict) and "faults" in data:
        data = data["faults"]
    if data is None:
        return []
    if not isinstance(data, list):
        raise FaultError(f"{path}: expected a list of faults (or faults: [...])")
    out = []
    for i, item in enumerate(data):
        try:
            if isinstance(item, str):
                out.append(parse_spec(item))
            elif isinstance(item, dict):
                out.append(from_mapping(item))
            else:
                raise FaultError("each fault is a spec string or a mapping")
        except FaultError as exc:
            raise FaultError(f"{path}: fault {i + 1}: {exc}") from None
    return out


def check_all(faults: Iterable[Fault], fabric: Fabric) -> list[Fault]:
    """Check every fault against the fabric; returns them as a list."""
    out = list(faults)
    for fault in out:
        fault.check(fabric)
    return out
