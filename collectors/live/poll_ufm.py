"""``fabricwatch poll ufm``: UFM Enterprise's REST API and UFM Telemetry, polled into the contract.

Every round (``interval_s``) the poller reads, each with its own timeout:

* ``GET /ufmRest/app/events``: the events with an id above the last one published become
  ``port_event``s (``collectors.ufm_rest.parse_events``: link down / up for both ends, port
  unhealthy);
* ``GET /ufmRest/app/unhealthy_ports``: UFM's own unhealthy marks, a ``down`` when a mark
  appears (unless a 702 event of the round already reported it) and an ``up`` when it is
  removed;
* the UFM Telemetry CSV (``telemetry_url``, e.g. ``http://ufm:9001/csv/xcset/ib_basic_debug``,
  the endpoint NVIDIA's PDR plugin reads): ``counters`` per device;

and every ``inventory_every_s`` ``GET /ufmRest/resources/ports`` and ``/resources/links``, for
device names and the peer of a port. Until they have answered once nothing else is read (a
device must not be published under its GUID first and its name later); a failed refresh
keeps the names it had. Authentication is HTTP basic (UFM's ``ufmRest``
prefix); TLS certificates are verified unless ``verify_tls`` is off.

Incremental and restart-safe. The last event id and the set of unhealthy marks are kept in
a JSON state file, written (atomically) only after the broker acknowledged everything the
round published. So a restart neither repeats nor skips an event; a crash between the
acknowledgement and the write repeats at most one round, whose event ids are hashes of UFM's
event id, so consumers drop the repeats. On the very first start (no state file) the events
UFM already holds are history: they are skipped unless ``backfill`` is set, and the newest id
is the starting point. Should UFM's ids start again below the saved one (a UFM database
reset), everything it holds is new and is read.

Partial failure. A resource that fails (HTTP error, timeout, an answer that is not the
documented shape) is named in the round's ``UfmReport.failed`` and skipped; what the other
resources gave is still published, and what failed is retried next round (its state is not
advanced).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from pydantic import SecretStr

from collectors.errors import ParseError
from collectors.ufm_rest import (
    UfmInventory,
    parse_events,
    parse_inventory,
    parse_telemetry_csv,
    parse_unhealthy,
)

log = logging.getLogger(__name__)

EVENTS_PATH = "/ufmRest/app/events"
UNHEALTHY_PATH = "/ufmRest/app/unhealthy_ports"
PORTS_PATH = "/ufmRest/resources/ports"
LINKS_PATH = "/ufmRest/resources/links"


class PublisherLike(Protocol):
    async def send_many(self, events: Any) -> Any: ...

    async def flush(self) -> Any: ...


class UfmError(Exception):
    """A UFM request that failed; the message names the path, never a credential."""


@dataclass(frozen=True)
class UfmConfig:
    fabric: str
    base_url: str  # https://ufm.example.net (the ufmRest paths are added)
    username: str
    password: SecretStr
    state_file: Path
    telemetry_url: str | None = None
    tz: str = "UTC"  # the zone UFM writes event times in
    interval_s: float = 30.0
    inventory_every_s: float = 300.0
    timeout_s: float = 30.0
    verify_tls: bool = True
    ca_file: Path | None = None
    backfill: bool = False

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("https://", "http://")):
            raise ValueError("the UFM URL must start with https:// (or http://)")
        if self.telemetry_url is not None and not self.telemetry_url.startswith(
                ("https://", "http://")):
            raise ValueError("the telemetry URL must start with http:// or https://")
        if not self.username:
            raise ValueError("a UFM user name is needed")
        if self.interval_s <= 0 or self.inventory_every_s <= 0 or self.timeout_s <= 0:
            raise ValueError("positive intervals and timeout, please")


class UfmClient:
    """One aiohttp session against UFM: basic auth, timeouts, TLS as configured."""

    def __init__(self, config: UfmConfig) -> None:
        self.config = config
        self._session: aiohttp.ClientSession | None = None

    def _ssl(self) -> ssl.SSLContext | bool:
        if not self.config.verify_tls:
            return False
        cafile = str(self.config.ca_file) if self.config.ca_file else None
        return ssl.create_default_context(cafile=cafile)

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.config.timeout_s),
                connector=aiohttp.TCPConnector(ssl=self._ssl()))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def get(self, url: str, *, auth: bool = True) -> str:
        what = url.split("?", 1)[0]
        # the header is built per request and never logged; the telemetry CSV takes none
        headers = ({"Authorization": aiohttp.encode_basic_auth(
            self.config.username, self.config.password.get_secret_value())} if auth else None)
        try:
            async with self._get_session().get(url, headers=headers) as resp:
                text = await resp.text()
                if resp.status in (401, 403):
                    raise UfmError(f"GET {what}: HTTP {resp.status} (check the UFM user and "
                                   "password)")
                if resp.status >= 400:
                    raise UfmError(f"GET {what}: HTTP {resp.status}: {text[:200]}")
                return text
        except aiohttp.ClientError as exc:
            raise UfmError(f"GET {what}: {type(exc).__name__}: {exc}") from None
        except TimeoutError:
            raise UfmError(f"GET {what}: no answer within {self.config.timeout_s:g} s") from None

    async def get_json(self, path: str) -> Any:
        text = await self.get(self.config.base_url.rstrip("/") + path)
        try:
            return json.loads(text)
        except ValueError:
            raise UfmError(f"GET {path}: the answer is not JSON") from None


@dataclass
class UfmReport:
    """What one round did: counts published per resource, and what failed and why."""

    ts: int
    published: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    elapsed_s: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.published.values())


@dataclass
class UfmState:
    last_event_id: int | None = None
    unhealthy: set[str] | None = None

    @classmethod
    def load(cls, path: Path) -> UfmState:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            raise ValueError(f"the UFM poller state {path} cannot be read: {exc}") from None
        last = data.get("last_event_id")
        marks = data.get("unhealthy")
        if (last is not None and not isinstance(last, int)) or (
                marks is not None and not isinstance(marks, list)):
            raise ValueError(f"the UFM poller state {path} is not what this poller writes")
        return cls(last, None if marks is None else {str(m) for m in marks})

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"last_event_id": self.last_event_id,
                                   "unhealthy": sorted(self.unhealthy or ())}),
                       encoding="utf-8")
        os.replace(tmp, path)


class UfmPoller:
    """Polls UFM; ``round`` once, ``run`` until ``stop`` is set."""

    def __init__(self, config: UfmConfig, publisher: PublisherLike, *,
                 client: UfmClient | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.publisher = publisher
        self.client = client or UfmClient(config)
        self.clock = clock
        self.state = UfmState.load(config.state_file)
        self.inventory = UfmInventory()
        self._inventory_at: float | None = None

    async def close(self) -> None:
        await self.client.close()

    async def _inventory(self, report: UfmReport) -> None:
        now = time.monotonic()
        if self._inventory_at is not None and now - self._inventory_at < self.config.inventory_every_s:
            return
        try:
            ports, links = await asyncio.gather(self.client.get_json(PORTS_PATH),
                                                self.client.get_json(LINKS_PATH))
            self.inventory = parse_inventory(ports, links)
            self._inventory_at = now
        except (UfmError, ParseError) as exc:
            # the previous names stay (none yet: the round reads nothing); retried next round
            report.failed["ports/links"] = str(exc)

    async def _events(self, report: UfmReport, state: UfmState) -> set[str]:
        """Publish the new events; the ports their 702 (unhealthy) events named."""
        try:
            answer = await self.client.get_json(EVENTS_PATH)
            after = state.last_event_id
            if after is None and not self.config.backfill:
                ids = [e.get("id") for e in answer if isinstance(e, dict)] if isinstance(
                    answer, list) else []
                after = max((i for i in ids if isinstance(i, int)), default=0)
                log.info("first start: %s events UFM already holds are history, starting "
                         "after id %d", len(ids), after)
            elif after is not None and isinstance(answer, list):
                ids = [e.get("id") for e in answer if isinstance(e, dict)]
                top = max((i for i in ids if isinstance(i, int)), default=None)
                if top is not None and top < after:
                    log.warning("UFM event ids restarted (newest %d < saved %d): reading all",
                                top, after)
                    after = 0
            result = parse_events(answer, fabric=self.config.fabric, tz=self.config.tz,
                                  after=after or 0, inventory=self.inventory)
        except (UfmError, ParseError) as exc:
            report.failed["events"] = str(exc)
            return set()
        if result.skipped:  # passed, so that they do not hold back the rest: named
            report.failed["events"] = (f"{len(result.skipped)} port event(s) not mapped, "
                                       f"first: {result.skipped[0]}")
        if result.events:
            await self.publisher.send_many(result.events)
        report.published["events"] = len(result.events)
        state.last_event_id = result.last_id
        return result.unhealthy

    async def _unhealthy(self, report: UfmReport, state: UfmState, reported: set[str]) -> None:
        try:
            answer = await self.client.get_json(UNHEALTHY_PATH)
            events, now = parse_unhealthy(answer, fabric=self.config.fabric, ts=report.ts,
                                          previous=state.unhealthy or (),
                                          inventory=self.inventory, reported=reported)
        except (UfmError, ParseError) as exc:
            report.failed["unhealthy_ports"] = str(exc)
            return
        if events:
            await self.publisher.send_many(events)
        report.published["unhealthy_ports"] = len(events)
        state.unhealthy = now

    async def _telemetry(self, report: UfmReport) -> None:
        if self.config.telemetry_url is None:
            return
        try:
            text = await self.client.get(self.config.telemetry_url, auth=False)
            counters = parse_telemetry_csv(text, fabric=self.config.fabric,
                                           inventory=self.inventory)
        except (UfmError, ParseError) as exc:
            report.failed["telemetry"] = str(exc)
            return
        await self.publisher.send_many(counters)
        report.published["telemetry"] = len(counters)

    async def round(self) -> UfmReport:
        """One round; the state is saved only after the broker acknowledged it all."""
        started = time.monotonic()
        report = UfmReport(ts=int(self.clock() * 1000))
        state = UfmState(self.state.last_event_id,
                         None if self.state.unhealthy is None else set(self.state.unhealthy))
        await self._inventory(report)
        if self._inventory_at is None:
            # Without UFM's names a device would be published under its GUID now and under
            # its name later: two devices in the ledger. Nothing is read, nothing advances.
            for what in ("events", "unhealthy_ports", "telemetry")[
                    :None if self.config.telemetry_url else 2]:
                report.failed[what] = "not read: device names unknown until ports/links answer"
            report.elapsed_s = time.monotonic() - started
            for what, why in report.failed.items():
                log.warning("UFM %s: %s", what, why)
            return report
        telemetry = asyncio.create_task(self._telemetry(report))
        # events before marks: a mark that a 702 event of this round reported is not a
        # second down
        reported = await self._events(report, state)
        await self._unhealthy(report, state, reported)
        await telemetry
        await self.publisher.flush()  # PublishError propagates: nothing saved, nothing lost
        if (state.last_event_id, state.unhealthy) != (self.state.last_event_id,
                                                      self.state.unhealthy):
            state.save(self.config.state_file)
        self.state = state
        report.elapsed_s = time.monotonic() - started
        for what, why in report.failed.items():
            log.warning("UFM %s: %s", what, why)
        return report

    async def run(self, stop: asyncio.Event,
                  on_report: Callable[[UfmReport], None] | None = None) -> None:
        while not stop.is_set():
            report = await self.round()
            if on_report is not None:
                on_report(report)
            try:
                await asyncio.wait_for(stop.wait(), self.config.interval_s)
            except TimeoutError:
                pass
