"""Prometheus metrics of the fabricwatch workers, and the HTTP endpoint that serves them.

A worker calls ``start_metrics_server(port)`` when ``settings.metrics_port`` is set; the
stream processors (``fabricwatch worker``) and the runbook worker (``fabricwatch
runbook-worker``) then serve ``GET /metrics`` on that port (all interfaces: in a pod the
scraper comes from another address; ``host`` narrows it, the tests use 127.0.0.1).

The series (the dashboard in ``deploy/monitoring/`` and the alert rules read exactly these;
docs/deployment.md lists them with the PromQL the alerts use):

=============================================  =========  =====================================
series                                          type       labels / meaning
=============================================  =========  =====================================
``fabricwatch_events_total``                    counter    ``topic``: contract messages consumed
                                                           (events/s = ``rate(...)``)
``fabricwatch_dead_letters_total``              counter    ``topic``: messages sent to fabric.dlq
``fabricwatch_detections_total``                counter    ``detection``, ``severity``
``fabricwatch_detection_latency_seconds``       histogram  ``detection``: event time (``ts``) of
                                                           the triggering event to publication
``fabricwatch_consumer_lag``                    gauge      ``topic``, ``partition``: messages
                                                           behind the partition's high watermark
                                                           when the worker last read from it
``fabricwatch_runbooks``                        gauge      ``status``: PortRemediation workflows
                                                           by Temporal execution status
``fabricwatch_runbooks_needs_human``            gauge      running PortRemediation runbooks
                                                           stopped for a person (state
                                                           ``needs_human``)
``fabricwatch_runbooks_status_unknown``         gauge      running runbooks whose ``status``
                                                           query went unanswered this round
                                                           (needs_human may be short by these)
``fabricwatch_runbook_dispatch_total``          counter    ``outcome``: detections the dispatcher
                                                           ``dispatched`` / ``ignored`` / ``invalid``
``fabricwatch_breaker_isolated_ports``          gauge      ``fabric``, ``su``: ports holding the
                                                           SU's isolation budget
``fabricwatch_breaker_limit``                   gauge      ``fabric``, ``su``: the SU's budget
``fabricwatch_breaker_open``                    gauge      ``fabric``, ``su``: 1 when the budget is
                                                           used up (the next isolation is refused)
``fabricwatch_breaker_refused_total``           gauge      ``fabric``, ``su``: refusals so far (the
                                                           budget workflow's own count)
``fabricwatch_breaker_open_detections_total``   counter    ``su``: breaker_open detections fired
                                                           by the stream processors
``fabricwatch_stream_agents``                   gauge      ``agents``: 1 from a stream worker
                                                           running that agent group (``all``,
                                                           ``traps``, ``rest``): a group with
                                                           no worker is absent
=============================================  =========  =====================================

The metric objects are module-level, as prometheus-client intends (one registry per
process); every helper here takes plain values, so neither Faust nor Temporal is imported.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any, Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import start_http_server as _start_http_server

log = logging.getLogger(__name__)

EVENTS = Counter("fabricwatch_events", "Contract messages consumed, by topic.", ["topic"])
DEAD_LETTERS = Counter("fabricwatch_dead_letters", "Messages dead-lettered to fabric.dlq, by source topic.",
                       ["topic"])
DETECTIONS = Counter("fabricwatch_detections", "Detections published.", ["detection", "severity"])
# Seconds from the triggering event's own time to publication: the "within a second" promise.
DETECTION_LATENCY = Histogram(
    "fabricwatch_detection_latency_seconds",
    "Event time of the triggering event to the detection's publication.", ["detection"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0))
CONSUMER_LAG = Gauge("fabricwatch_consumer_lag",
                     "Messages behind the high watermark when the worker last read the partition.",
                     ["topic", "partition"])
RUNBOOKS = Gauge("fabricwatch_runbooks", "PortRemediation workflows by Temporal execution status.",
                 ["status"])
RUNBOOKS_NEEDS_HUMAN = Gauge("fabricwatch_runbooks_needs_human",
                             "Running PortRemediation runbooks in state needs_human.")
# Runbooks that did not answer their status query this round (worker away, mid-task): their
# state is unknown, so needs_human may be short by this many; never counted as "fine".
RUNBOOKS_UNANSWERED = Gauge("fabricwatch_runbooks_status_unknown",
                            "Running PortRemediation runbooks whose status query went unanswered.")
DISPATCH = Counter("fabricwatch_runbook_dispatch", "Detections handled by the dispatcher, by outcome.",
                   ["outcome"])
BREAKER_ISOLATED = Gauge("fabricwatch_breaker_isolated_ports",
                         "Ports holding the SU's isolation budget.", ["fabric", "su"])
BREAKER_LIMIT = Gauge("fabricwatch_breaker_limit", "The SU's isolation budget (ports).",
                      ["fabric", "su"])
BREAKER_OPEN = Gauge("fabricwatch_breaker_open",
                     "1 when the SU's isolation budget is used up (breaker open).", ["fabric", "su"])
BREAKER_REFUSED = Gauge("fabricwatch_breaker_refused_total",
                        "Isolations the SU's budget refused (the budget workflow's count).",
                        ["fabric", "su"])
# 1 per stream worker process for the agent group it runs (``fabricwatch worker --agents``):
# with the trap path apart, its absence is the trap path down while the rest looks busy.
STREAM_AGENTS = Gauge("fabricwatch_stream_agents", "1: this stream worker runs the agent group.",
                      ["agents"])
BREAKER_OPEN_DETECTIONS = Counter("fabricwatch_breaker_open_detections",
                                  "breaker_open detections fired by the stream processors.", ["su"])

# Every series name as scraped (counters gain ``_total``), for the docs and the tests.
SERIES: tuple[str, ...] = (
    "fabricwatch_events_total", "fabricwatch_dead_letters_total", "fabricwatch_detections_total",
    "fabricwatch_detection_latency_seconds", "fabricwatch_consumer_lag", "fabricwatch_runbooks",
    "fabricwatch_runbook_dispatch_total", "fabricwatch_breaker_isolated_ports",
    "fabricwatch_breaker_limit", "fabricwatch_breaker_open", "fabricwatch_breaker_refused_total",
    "fabricwatch_breaker_open_detections_total",
    "fabricwatch_collector_rounds_total", "fabricwatch_collector_published_total",
    "fabricwatch_collector_failures_total", "fabricwatch_collector_round_seconds",
    "fabricwatch_collector_last_round_timestamp_seconds",
    "fabricwatch_runbooks_needs_human", "fabricwatch_runbooks_status_unknown",
    "fabricwatch_stream_agents",
)
STREAMS_SERIES = SERIES[:5] + ("fabricwatch_breaker_open_detections_total",
                               "fabricwatch_stream_agents")
RUNBOOK_SERIES = SERIES[5:11] + ("fabricwatch_runbooks_needs_human",
                                  "fabricwatch_runbooks_status_unknown")
COLLECTOR_SERIES = SERIES[12:17]

# Temporal execution statuses as the visibility query language names them.
RUNBOOK_STATUSES = ("Running", "Completed", "Failed", "Canceled", "Terminated", "TimedOut",
                    "ContinuedAsNew")


# -- the collectors (poll ibdiags, tail opensm, poll ufm, consume gnmic) --------------------

COLLECTOR_ROUNDS = Counter("fabricwatch_collector_rounds",
                           "Sampling rounds (poller) or log reads (follower), by collector.",
                           ["collector"])
COLLECTOR_PUBLISHED = Counter("fabricwatch_collector_published",
                              "Devices sampled (poller) or port events published (follower).",
                              ["collector"])
COLLECTOR_FAILURES = Counter("fabricwatch_collector_failures",
                             "Devices that failed a round (poller), traps left unresolved or "
                             "port scans that failed (follower).", ["collector"])
COLLECTOR_ROUND_SECONDS = Gauge("fabricwatch_collector_round_seconds",
                                "How long the last sampling round took.", ["collector"])
COLLECTOR_LAST_ROUND = Gauge("fabricwatch_collector_last_round_timestamp_seconds",
                             "When the collector last completed a round or read its log.",
                             ["collector"])


def collector_round(collector: str, *, published: int, failed: int,
                    elapsed_s: float | None = None) -> None:
    """One round (or read) of a collector, for its metrics."""
    COLLECTOR_ROUNDS.labels(collector).inc()
    COLLECTOR_PUBLISHED.labels(collector).inc(published)
    COLLECTOR_FAILURES.labels(collector).inc(failed)
    if elapsed_s is not None:
        COLLECTOR_ROUND_SECONDS.labels(collector).set(elapsed_s)
    COLLECTOR_LAST_ROUND.labels(collector).set_to_current_time()


def start_metrics_server(port: int, host: str = "0.0.0.0",  # noqa: S104 - scraped from other pods
                         registry: CollectorRegistry = REGISTRY) -> int:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread; returns the bound port."""
    if not 0 <= port <= 65535:
        raise ValueError(f"metrics port {port} is out of range")
    server, _thread = _start_http_server(port, addr=host, registry=registry)
    bound: int = server.server_address[1]
    log.info("metrics on http://%s:%d/metrics", host, bound)
    return bound


