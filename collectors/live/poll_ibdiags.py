"""``fabricwatch poll ibdiags``: ibnetdiscover on a schedule, perfquery per switch on the sampling interval.

Every ``discover_interval_s`` the poller runs ``ibnetdiscover`` and publishes the ``topology``
event (``collectors.ibnetdiscover.parse_ibnetdiscover``, with the ``nodes`` list that carries
LIDs and GUIDs). The switches and their cabled ports come from the latest discovery.

Every ``sample_interval_s`` it reads each switch's cabled ports, at most ``concurrency``
switches at a time, each with its own ``timeout_s``:

* ``perfquery LID PORTS`` (PortCounters: the legacy 8/16/32-bit error counters, so that a
  register stuck at its maximum is seen as such), then
* ``perfquery -x LID PORTS`` (PortCountersExtended: 64-bit data counters, and 64-bit error
  counters where the PMA's CapMask2 says it has them).

Host ports (HCAs) are not read one by one: each round also runs one fabric-wide
``ibqueryerrors`` (it exits 1 when it found errors, which is a reading, not a failure) and
publishes its ``counters`` for the devices that are not polled switches, so an HCA port
with errors past ibqueryerrors' thresholds is seen too (counters below them stay null, as
ibqueryerrors does not print them). ``hcas=False`` turns that off.

The subnet manager: each round also runs ``sminfo`` (the master SM's GUID, priority and
state) and ``saquery -s`` (the SM-capable ports: the standbys) and publishes their
``sm_event``s on ``fabric.sm``, where the SM detector tells a master change
(``sm_failover``) and a lost standby (``sm_standby_lost``). A tool that fails is named in
``PollReport.sm_failed`` and sends nothing (``sm=False`` turns both off).

Both perfquery outputs go through one ``parse_perfquery`` call: blocks of the same port merge and the
extended block, read last, wins where it has a value, so each counter is reported at the
widest register the switch offers, with its width in ``counter_bits``. A switch that times out
or fails is reported in the round's ``PollReport``; the others' counters are published
without waiting for the slow ones (partial failure delays nobody). What could not be read
is named on the wire too, never left out: a switch that did not answer gets a ``counters``
message whose samples are its cabled ports, each with ``error`` saying why and no values
(so the stale detector and the ledger see those ports as unknown, not healthy); a switch
whose ``perfquery`` answered but whose ``perfquery -x`` did not is published with the
legacy reading and listed in ``PollReport.partial``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from collectors.common import stable_id
from collectors.errors import ParseError
from collectors.ibdiags import (
    parse_ibqueryerrors,
    parse_perfquery,
    parse_saquery_sms,
    parse_sminfo,
)
from collectors.ibnetdiscover import parse_ibnetdiscover
from collectors.live.tools import ToolError, ToolRunner, check_lid, port_list
from schemas import Counters, PortSample, Topology

log = logging.getLogger(__name__)


class PublisherLike(Protocol):
    async def send(self, event: Any) -> Any: ...

    async def send_many(self, events: Any) -> Any: ...

    async def flush(self) -> Any: ...


@dataclass(frozen=True)
class PollConfig:
    fabric: str
    discover_interval_s: float = 300.0
    sample_interval_s: float = 30.0
    timeout_s: float = 20.0  # per tool run
    discover_timeout_s: float = 300.0  # a 100k-port ibnetdiscover takes minutes
    concurrency: int = 8
    extended: bool = True  # also perfquery -x
    hcas: bool = True  # one fabric-wide ibqueryerrors per round for the host ports
    sm: bool = True  # sminfo and saquery -s per round: the master SM and its standbys

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.sample_interval_s <= 0 or self.discover_interval_s <= 0:
            raise ValueError("concurrency >= 1 and positive intervals, please")


@dataclass(frozen=True)
class SwitchTarget:
    device: str
    lid: int
    ports: tuple[int, ...]


@dataclass
class PollReport:
    """What one sampling round did."""

    ts: int
    published: list[str] = field(default_factory=list)  # devices
    failed: dict[str, str] = field(default_factory=dict)  # device -> reason
    partial: dict[str, str] = field(default_factory=dict)  # published, but not all of it
    sm_failed: dict[str, str] = field(default_factory=dict)  # sminfo / saquery -> why not
    elapsed_s: float = 0.0


def switch_targets(topology: Topology) -> list[SwitchTarget]:
    """The switches of a topology with a LID, and their cabled ports."""
    extra: dict[str, Any] = topology.model_extra or {}
    lids: dict[str, int] = {}
    for node in extra.get("nodes") or []:
        if node.get("type") == "switch":
            node_lids = node.get("lids") or {}
            lid = node_lids.get("0") or next(iter(node_lids.values()), None)
            if isinstance(lid, int):
                lids[str(node["name"])] = lid
    ports: dict[str, set[int]] = {name: set() for name in lids}
    for link in topology.links:
        for dev, port in ((link.a_device, link.a_port), (link.b_device, link.b_port)):
            if dev in ports:
                ports[dev].add(port)
    return [SwitchTarget(name, lids[name], tuple(sorted(ports[name])))
            for name in sorted(lids) if ports[name]]


class IbdiagsPoller:
    """Discovers and samples; ``run`` loops until ``stop`` is set."""

    def __init__(self, config: PollConfig, publisher: PublisherLike, runner: ToolRunner, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.publisher = publisher
        self.runner = runner
        self.clock = clock
        self.topology: Topology | None = None
        self.targets: list[SwitchTarget] = []
        self._sem = asyncio.Semaphore(config.concurrency)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def discover(self) -> Topology:
        """Run ibnetdiscover, publish the topology; ``ToolError``/``ParseError`` on failure."""
        argv = ["ibnetdiscover", *self.runner.local_args()]
        text = await self.runner.check(argv, self.config.discover_timeout_s)
        topo = parse_ibnetdiscover(text, fabric=self.config.fabric, ts=self._now_ms())
        await self.publisher.send(topo)
        await self.publisher.flush()
        self.topology = topo
        self.targets = switch_targets(topo)
        log.info("discovered %d links, %d switches", len(topo.links), len(self.targets))
        return topo

    async def read_switch(self, target: SwitchTarget,
                          report: PollReport | None = None) -> list[Counters]:
        """perfquery (and perfquery -x) of one switch's cabled ports -> counters events.

        When the legacy reading worked and the extended one did not, the legacy reading is
        returned and the failure noted in ``report.partial``.
        """
        lid = str(check_lid(target.lid))
        ports = port_list(target.ports)
        local = self.runner.local_args()
        texts = [await self.runner.check(["perfquery", *local, lid, ports],
                                         self.config.timeout_s)]
        if self.config.extended:
            try:
                texts.append(await self.runner.check(["perfquery", *local, "-x", lid, ports],
                                                     self.config.timeout_s))
            except ToolError as exc:
                if report is None:
                    raise
                report.partial[target.device] = f"perfquery -x: {exc}"
        return parse_perfquery("\n".join(texts), fabric=self.config.fabric, ts=self._now_ms(),
                               device=target.device)

    def unread(self, target: SwitchTarget, reason: str) -> Counters:
        """The counters message that names a switch's ports this round could not read."""
        ts = self._now_ms()
        why = f"perfquery of LID {target.lid}: {reason}"[:1024]
        return Counters(id=stable_id("unread", self.config.fabric, target.device, ts, why),
                        ts=ts, fabric=self.config.fabric, source="perfquery",
                        device=target.device,
                        ports=[PortSample(port=p, error=why) for p in target.ports])

    async def _one(self, target: SwitchTarget, report: PollReport) -> None:
        async with self._sem:
            try:
                # Two tool runs, each with its own timeout; the outer bound keeps a switch
                # whose PMA answers slowly on every port from holding a slot for long.
                events = await asyncio.wait_for(self.read_switch(target, report),
                                                self.config.timeout_s * 2.5)
            except (ToolError, ParseError, TimeoutError, ValueError) as exc:
                reason = str(exc) or type(exc).__name__
                report.failed[target.device] = reason
                log.warning("switch %s (LID %d): %s", target.device, target.lid, exc)
                try:
                    events = [self.unread(target, reason)]
                except ValueError:  # a target the contract cannot name: the report does
                    return
                await self.publisher.send_many(events)
                return
        await self.publisher.send_many(events)
        report.published.append(target.device)

    async def read_hcas(self, report: PollReport, switches: set[str]) -> None:
        """ibqueryerrors over the fabric; publish the devices that are not polled switches."""
        argv = ["ibqueryerrors", *self.runner.local_args()]
        res = await self.runner.run(argv, self.config.discover_timeout_s)
        if res.exit_code not in (0, 1):  # 1: it found errors past its thresholds
            why = res.stderr.strip().splitlines()[-1:] or [f"exit {res.exit_code}"]
            report.failed["ibqueryerrors"] = why[0]
            return
        lids = None
        if self.topology is not None:
            from collectors.lidmap import LidMap

            lids = LidMap.from_topology(self.topology)
        try:
            events = parse_ibqueryerrors(res.stdout, fabric=self.config.fabric,
                                         ts=self._now_ms(), lids=lids)
        except ParseError as exc:
            if "Errors for" in res.stdout:
                report.failed["ibqueryerrors"] = str(exc)
            return  # nothing past the thresholds: no port to report
        hosts = [e for e in events if e.device not in switches]
        if hosts:
            await self.publisher.send_many(hosts)
            report.published += [e.device for e in hosts]

    async def read_sm(self, report: PollReport) -> None:
        """``sminfo`` (the master SM) and ``saquery -s`` (its standbys) -> ``fabric.sm``.

        A tool that fails or answers what is not its output is named in
        ``report.sm_failed`` and publishes nothing: no answer is not "no standby"."""
        local = self.runner.local_args()
        for name, argv, parse in (
                ("sminfo", ["sminfo", *local], parse_sminfo),
                ("saquery", ["saquery", *local, "-s"], parse_saquery_sms)):
            try:
                text = await self.runner.check(argv, self.config.timeout_s)
                event = parse(text, fabric=self.config.fabric, ts=self._now_ms())
            except (ToolError, ParseError) as exc:
                report.sm_failed[name] = str(exc)[:500]
                continue
            await self.publisher.send(event)

    async def sample(self, targets: Sequence[SwitchTarget] | None = None) -> PollReport:
        started = time.monotonic()
        report = PollReport(ts=self._now_ms())
        chosen = list(targets or self.targets)
        jobs = [self._one(t, report) for t in chosen]
        if self.config.hcas:
            jobs.append(self.read_hcas(report, {t.device for t in chosen}))
        if self.config.sm:
            jobs.append(self.read_sm(report))
        await asyncio.gather(*jobs)
        await self.publisher.flush()
        report.elapsed_s = time.monotonic() - started
        return report

    async def run(self, stop: asyncio.Event,
                  on_report: Callable[[PollReport], None] | None = None) -> None:
        """Discover now and every ``discover_interval_s``; sample every ``sample_interval_s``."""
        next_discover = 0.0
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_discover:
                try:
                    await self.discover()
                except (ToolError, ParseError) as exc:
                    log.error("ibnetdiscover failed: %s (keeping the previous topology)", exc)
                next_discover = now + self.config.discover_interval_s
            if self.targets:
                report = await self.sample()
                if on_report is not None:
                    on_report(report)
            try:
                await asyncio.wait_for(stop.wait(), self.config.sample_interval_s)
            except TimeoutError:
                pass
