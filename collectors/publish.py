"""The shared producer: contract events onto their contract topics through one aiokafka producer.

Every collector, the simulator and the CLI publish through ``Publisher`` so that the wire
rules live in one place: values are ``schemas.encode`` bytes, the topic comes from
``schemas.topics.topic_for_kind(event.kind)`` and the key from ``schemas.message_key``.

Delivery: the producer is idempotent with ``acks="all"`` (no duplicates from producer
retries, nothing acknowledged that the in-sync replicas do not hold). ``send`` only enqueues
into the producer's batch (``linger_ms`` lets batches fill); ``flush`` waits until every
message sent so far is acknowledged and raises ``PublishError`` if any was not. Leaving the
``async with`` block without an exception flushes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from types import TracebackType
from typing import Any

# aiokafka ships no type information (no py.typed).
import orjson
from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]
from aiokafka import codec as _codec

from schemas import Counters, columns_wire, encode, message_key
from schemas.events import Event
from schemas.topics import topic_for_kind

# aiokafka checks each message's uncompressed size against max_request_size; a topology
# snapshot of a 100k-port fabric is several MB before compression, so allow that much.
# The broker's own limit (message.max.bytes) applies to the compressed batch.
DEFAULT_MAX_REQUEST_SIZE = 16 * 1024 * 1024
DEFAULT_LINGER_MS = 10
DEFAULT_BATCH_SIZE = 512 * 1024
_COMPRESSION_AVAILABLE = {
    "lz4": _codec.has_lz4,
    "zstd": _codec.has_zstd,
    "snappy": _codec.has_snappy,
    "gzip": _codec.has_gzip,
}


_REAP_MIN = 4096  # pending delivery futures before the first scan for finished ones


class PublishError(RuntimeError):
    """A message the broker did not acknowledge, or a publisher used outside its context."""


def default_compression() -> str | None:
    """``zstd`` where aiokafka can do it (it needs cramjam), else ``gzip``.

    zstd rather than lz4 because of the topology snapshot: at the simulator's 100k-port
    preset the event is 7.7 MB of JSON, 977 KB with lz4 (within 7 % of the broker's default
    1 MiB ``message.max.bytes``) and 274 KB with zstd (benchmarks/collectors_parse.py).
    gzip is aiokafka's only codec without extra packages.
    """
    return "zstd" if _codec.has_zstd() else "gzip"


class Publisher:
    """An async context manager over one idempotent aiokafka producer.

    ``bootstrap`` is ``host:port[,host:port...]``. Keyword options: ``client_id``,
    ``linger_ms``, ``max_batch_size``, ``compression`` (``"lz4"``, ``"zstd"``, ``"gzip"``,
    ``"snappy"`` or ``None``; default zstd where available, see ``default_compression``),
    ``max_request_size``, ``request_timeout_ms``, ``columnar`` (counters as
    ``counter_columns`` messages); any other keyword goes to
    ``AIOKafkaProducer`` as it is, except that idempotence and ``acks="all"`` cannot be
    turned off.
    """

    def __init__(self, bootstrap: str, **opts: Any) -> None:
        if not isinstance(bootstrap, str) or not bootstrap.strip():
            raise ValueError("bootstrap must be a non-empty 'host:port[,host:port]' string")
        # counters as counter_columns messages (the contract's columnar form): far cheaper
        # for every consumer to decode than one object per port
        self.columnar = bool(opts.pop("columnar", False))
        compression = opts.pop("compression", default_compression())
        if compression is not None:
            check = _COMPRESSION_AVAILABLE.get(compression)
            if check is None:
                raise ValueError(f"unknown compression {compression!r}; expected one of "
                                 f"{', '.join(_COMPRESSION_AVAILABLE)} or None")
            if not check():
                raise ValueError(f"compression {compression!r} needs a codec library that is "
                                 "not installed (aiokafka uses cramjam)")
        for fixed in ("enable_idempotence", "acks", "value_serializer", "key_serializer"):
            if fixed in opts:
                raise ValueError(f"{fixed} is fixed by the publisher and cannot be set")
        self.bootstrap = bootstrap
        self._config: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "client_id": opts.pop("client_id", "fabricwatch-collector"),
            "enable_idempotence": True,
            "acks": "all",
            "linger_ms": opts.pop("linger_ms", DEFAULT_LINGER_MS),
            "max_batch_size": opts.pop("max_batch_size", DEFAULT_BATCH_SIZE),
            "max_request_size": opts.pop("max_request_size", DEFAULT_MAX_REQUEST_SIZE),
            "request_timeout_ms": opts.pop("request_timeout_ms", 30_000),
            "compression_type": compression,
            **opts,
        }
        self._producer: AIOKafkaProducer | None = None
        self._pending: list[asyncio.Future[Any]] = []
        self._reap_at = _REAP_MIN
        self.sent = 0  # messages enqueued
        self.acked = 0  # messages acknowledged, as counted by flush()

    @property
    def config(self) -> dict[str, Any]:
        """The producer configuration in force (a copy)."""
        return dict(self._config)

    async def __aenter__(self) -> Publisher:
        producer = AIOKafkaProducer(**self._config)
        try:
            await producer.start()
        except BaseException:
            await producer.stop()  # release its client even though it never connected
            raise
        self._producer = producer
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            if exc_type is None:
                await self._flush(producer)
        finally:
            await producer.stop()

    def _live(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise PublishError("the publisher is not started; use 'async with Publisher(...)'")
        return self._producer

    async def send(self, event: Event) -> None:
        """Enqueue one contract event on its topic, keyed as the contract says."""
        topic, key, value = _wire(event, self.columnar)
        await self._enqueue(topic, key, value)

    async def send_many(self, events: Iterable[Event]) -> int:
        """Enqueue several events; all are encoded before the first is enqueued.

        Returns how many were enqueued. An event that cannot be encoded raises before
        anything of this call reaches the producer.
        """
        wire = [_wire(event, self.columnar) for event in events]
        for topic, key, value in wire:
            await self._enqueue(topic, key, value)
        return len(wire)

    async def send_raw(self, topic: str, key: bytes | None, value: bytes) -> None:
        """Enqueue bytes as they are (dead letters, replays of recorded messages)."""
        if not topic:
            raise ValueError("topic is empty")
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError("value must be bytes")
        if key is not None and not isinstance(key, bytes | bytearray | memoryview):
            raise TypeError("key must be bytes or None")
        await self._enqueue(topic, None if key is None else bytes(key), bytes(value))

    async def flush(self) -> int:
        """Wait until everything sent so far is acknowledged; returns how many were."""
        return await self._flush(self._live())

    async def _enqueue(self, topic: str, key: bytes | None, value: bytes) -> None:
        producer = self._live()
        # send() waits only while the accumulator is full (backpressure), then returns the
        # delivery future; it raises at once for a message larger than max_request_size.
        future = await producer.send(topic, value=value, key=key)
        self._pending.append(future)
        self.sent += 1
        if len(self._pending) >= self._reap_at:
            await self._reap()

    async def _reap(self) -> None:
        """Drop delivered futures from the pending list, raising for a failed one."""
        still: list[asyncio.Future[Any]] = []
        failed: BaseException | None = None
        for future in self._pending:
            if not future.done():
                still.append(future)
            elif future.cancelled():
                failed = failed or PublishError("a delivery was cancelled")
            elif future.exception() is not None:
                failed = failed or future.exception()
            else:
                self.acked += 1
        self._pending = still
        # Next scan when the list has doubled: amortised O(1) per send even while the broker
        # lags far behind (a fixed threshold rescanned every undelivered future on each send).
        self._reap_at = max(_REAP_MIN, 2 * len(still))
        if failed is not None:
            raise PublishError(f"the broker did not acknowledge a message: {failed}") from failed

    async def _flush(self, producer: AIOKafkaProducer) -> int:
        await producer.flush()
        pending, self._pending = self._pending, []
        results = await asyncio.gather(*pending, return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        self.acked += len(results) - len(failures)
        if failures:
            raise PublishError(f"{len(failures)} of {len(results)} messages were not "
                               f"acknowledged; first: {failures[0]}") from failures[0]
        return len(results)


def _wire(event: Event, columnar: bool = False) -> tuple[str, bytes, bytes]:
    """(topic, key, value) of a contract event; a ``Counters`` one as ``counter_columns``
    when ``columnar``."""
    topic = topic_for_kind(event.kind).name
    key = message_key(event).encode("utf-8")
    if columnar and isinstance(event, Counters):
        return topic, key, orjson.dumps(columns_wire(event.model_dump(mode="json",
                                                                      exclude_none=True)))
    return topic, key, encode(event)