# -- the stream processors ------------------------------------------------------------------

class _Message(Protocol):
    topic: str
    partition: int
    offset: int


class _Consumer(Protocol):
    def highwater(self, tp: Any) -> int: ...


def consumed(topic: str, message: _Message | None = None, consumer: _Consumer | None = None) -> None:
    """One contract message read from ``topic``; updates the lag from the consumer's watermark."""
    EVENTS.labels(topic).inc()
    if message is None or consumer is None:
        return
    try:
        highwater = consumer.highwater(getattr(message, "tp", None))
    except Exception:  # noqa: BLE001 - a metric never breaks processing (no fetch yet, rebalance)
        return
    if isinstance(highwater, int) and highwater >= 0:
        CONSUMER_LAG.labels(message.topic, str(message.partition)).set(
            max(0, highwater - message.offset - 1))


def lag(topic: str, partition: int, behind: int) -> None:
    """Messages behind the high watermark of a partition a consumer of ours just read."""
    CONSUMER_LAG.labels(topic, str(partition)).set(max(0, behind))


def dead_lettered(source_topic: str) -> None:
    DEAD_LETTERS.labels(source_topic).inc()


def detected(detections: Iterable[Any], now_ms: int | None = None) -> None:
    """Published detections: counts, latency from their event time, breaker_open per SU."""
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    for det in detections:
        kind = str(getattr(det.detection, "value", det.detection))
        DETECTIONS.labels(kind, str(getattr(det.severity, "value", det.severity))).inc()
        DETECTION_LATENCY.labels(kind).observe(max(0.0, (now - det.ts) / 1000.0))
        if kind == "breaker_open":
            su = det.evidence.get("su") if isinstance(det.evidence, dict) else None
            BREAKER_OPEN_DETECTIONS.labels(str(su or "unknown")).inc()


