"""``fabricwatch agent``: one per GPU node, the host's own HCA counters every second.

Every interval the agent reads, for each ``<sysfs>/class/infiniband/<hca>/ports/<n>/``:
``counters/*`` (the PMA counters, legacy register widths for the error counters, as the
``sysfs`` ingest format), ``hw_counters/*`` (the driver's transport and RoCE counters),
``state``, ``phys_state``, ``rate`` (width and speed) and ``link_layer``. For an Ethernet
link layer (RoCE) it also runs ``ethtool -S <netdev>`` (the netdev from
``gid_attrs/ndevs/0``, else ``<hca>/device/net/``) and adds the PFC pause and discard
counters sysfs does not carry. The names map exactly as ``fabricwatch ingest sysfs`` and
``ingest ethtool`` map them (``collectors.telemetry``).

It publishes **one** ``counters`` message per host per interval: ``device`` is the host,
each sample names its HCA (``device: HOST/HCA``, the contract's name of a host port, the
ibnetdiscover rule) and ``Counters.split`` gives consumers one message per HCA. A port
whose ``state`` changed since the last reading gets a ``port_event`` in the same round
(``up`` = ACTIVE, ``down`` = anything else, or the port gone).

A port that cannot be read — its HCA disappeared, a file that cannot be opened, a value that
is not a number, ethtool failing — is still in the message, as a sample with ``error``
saying what and where, and whatever of it could be read; the other ports are unaffected.
A port once seen keeps being reported (as an error) after it vanishes, so its silence is
never mistaken for health. Nothing here runs a shell: the only tool is ``ethtool``, with
an argument list whose netdev name is checked first.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors.common import stable_id
from collectors.errors import ParseError
from collectors.live.tools import ToolRunner
from collectors.telemetry import HW_COUNTER_FIELDS, SYSFS_COUNTER_FIELDS, parse_ethtool
from schemas import LEGACY_COUNTER_BITS, Counters, PortEvent, PortSample

log = logging.getLogger(__name__)

SOURCE = "host_agent"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")  # an HCA or a counter file name
_NETDEV = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@\-]{0,14}$")  # IFNAMSIZ - 1, no leading '-'
_RATE = re.compile(r"\((\d+X)\s+([A-Z0-9]+)\)")
_CAMEL = re.compile(r"[^0-9a-zA-Z]+")
MAX_FILE_BYTES = 4096  # a sysfs attribute is one page at most
# ethtool counters the agent adds for RoCE ports (sysfs has no PFC or phy discards).
_ETHTOOL_KEEP = re.compile(r"^(pfc\d?_|pfc_pause_|.*pause.*|.*discard.*)")


class AgentError(Exception):
    """The agent cannot run at all (no sysfs tree where it was told to look)."""


def check_netdev(name: str) -> str:
    """A network interface name safe to pass to ethtool: never an option, never a path."""
    if not _NETDEV.match(name) or name in {".", ".."}:
        raise ValueError(f"netdev name {name[:40]!r} is not an interface name")
    return name


@dataclass(frozen=True)
class AgentConfig:
    fabric: str
    host: str
    sysfs_root: Path = Path("/sys")
    interval_s: float = 1.0
    ethtool: str = "ethtool"
    ethtool_timeout_s: float = 0.5

    @property
    def ib_dir(self) -> Path:
        return self.sysfs_root / "class" / "infiniband"


@dataclass
class PortReading:
    """One port's values this round, and what went wrong reading it."""

    hca: str
    port: int
    values: dict[str, Any] = field(default_factory=dict)
    bits: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    state: str | None = None
    phys_state: str | None = None
    link_layer: str | None = None

    def sample(self, host: str) -> PortSample:
        error = "; ".join(self.errors)[:1024] if self.errors else None
        return PortSample(port=self.port, device=f"{host}/{self.hca}", error=error,
                          counter_bits=dict(self.bits) or None, **self.values)


