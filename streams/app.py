"""The Faust app: topics, changelogged tables, the detections/DLQ/ledger outputs, the agents.

``StreamsApp(settings, policy)`` builds one faust-streaming app (aiokafka driver) against
``settings.kafka.bootstrap_servers``. Each input topic has one thin agent
(``streams/<detector>/agent.py``) that decodes raw bytes with ``schemas.decode``, loads the
key's state from a table, calls the pure detector (through ``streams.engine.Engine``, the
same code ``fabricwatch replay`` runs) and writes state, detections and dead letters back.

Tables (``rocksdb://`` under ``settings.state_dir/streams``, changelogged to Kafka, so a
restarted or rebalanced worker recovers them), keyed like their source topic:

* ``flap`` by port: ``fabric.port-events`` plus the internal ``counter-downs`` topic, which
  the counters agent fills with link_downed increases re-keyed from device to port (both
  topics have the same partition count, so Faust assigns them together);
* ``counters`` by device, ``probes`` by rail, ``topology`` by fabric, ``sm`` by fabric
  (``fabric.sm``: the subnet manager's sweeps, state and trap storms);
* ``stale`` by fabric and counters partition (``streams/stale/agent.py``: each partition's
  slice of the fabric-wide state the worker keeps in memory);
* ``breaker`` by SU, fed by the internal ``breaker`` topic (isolating detections and
  ``fabric.actions`` records re-keyed by SU);
* ``correlate`` by fabric, the incident correlator (``streams/incidents/agent.py``), fed by
  the internal ``correlate`` topic (port events, action records and every detection
  re-keyed by fabric, a tick per second), ``fabric.topology`` and ``fabric.maintenance``.

A consumer offset is committed only once the changelog records of the messages before it
have left the producer's buffer (``streams.transport``: Faust's own commit could pass them,
and a kill -9 then restart from a state lacking those messages). Every stream passes its
events through the membership fence first (``streams.fence``): a worker that stood still
half a session applies nothing until it knows whether the group still has it.

Every detection passes through the correlator before it is published (``publish`` sends it
there, the correlator calls ``emit``): it carries ``incident`` / ``maintenance`` where one
covers it, and only one carrying neither reaches the breaker. Incidents go to
``fabric.incidents``.

Agent groups (``agents``): ``all`` (one worker runs every agent), or the trap path apart
from the rest, one process of each with the same ``app_id``: ``traps`` (flap, the
correlator and the breaker, which reads the SU sizes the correlator learns) and ``rest``
(counters with the stale detector it feeds, probes, degraded-link, SM, topology diff). A
counters backlog then cannot hold a trap back: the two run on their own event loops and
consumer groups (``{app_id}-traps``, ``{app_id}-rest``: Faust ids, so tables and
changelogs), and meet on the internal topics, which keep the ``{app_id}.`` prefix.

With ``settings.streams.counters_batched`` the counters and stale agents (and their tables)
are not declared: ``streams.counters.batched`` consumes ``fabric.counters`` itself, in
batches, with its own group and changelogs, beside this app's other agents.

Delivery is at least once. Every state remembers which messages it has applied (event ids
for flap, the last message ids per key elsewhere) and a redelivered message yields exactly
the detections it yielded the first time, so a crash between deciding and publishing loses
nothing and duplicates carry the same ``id``/``episode``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import faust

from runtime import metrics, taskdump
from runtime.settings import Settings
from schemas import (
    ContractError,
    CountersMessage,
    DeadLetter,
    Detection,
    Event,
    dead_letter,
    encode,
)
from schemas import topics as registry
from schemas.acceptance import TimeBounds, accept, at_arrival
from schemas.policy import Policy
from streams.breaker.logic import accounted
from streams.engine import Context, Engine
from streams.fence import MembershipFence, fenced_stream, start_ticker
from streams.probes.pins import Pins
from streams.sink import LedgerSink, LedgerWriter
from streams.stale.logic import StreamReport
from streams.transport import install_worker_transport, retry_kafka

log = logging.getLogger(__name__)

APP_ID = "fabricwatch-streams"  # also the consumer group and the internal topics' prefix
# Topology messages read back per partition at start to seed the probe routes: a partition
# carries the snapshots of the fabrics hashed to it, the newest of each is what counts.
ROUTE_SEED_MESSAGES = 16
PINS_REFRESH_S = 60.0  # a pin a person just made is judged by within a minute
# The agent modules of each group (streams/<name>/agent.py; topology: the diff agent).
TRAP_AGENTS = frozenset({"flap", "incidents", "breaker"})
REST_AGENTS = frozenset({"counters", "stale", "probes", "degraded_link", "sm", "topology"})
AGENT_GROUPS: dict[str, frozenset[str]] = {"all": TRAP_AGENTS | REST_AGENTS,
                                           "traps": TRAP_AGENTS, "rest": REST_AGENTS}


def partitions_of(settings: Settings, topic: registry.Topic) -> int:
    return settings.kafka.partitions.get(topic.name, topic.partitions)


def broker_urls(bootstrap: str) -> list[str]:
    return [f"kafka://{h.strip()}" for h in bootstrap.split(",") if h.strip()]


def instance_id(settings: Settings, app_id: str, worker_index: int) -> str | None:
    """The worker's static group membership id (None: dynamic membership)."""
    configured = settings.streams.instance_id
    if configured is not None:
        return configured or None
    return f"{app_id}-{socket.gethostname()}-{worker_index}"[:249]