# -- the runbook worker ---------------------------------------------------------------------

class _DispatchStats(Protocol):
    @property
    def dispatched(self) -> int: ...
    @property
    def ignored(self) -> int: ...
    @property
    def invalid(self) -> int: ...
    @property
    def unknown(self) -> int: ...


class _Dispatcher(Protocol):
    @property
    def stats(self) -> _DispatchStats: ...


QUERY_TIMEOUT = timedelta(seconds=3)
QUERY_CONCURRENCY = 16


class RunbookMetrics:
    """Mirrors runbook state into the gauges every ``interval`` seconds.

    Runbooks by status come from Temporal's visibility (``count_workflows`` per status: a
    handful of cheap queries, whatever the number of runbooks); the breaker per SU from the
    ``state`` query of each running ``IsolationBudget`` workflow (one per SU); the runbooks
    waiting for a person from the ``status`` query of each running ``PortRemediation``
    (no search attribute carries the runbook's state, so one query per open runbook, at
    most ``max_runbooks``); the dispatch counters from the dispatcher's own stats.
    """

    def __init__(self, client: Any, *, dispatcher: _Dispatcher | None = None,
                 interval: float = 15.0, max_budgets: int = 2000,
                 max_runbooks: int = 2000) -> None:
        self.client = client
        self.dispatcher = dispatcher
        self.interval = interval
        self.max_budgets = max_budgets
        self.max_runbooks = max_runbooks
        self._dispatch_seen = {"dispatched": 0, "ignored": 0, "invalid": 0, "unknown": 0}
        self._budgets: set[tuple[str, str]] = set()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.update()
            except Exception:  # noqa: BLE001 - Temporal unreachable for a while: keep serving
                log.warning("runbook metrics update failed", exc_info=True)
            try:
                await asyncio.wait_for(stop.wait(), self.interval)
            except TimeoutError:
                pass

    async def update(self) -> None:
        self._update_dispatch()
        for status in RUNBOOK_STATUSES:
            count = await self.client.count_workflows(
                f"WorkflowType = 'PortRemediation' AND ExecutionStatus = '{status}'")
            RUNBOOKS.labels(status).set(count.count)
        await self._update_budgets()
        await self._update_needs_human()

    async def _update_needs_human(self) -> None:
        query = "WorkflowType = 'PortRemediation' AND ExecutionStatus = 'Running'"
        ids = [wf.id async for wf in self.client.list_workflows(query, limit=self.max_runbooks)]
        states = await self._query_all(ids, "status")
        waiting = sum(1 for st in states if st is not None and _get_str(st, "state")
                      == "needs_human")
        RUNBOOKS_NEEDS_HUMAN.set(waiting)
        RUNBOOKS_UNANSWERED.set(sum(1 for st in states if st is None))

    async def _query_all(self, ids: list[str], name: str) -> list[Any]:
        """Query ``name`` of each workflow, concurrently and each with a short deadline (a
        workflow whose worker is away answers only when Temporal gives up on it, and it must
        not stall every other series that long); None where it did not answer."""
        gate = asyncio.Semaphore(QUERY_CONCURRENCY)

        async def one(workflow_id: str) -> Any:
            async with gate:
                try:
                    return await self.client.get_workflow_handle(workflow_id).query(
                        name, rpc_timeout=QUERY_TIMEOUT)
                except Exception:  # noqa: BLE001 - mid-continue-as-new or no worker: next round
                    log.debug("%s of %s not answered now", name, workflow_id, exc_info=True)
                    return None

        return list(await asyncio.gather(*(one(i) for i in ids)))

    def _update_dispatch(self) -> None:
        if self.dispatcher is None:
            return
        stats = self.dispatcher.stats
        for outcome in self._dispatch_seen:
            now = int(getattr(stats, outcome))
            if now > self._dispatch_seen[outcome]:
                DISPATCH.labels(outcome).inc(now - self._dispatch_seen[outcome])
            self._dispatch_seen[outcome] = now

    async def _update_budgets(self) -> None:
        seen: set[tuple[str, str]] = set()
        query = "WorkflowType = 'IsolationBudget' AND ExecutionStatus = 'Running'"
        ids = [wf.id async for wf in self.client.list_workflows(query, limit=self.max_budgets)
               if not wf.id.startswith("railhold/")]  # a node rail's fence holders
        for state in await self._query_all(ids, "state"):
            if state is None:
                continue
            fabric, su = _budget_labels(state)
            if su is None:
                continue  # the fabric-wide budget; per-SU series only
            seen.add((fabric, su))
            set_breaker(fabric, su, limit=_get(state, "limit"), in_use=_get(state, "in_use"),
                        refused=_get(state, "refused_total"))
        for fabric, su in self._budgets - seen:
            for gauge in (BREAKER_ISOLATED, BREAKER_LIMIT, BREAKER_OPEN, BREAKER_REFUSED):
                gauge.remove(fabric, su)
        self._budgets = seen