def _read(path: Path | str) -> str:
    # os.open/os.read on a str path: ~400 attributes a second per 8 ports, and pathlib's
    # objects and buffered files cost more than the reads themselves.
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.read(fd, MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError("longer than a sysfs attribute")
    return data.decode("ascii", errors="strict").strip()


def _snake(name: str) -> str:
    return _CAMEL.sub("_", name).strip("_").lower()


def _counter_dir(reading: PortReading, where: Path, group: str) -> None:
    table = SYSFS_COUNTER_FIELDS if group == "counters" else HW_COUNTER_FIELDS
    try:
        names = sorted(os.listdir(where))
    except FileNotFoundError:
        if group == "counters":  # every IB port has counters/; hw_counters is optional
            reading.errors.append(f"{group}/ is missing")
        return
    except OSError as exc:
        reading.errors.append(f"{group}/: {exc.strerror}")
        return
    base = f"{where}{os.sep}"
    for name in names:
        if not _NAME.match(name):
            continue
        try:
            text = _read(base + name)
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            reading.errors.append(f"{group}/{name}: {why}")
            continue
        if not text.isdigit():
            reading.errors.append(f"{group}/{name}: {text[:40]!r} is not a number")
            continue
        key = table.get(name) or _snake(name)
        reading.values[key] = int(text)
        if group == "counters" and key in LEGACY_COUNTER_BITS:
            reading.bits[key] = LEGACY_COUNTER_BITS[key]


def read_port(ib_dir: Path, hca: str, port: int) -> PortReading:
    """Everything sysfs says of one port (no ethtool); errors collected, never raised."""
    reading = PortReading(hca, port)
    pdir = ib_dir / hca / "ports" / str(port)
    if not pdir.is_dir():
        reading.errors.append(f"{hca} port {port} is no longer in {ib_dir}")
        return reading
    _counter_dir(reading, pdir / "counters", "counters")
    _counter_dir(reading, pdir / "hw_counters", "hw_counters")
    for name in ("state", "phys_state", "rate", "link_layer"):
        try:
            text = _read(pdir / name)
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            reading.errors.append(f"{name}: {why}")
            continue
        if name == "rate":
            rate = _RATE.search(text)
            if rate:
                reading.values["width"], reading.values["speed"] = rate.group(1), rate.group(2)
        elif name == "link_layer":
            reading.link_layer = reading.values["link_layer"] = text
        else:
            value = text.split(":", 1)[-1].strip()  # "4: ACTIVE" -> "ACTIVE"
            reading.values[name] = value
            if name == "state":
                reading.state = value
            else:
                reading.phys_state = value
    return reading


def netdev_of(ib_dir: Path, hca: str, port: int) -> str | None:
    """The Ethernet netdev of a RoCE port: gid_attrs/ndevs/0, else the HCA's device/net/."""
    try:
        name = _read(ib_dir / hca / "ports" / str(port) / "gid_attrs" / "ndevs" / "0")
    except (OSError, ValueError):
        name = ""  # no GID table entry: the HCA's PCI device's net/ folder says
    if name:
        return check_netdev(name)  # ValueError for a name that is no interface name
    try:
        names = sorted(os.listdir(ib_dir / hca / "device" / "net"))
    except OSError:
        return None
    return check_netdev(names[0]) if names else None


def discover(ib_dir: Path) -> list[tuple[str, int]]:
    """(hca, port) of every port under ``ib_dir``, sorted."""
    found: list[tuple[str, int]] = []
    for hca in sorted(os.listdir(ib_dir)):
        if not _NAME.match(hca):
            continue
        try:
            ports = os.listdir(ib_dir / hca / "ports")
        except OSError:
            continue
        found.extend((hca, int(p)) for p in ports if p.isdigit() and 0 < int(p) <= 1024)
    return sorted(found)


def link_state(state: str | None) -> str:
    return "up" if state == "ACTIVE" else "down"


class HostAgent:
    """Reads the host's ports each round; ``round()`` returns the events to publish."""

    def __init__(self, config: AgentConfig, *, runner: ToolRunner | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if not _NAME.match(config.host):
            raise AgentError(f"host name {config.host[:60]!r} is not a device name")
        self.config = config
        self.runner = runner or ToolRunner()
        self.clock = clock
        self.known: set[tuple[str, int]] = set()
        self.states: dict[tuple[str, int], str] = {}
        self.last_errors = 0

    def check(self) -> None:
        if not self.config.ib_dir.is_dir():
            raise AgentError(f"{self.config.ib_dir} is not a directory: no InfiniBand/RoCE "
                             "devices, or the wrong --sysfs-root")

    async def _ethtool(self, reading: PortReading, ts: int) -> None:
        try:
            netdev = netdev_of(self.config.ib_dir, reading.hca, reading.port)
        except ValueError as exc:
            reading.errors.append(str(exc))
            return
        if netdev is None:
            reading.errors.append("RoCE port without a netdev (gid_attrs/ndevs/0, "
                                  "device/net/)")
            return
        argv = [self.config.ethtool, "-S", netdev]
        res = await self.runner.run(argv, self.config.ethtool_timeout_s)
        if not res.ok:
            why = (res.stderr.strip().splitlines() or [f"exit {res.exit_code}"])[-1]
            reading.errors.append(f"ethtool -S {netdev}: {why[:200]}")
            return
        try:
            (event,) = parse_ethtool(res.stdout, fabric=self.config.fabric, ts=ts,
                                     device=f"{self.config.host}/{reading.hca}",
                                     port=reading.port)
        except (ParseError, ValueError) as exc:
            reading.errors.append(f"ethtool -S {netdev}: {exc}")
            return
        extra = event.ports[0].model_dump(exclude_none=True, exclude={"port", "counter_bits"})
        for key, value in extra.items():
            if _ETHTOOL_KEEP.match(key) and key not in reading.values:
                reading.values[key] = value
        reading.values["netdev"] = netdev

    async def read(self) -> tuple[int, list[PortReading]]:
        """One round of readings: every port present now, and every port seen before."""
        ts = int(self.clock() * 1000)
        ib_dir = self.config.ib_dir
        try:
            present = discover(ib_dir)
        except OSError:
            present = []
        self.known.update(present)
        readings = [read_port(ib_dir, hca, port) for hca, port in sorted(self.known)]
        roce = [r for r in readings if r.link_layer == "Ethernet"]
        if roce:
            await asyncio.gather(*(self._ethtool(r, ts) for r in roce))
        return ts, readings

    def events(self, ts: int, readings: list[PortReading]) -> list[Counters | PortEvent]:
        """The round's one counters message, then a port event per changed port."""
        cfg = self.config
        samples = [r.sample(cfg.host) for r in readings]
        ident = stable_id(SOURCE, cfg.fabric, cfg.host, ts,
                          *(s.model_dump_json() for s in samples))
        out: list[Counters | PortEvent] = [Counters(id=ident, ts=ts, fabric=cfg.fabric,
                                                    source=SOURCE, device=cfg.host,
                                                    ports=samples)]
        for r in readings:
            where = (r.hca, r.port)
            gone = r.state is None and bool(r.errors)
            now = "down" if gone else link_state(r.state) if r.state is not None else None
            before = self.states.get(where)
            if now is None:
                continue
            self.states[where] = now
            if before is None or before == now:
                continue
            device = f"{cfg.host}/{r.hca}"
            reason = ("the port can no longer be read: " + r.errors[0][:200] if gone
                      else f"sysfs state {r.state}")
            out.append(PortEvent(id=stable_id(SOURCE, cfg.fabric, device, r.port, ts, now),
                                 ts=ts, fabric=cfg.fabric, source=SOURCE, device=device,
                                 port=r.port, state=now, phys_state=r.phys_state,
                                 reason=reason))
        self.last_errors = sum(1 for r in readings if r.errors)
        return out

    async def round(self) -> list[Counters | PortEvent]:
        ts, readings = await self.read()
        return self.events(ts, readings)


async def run_agent(agent: HostAgent, emit: Callable[[list[Counters | PortEvent]], Any],
                    stop: asyncio.Event,
                    on_round: Callable[[int, int, float], None] | None = None) -> None:
    """A round every interval on a fixed schedule (a slow round skips ticks, never drifts)."""
    interval = agent.config.interval_s
    next_at = time.monotonic()
    while not stop.is_set():
        started = time.monotonic()
        events = await agent.round()
        result = emit(events)
        if asyncio.iscoroutine(result):
            await result
        if on_round is not None:
            counters = events[0]
            assert isinstance(counters, Counters)  # noqa: S101 - round() puts it first
            on_round(len(counters.ports) - agent.last_errors, agent.last_errors,
                     time.monotonic() - started)
        next_at += interval
        now = time.monotonic()
        if next_at <= now:  # overran: next tick from now
            next_at = now + interval - ((now - next_at) % interval)
        try:
            await asyncio.wait_for(stop.wait(), next_at - now)
        except TimeoutError:
            pass