class StreamsApp:
    """One worker's Faust app with the detectors wired in."""

    def __init__(self, settings: Settings, policy: Policy, *, context: Context | None = None,
                 ledger: bool = True, worker_index: int = 0,
                 app_id: str = APP_ID, agents: str = "all") -> None:
        if agents not in AGENT_GROUPS:
            raise ValueError(f"agents {agents!r}: one of {sorted(AGENT_GROUPS)}")
        self.agents = AGENT_GROUPS[agents]
        # counters (and the stale detector they feed) off Faust's stream, in batches
        self.batched = settings.streams.counters_batched and "counters" in self.agents
        # a group apart is its own Faust app (consumer group, tables); "all" keeps app_id
        faust_id = app_id if agents == "all" else f"{app_id}-{agents}"
        self.settings = settings
        self.policy = policy
        # The cable plan (FABRICWATCH_PLAN_PATH): what degraded-link judges widths and
        # speeds against, and what the topology diff agent checks snapshots against.
        self.plan: Any = None
        if settings.plan_path is not None:
            from streams.breaker.logic import ports_per_su
            from streams.topology.plan import (
                PlanError,
                expectation_from_plan,
                load_plan_file,
                media_from_plan,
                uplinks_from_plan,
            )

            self.plan = load_plan_file(settings.plan_path)  # PlanError: the caller's exit 2
            if not self.plan.links:  # a placeholder: checks against it would pass unseen
                raise PlanError(f"{settings.plan_path}: the cable plan lists no cable; give "
                                "the fabric's plan, or no FABRICWATCH_PLAN_PATH")
            if "fabric" not in settings.model_fields_set:
                # The plan is one fabric's, named by FABRICWATCH_FABRIC alone: on the default
                # name the events of the real fabric would be judged, unseen, without it
                # (no miswire, degraded-link or hot-uplink check, no plan SU sizes).
                raise PlanError(f"{settings.plan_path}: the cable plan is one fabric's; set "
                                "FABRICWATCH_FABRIC to the name its events carry (the "
                                f"default {settings.fabric!r} is not assumed)")
            if context is None:
                from streams.probes.paths import ProbeRoutes

                # the plan's cabling routes probes until a discovered topology is seen
                context = Context(expectation=expectation_from_plan(self.plan),
                                  paths=ProbeRoutes.from_links(
                                      (x.a_device, x.a_port, x.b_device, x.b_port)
                                      for x in self.plan.links),
                                  uplinks=uplinks_from_plan(self.plan),
                                  media=media_from_plan(self.plan),
                                  ports_per_su=ports_per_su(
                                      end for link in self.plan.links
                                      for end in ((link.a_device, link.a_port),
                                                  (link.b_device, link.b_port))),
                                  fabric=settings.fabric)
        self.engine = Engine(policy, context)
        # Pinned probe baselines, read from the ledger at start and every PINS_REFRESH_S.
        self.pins = Pins()
        if ledger and self.engine.context.pinned is None:
            self.engine.context.pinned = self.pins
        self.bounds = TimeBounds.from_policy(policy)
        self.datadir = (Path(settings.state_dir) / "streams" / faust_id
                        / f"worker-{worker_index}")
        self.datadir.mkdir(parents=True, exist_ok=True)
        # Events wait while a stall may have cost the membership (streams.fence)
        self.fence = MembershipFence(settings.streams.session_timeout_s,
                                     settings.streams.heartbeat_interval_s)
        self.app = faust.App(
            faust_id,
            broker=broker_urls(settings.kafka.bootstrap_servers),
            store="rocksdb://",
            datadir=str(self.datadir),
            web_enabled=False,
            key_serializer="raw",
            value_serializer="raw",
            consumer_auto_offset_reset="earliest",
            topic_replication_factor=settings.streams.topic_replication_factor,
            table_standby_replicas=settings.streams.standby_replicas,
            stream_wait_empty=False,
            # The consumer hands every partition's messages to the agents through bounded
            # queues and stops fetching when one is full: a deep counters queue would hold
            # traps back behind seconds of counters. 256 is ~0.25 s of counters work.
            stream_buffer_maxsize=256,
            producer_acks=-1,
            producer_linger_ms=5,
            producer_compression_type="lz4",  # changelogs of JSON states shrink ~5x
            # A whole-fabric state (every degraded link end of a snapshot) can pass 1 MiB;
            # the local broker accepts 64 MiB batches (deploy/kafka/config).
            producer_max_request_size=64 * 1024 * 1024,
            broker_commit_interval=1.0,
            broker_session_timeout=settings.streams.session_timeout_s,
            broker_heartbeat_interval=settings.streams.heartbeat_interval_s,
            consumer_group_instance_id=instance_id(settings, faust_id, worker_index),
            Stream=fenced_stream(self.fence),
        )
        install_worker_transport(self.app)
        start_ticker(self.app, self.fence)
        self.n_port = n_port = partitions_of(settings, registry.PORT_EVENTS)

        def topic(name: str, partitions: int | None = None, internal: bool = False) -> Any:
            return self.app.topic(name, key_type=bytes, value_type=bytes,
                                  key_serializer="raw", value_serializer="raw",
                                  partitions=partitions, internal=internal)

        self.port_events = topic(registry.PORT_EVENTS.name)
        self.counters = topic(registry.COUNTERS.name)
        self.probes = topic(registry.PROBES.name)
        self.topology = topic(registry.TOPOLOGY.name)
        self.actions = topic(registry.ACTIONS.name)
        self.detections = topic(registry.DETECTIONS.name)
        self.dlq = topic(registry.DLQ.name)
        self.incidents = topic(registry.INCIDENTS.name)
        self.sm = topic(registry.SM.name)
        self.counter_downs = topic(f"{app_id}.counter-downs", n_port, internal=True)
        self.breaker = topic(f"{app_id}.breaker", 1, internal=True)
        self.correlate = topic(f"{app_id}.correlate", 1, internal=True)
        self.worker_index = worker_index
        self.fabrics_seen: set[str] = set()  # the fabrics this worker ticks the clock of

        def table(name: str, partitions: int, agent: str) -> Any:
            if agent not in self.agents:
                return None  # another group's: declaring it would recover it here too
            # bytes types make Faust pick the raw codec for the store and the changelog:
            # the value is our own orjson, decoded once by us.
            return self.app.Table(name, default=None, partitions=partitions, key_type=bytes,
                                  value_type=bytes)

        self.flap_table = table("flap", n_port, "flap")
        self.counters_table = (None if self.batched else
                               table("counters", partitions_of(settings, registry.COUNTERS),
                                     "counters"))
        self.probes_table = table("probes", partitions_of(settings, registry.PROBES), "probes")
        self.topology_table = table("topology", partitions_of(settings, registry.TOPOLOGY),
                                    "degraded_link")
        self.breaker_table = table("breaker", 1, "breaker")
        self.correlate_table = table("correlate", 1, "incidents")
        self.sm_table = table("sm", partitions_of(settings, registry.SM), "sm")
        self.sink: LedgerSink | None = LedgerSink(self._open_ledger) if ledger else None
        # Called by the counters agent with each decoded counters message and its
        # partition (the stale detector), so that a message is decoded once.
        self.counters_observers: list[Callable[[CountersMessage, int,
                                                list[Awaitable[Any]] | None,
                                                Sequence[StreamReport]],
                                               Awaitable[None]]] = []
        self.batched_counters: Any = None
        if self.batched:
            from streams.counters.batched import BatchedCounters

            self.batched_counters = BatchedCounters(
                self, faust_id, instance_id(settings, faust_id, worker_index))
        self.stats: dict[str, float] = {"events": 0, "samples": 0, "detections": 0,
                                        "dead_letters": 0, "persisted": 0, "persist_ms": 0.0,
                                        "counters_ms": 0.0, "incidents": 0}
        self._register()

    async def ensure_topics(self) -> None:
        """Create the internal topics (and any missing contract topic) before consuming.

        Faust declares only the topics its agents subscribe to by object; ours are sent to
        as well, and a consumer subscribed to a topic that does not exist yet only logs.
        """
        wanted = {self.counter_downs.get_topic_name(): self.n_port,
                  self.breaker.get_topic_name(): 1, self.correlate.get_topic_name(): 1}
        contract = set()
        for t in registry.ALL_TOPICS:
            wanted[t.name] = partitions_of(self.settings, t)
            contract.add(t.name)
        # Changelogs too: Faust declares them concurrently with the first table writes,
        # and a write before its changelog exists fails the partition check.
        compacted = set()
        for table in self.app.tables.values():
            name = table.changelog_topic.get_topic_name()
            wanted[name] = table.partitions or self.n_port
            compacted.add(name)
        if self.batched_counters is not None:  # its own changelogs, as Faust's tables have
            for name in self.batched_counters.changelogs:
                wanted[name] = partitions_of(self.settings, registry.COUNTERS)
                compacted.add(name)
        # A worker (re)started while one broker of a cluster is down: the admin client may
        # pick that broker for its requests and fail; another try (a new client) reaches a
        # live one. Any Kafka error is tried again, as it always was here.
        await retry_kafka("creating the topics",
                          lambda: self._create_topics(wanted, contract, compacted))

    async def _create_topics(self, wanted: dict[str, int], contract: set[str],
                             compacted: set[str]) -> None:
        from aiokafka.admin import (  # type: ignore[import-untyped]  # no py.typed there
            AIOKafkaAdminClient,
            NewTopic,
        )

        from schemas.acceptance import TIMESTAMP_CONFIG

        admin = AIOKafkaAdminClient(bootstrap_servers=self.settings.kafka.bootstrap_servers)
        await admin.start()
        try:
            existing = set(await admin.list_topics())
            # a contract topic stamps records with the broker's receive time, as the local
            # stack creates them (schemas.acceptance)
            # as many replicas as the internal topics Faust creates (3 on a cluster)
            replicas = self.settings.streams.topic_replication_factor
            missing = [NewTopic(name, n, replicas, topic_configs={"cleanup.policy": "compact"}
                                if name in compacted else dict(TIMESTAMP_CONFIG)
                                if name in contract else {})
                       for name, n in wanted.items() if name not in existing]
            if missing:
                response = await admin.create_topics(missing)
                log.info("created topics %s: %s", [t.name for t in missing], response)
        finally:
            await admin.close()

    async def seed_routes(self, per_partition: int = ROUTE_SEED_MESSAGES,
                          timeout_s: float = 10.0) -> int:
        """Teach the probe routes the newest topology snapshots (the probes agent calls it
        before its first probe).

        The routes live in memory (``Engine.routes``): a restarted worker, or one whose
        partitions do not include the topology's, would otherwise route no probe until the
        next snapshot reaches it. Reads the last ``per_partition`` messages of every
        ``fabric.topology`` partition (several fabrics share one); returns how many
        snapshots were taken. A broker that does not answer leaves the routes empty (the
        probes then fall back to their endpoints, which never isolate).
        """
        from aiokafka import (  # type: ignore[import-untyped]  # no py.typed there
            AIOKafkaConsumer,
            TopicPartition,
        )
        from aiokafka.admin import AIOKafkaAdminClient

        from schemas import Topology, decode

        bootstrap = self.settings.kafka.bootstrap_servers
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    group_id=None)
        taken = 0
        try:
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
            await admin.start()
            try:
                described = await admin.describe_topics([registry.TOPOLOGY.name])
            finally:
                await admin.close()
            parts = [TopicPartition(registry.TOPOLOGY.name, int(p["partition"]))
                     for t in described if t.get("topic") == registry.TOPOLOGY.name
                     and not t.get("error_code") for p in t.get("partitions", [])]
            await consumer.start()
            if not parts:
                log.info("probe routes: no %s partitions to seed from", registry.TOPOLOGY.name)
                return 0
            consumer.assign(sorted(parts))
            ends = await consumer.end_offsets(parts)
            starts = await consumer.beginning_offsets(parts)
            want = 0
            for tp in parts:
                first = max(starts[tp], ends[tp] - per_partition)
                consumer.seek(tp, first)
                want += ends[tp] - first
            deadline = time.monotonic() + timeout_s
            seen = 0
            while seen < want and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                for tp, records in batch.items():
                    for record in records:
                        if record.offset >= ends[tp]:
                            continue
                        seen += 1
                        try:
                            event = decode(record.value or b"")
                        except ContractError:
                            continue  # the agent dead-letters it when it gets there
                        if isinstance(event, Topology):
                            self.engine.routes.update(event)
                            taken += 1
        except Exception as exc:  # the broker's or the network's: start without them
            log.warning("probe routes not seeded from %s: %s", registry.TOPOLOGY.name, exc)
        finally:
            await consumer.stop()
        log.info("probe routes seeded from %d topology snapshot(s)", taken)
        return taken

    def _pins_of(self, store: Any) -> list[Any]:
        from ledger.baselines import current

        fabrics = sorted({self.settings.fabric, *self.fabrics_seen})
        return [b for fabric in fabrics for b in current(store, fabric)]

    def load_pins(self) -> int:
        """Read the pinned baselines before consuming (blocking; nothing else runs yet).
        A ledger that cannot be read leaves none: probes are then judged by their own or
        learned baselines, as without a ledger."""
        if self.sink is None or self.engine.context.pinned is not self.pins:
            return 0
        try:
            self.pins.replace(self.sink.read_blocking(self._pins_of))
        except Exception as exc:  # the ledger's errors, chdb's, the network's
            log.warning("pinned baselines not read: %s", exc)
        log.info("pinned probe baselines: %d", len(self.pins))
        return len(self.pins)

    async def refresh_pins(self) -> None:
        if self.sink is None or self.engine.context.pinned is not self.pins:
            return
        try:
            self.pins.replace(await self.sink.read(self._pins_of))
        except Exception as exc:
            log.warning("pinned baselines not refreshed (keeping %d): %s", len(self.pins), exc)

    def _open_ledger(self) -> LedgerWriter:
        from ledger import open_ledger

        return open_ledger(self.settings)

    def _register(self) -> None:
        from streams.breaker import agent as breaker_agent
        from streams.counters import agent as counters_agent
        from streams.degraded_link import agent as topology_agent
        from streams.flap import agent as flap_agent
        from streams.incidents import agent as incidents_agent
        from streams.probes import agent as probes_agent
        from streams.sm import agent as sm_agent
        from streams.stale import agent as stale_agent

        modules = {"flap": flap_agent, "counters": counters_agent, "probes": probes_agent,
                   "degraded_link": topology_agent, "breaker": breaker_agent,
                   "stale": stale_agent, "incidents": incidents_agent, "sm": sm_agent}
        batched = {"counters", "stale"} if self.batched else set()
        for name, module in modules.items():
            if name in self.agents and name not in batched:
                module.register(self)
        if self.batched_counters is not None:
            self._register_batched(self.batched_counters)
        # the topology area's diff agent (miswire, missing, ...)
        if self.plan is not None and "topology" in self.agents:
            from streams.topology import agent as topology_diff_agent

            topology_diff_agent.register_streams(self, self.plan)

        @self.app.timer(interval=1.0)  # type: ignore[untyped-decorator]
        async def flush_ledger() -> None:
            if self.sink is not None:
                await self.sink.flush()

        async def close_sink(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
            if self.sink is not None:  # what is buffered goes to the ledger before exit
                await self.sink.close()

        self.app.on_before_shutdown.connect(close_sink)

        @self.app.timer(interval=PINS_REFRESH_S)  # type: ignore[untyped-decorator]
        async def refresh_pins() -> None:
            await self.refresh_pins()

        @self.app.timer(interval=5.0)  # type: ignore[untyped-decorator]
        async def report() -> None:
            log.info("streams: %s", self.stats)

        @self.app.task  # type: ignore[untyped-decorator]
        async def dump_on_sigusr1() -> None:
            taskdump.install(asyncio.get_running_loop())


    def _register_batched(self, consumer: Any) -> None:
        running: list[asyncio.Task[None]] = []

        @self.app.task  # type: ignore[untyped-decorator]
        async def batched_counters() -> None:
            running.append(asyncio.current_task())  # type: ignore[arg-type]
            try:
                await consumer.run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the worker cannot go on without its counters
                log.exception("counters: the batched consumer failed; the worker stops")
                await self.app.crash(exc)

        async def stop_batched(sender: Any, /, *args: Any, signal: Any, **kwargs: Any
                               ) -> None:
            await consumer.stop()
            for task in running:  # its last batch committed, its clients closed
                done, _ = await asyncio.wait([task], timeout=10)
                if not done:  # stuck in a fetch or a restore: its clients close on cancel
                    log.warning("counters: the batched consumer did not stop in 10 s; "
                                "cancelled (its uncommitted batch is read again)")
                    task.cancel()
                    await asyncio.wait([task], timeout=5)

        self.app.on_before_shutdown.connect(stop_batched)

    # -- what agents share -----------------------------------------------------------------

    async def decode(self, event: Any, topic: registry.Topic) -> Event | None:
        """The contract event in a Faust event, or None after dead-lettering it."""
        raw = event.value if isinstance(event.value, bytes) else b""
        metrics.consumed(topic.name, event.message, self.app.consumer)
        stamp = getattr(event.message, "timestamp", None)  # the broker's, in seconds
        received = round(stamp * 1000) if stamp else None
        return await self.accept(topic, raw, received, event.message)

    async def accept(self, topic: registry.Topic, raw: bytes, received: int | None,
                     message: Any, pending: list[Awaitable[Any]] | None = None
                     ) -> Event | None:
        """The contract event in ``raw`` (received at ``received`` ms, the broker's
        stamp), or None after dead-lettering it. ``message``: its topic, partition and
        offset."""
        try:
            obj = accept(topic, raw, received_ms=received, bounds=self.bounds)
        except ContractError as exc:
            await self.dead_letter(raw, exc, message, pending)
            return None
        # no later than its arrival (+ slack): one message stamped ahead cannot move "newest"
        return at_arrival(obj, received, self.bounds)

    async def dead_letter(self, raw: bytes, error: ContractError, message: Any,
                          pending: list[Awaitable[Any]] | None = None) -> None:
        record = dead_letter(raw, error, source_topic=message.topic,
                             partition=message.partition, offset=message.offset)
        self.stats["dead_letters"] += 1
        metrics.dead_lettered(message.topic)
        log.warning("dead letter %s[%s]@%s: %s", message.topic, message.partition,
                    message.offset, error)
        fut = await self.dlq.send(key=message.topic.encode(), value=encode(record))
        if pending is not None:
            pending.append(fut)
        self._to_ledger([record])

    async def failed(self, raw: bytes, exc: Exception, message: Any,
                     pending: list[Awaitable[Any]] | None = None) -> None:
        """A message our code could not process: dead-letter it and carry on."""
        log.exception("processing %s[%s]@%s failed", message.topic, message.partition,
                      message.offset)
        await self.dead_letter(raw, ContractError(f"processing failed: {exc!r}"[:500]),
                               message, pending)

    async def publish(self, detections: Sequence[Detection],
                      pending: list[Awaitable[Any]] | None = None) -> None:
        """Detections to the correlator, which annotates them and calls ``emit``;
        ``pending`` collects the sends' delivery futures."""
        for det in detections:
            await self.forward(det.fabric, encode(det), pending)

    async def forward(self, fabric: str, data: bytes,
                      pending: list[Awaitable[Any]] | None = None) -> None:
        """A contract message (port event, action record, detection) to the correlator."""
        if (fabric not in self.fabrics_seen and self.plan is not None
                and fabric != self.settings.fabric):
            # said once: a worker whose FABRICWATCH_FABRIC is not its plan's fabric judges
            # that fabric without the plan's expectations, routes and uplinks
            log.warning("fabric %r is judged without the cable plan, which describes "
                        "FABRICWATCH_FABRIC %r", fabric, self.settings.fabric)
        self.fabrics_seen.add(fabric)
        fut = await self.correlate.send(key=fabric.encode(), value=data)
        if pending is not None:
            pending.append(fut)

    async def emit(self, detections: Sequence[Detection]) -> None:
        """Detections to fabric.detections (key device:port), the breaker (those that
        belong to no incident or maintenance window), and the ledger."""
        if not detections:
            return
        su_of = self.engine.context.su_of
        for det in detections:
            data = encode(det)
            await self.detections.send(key=det.key.encode(), value=data)
            if accounted(det):
                su = su_of(det.device)
                if su is not None:
                    await self.breaker.send(key=su.encode(), value=data)
        self.stats["detections"] += len(detections)
        metrics.detected(detections)
        self._to_ledger(detections)

    def _to_ledger(self, events: Sequence[Detection | DeadLetter]) -> None:
        if self.sink is not None and self.sink.add(events):
            self.app.loop.create_task(self.sink.flush())

    def now_ms(self) -> int:
        return int(time.time() * 1000)