def _get_str(state: Any, name: str) -> str | None:
    value = state.get(name) if isinstance(state, dict) else getattr(state, name, None)
    return None if value is None else str(value)


def _get(state: Any, name: str) -> int:
    value = state.get(name, 0) if isinstance(state, dict) else getattr(state, name, 0)
    return int(value or 0)


def _budget_labels(state: Any) -> tuple[str, str | None]:
    if isinstance(state, dict):
        return str(state.get("fabric", "")), state.get("su")
    return str(getattr(state, "fabric", "")), getattr(state, "su", None)


def set_breaker(fabric: str, su: str, *, limit: int, in_use: int, refused: int = 0) -> None:
    """One SU's budget: isolated ports, limit, open (in use at or past the limit), refusals."""
    BREAKER_ISOLATED.labels(fabric, su).set(in_use)
    BREAKER_LIMIT.labels(fabric, su).set(limit)
    BREAKER_OPEN.labels(fabric, su).set(1 if limit > 0 and in_use >= limit else 0)
    BREAKER_REFUSED.labels(fabric, su).set(refused)


def series_in(text: str) -> set[str]:
    """The metric family names present in an exposition (``# TYPE`` lines)."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            names.add(f"{name}_total" if kind == "counter" and not name.endswith("_total")
                      else name)
    return names
