"""The simulator's run loop: step the fabric at its sampling interval and publish every message.

``run(simulator, sink, duration_s=..., speedup=...)`` paces steps at ``interval / speedup``
of wall time (``speedup=0``: as fast as it can) and hands each step's encoded messages to a
sink: ``KafkaSink`` (the shared ``collectors.publish.Publisher``), ``WriterSink`` (JSON
lines, for ``--print`` and files) or anything with ``async send(messages)``. It reports how
far generation + publishing fell behind the interval, which is what "keeps up at
100,000 ports" means.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Protocol

from sim.telemetry import Message, Simulator, StepOutput


def start_ms_for(now_ms: int, interval_ms: int, *, duration_s: float | None = None,
                 speedup: float = 1.0) -> int:
    """Where simulated time starts so that no event is stamped after the wall clock.

    A step emits ``(now, now + interval]`` stamped up to its end, and ``run`` sends the first
    step at once: so in real time the clock starts one interval back, and each step goes out
    when its interval has passed (started at ``now`` it stamped samples, and the detections
    taken from them, up to an interval ahead of every other clock, which made detection to
    isolation negative). Faster than real time with a duration it starts ``duration`` back.
    """
    if duration_s is not None and (speedup == 0 or speedup > 1):
        return now_ms - int(duration_s * 1000)
    return now_ms - interval_ms


class Sink(Protocol):
    async def send(self, messages: Sequence[Message]) -> None: ...


class KafkaSink:
    """Publishes through ``collectors.publish.Publisher`` (already entered).

    It flushes every ``flush_every`` messages: that bounds how much is unacknowledged, and
    keeps the publisher's list of pending deliveries short (the publisher rescans that list
    on every send once it holds 4,096 or more, which at 18,000 messages a step cost over a
    minute per step; flushing brings a 100k-port step to about 5 s).
    """

    def __init__(self, publisher: object, *, flush_every: int = 2000) -> None:
        self.publisher = publisher
        self.flush_every = flush_every

    async def send(self, messages: Sequence[Message]) -> None:
        send_raw = self.publisher.send_raw  # type: ignore[attr-defined]
        flush = self.publisher.flush  # type: ignore[attr-defined]
        for i, m in enumerate(messages, 1):
            await send_raw(m.topic, m.key, m.value)
            if self.flush_every and i % self.flush_every == 0:
                await flush()
        await flush()  # a step is delivered (acks=all) before the next one is generated


class WriterSink:
    """Writes each message as one JSON line (the value bytes) to a binary stream."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream

    async def send(self, messages: Sequence[Message]) -> None:
        self.stream.writelines(m.value + b"\n" for m in messages)
        self.stream.flush()


class ListSink:
    """Keeps every message (tests)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def send(self, messages: Sequence[Message]) -> None:
        self.messages.extend(messages)


@dataclass
class RunStats:
    steps: int = 0
    port_samples: int = 0
    messages: int = 0
    bytes: int = 0
    port_events: int = 0
    probes: int = 0
    wall_s: float = 0.0
    generate_s: float = 0.0
    publish_s: float = 0.0
    behind_steps: int = 0  # steps whose generate + publish took longer than the paced slot
    max_step_s: float = 0.0
    step_s: list[float] = field(default_factory=list)

    @property
    def port_samples_per_s(self) -> float:
        return self.port_samples / self.wall_s if self.wall_s else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {"steps": self.steps, "port_samples": self.port_samples,
                "messages": self.messages, "bytes": self.bytes,
                "port_events": self.port_events, "probes": self.probes,
                "wall_s": round(self.wall_s, 3), "generate_s": round(self.generate_s, 3),
                "publish_s": round(self.publish_s, 3), "behind_steps": self.behind_steps,
                "max_step_s": round(self.max_step_s, 3),
                "port_samples_per_s": round(self.port_samples_per_s, 1)}


async def run(simulator: Simulator, sink: Sink, *, duration_s: float | None = None,
              steps: int | None = None, speedup: float = 1.0,
              on_step: Callable[[StepOutput], None] | None = None,
              stop: asyncio.Event | None = None) -> RunStats:
    """Step and publish until ``duration_s`` of simulated time or ``steps`` steps (or ``stop``)."""
    if speedup < 0:
        raise ValueError("speedup must be 0 (as fast as possible) or positive")
    interval_s = simulator.interval_ms / 1000.0
    limit = steps
    if duration_s is not None:
        by_duration = max(1, int(duration_s // interval_s))
        limit = by_duration if limit is None else min(limit, by_duration)
    slot = interval_s / speedup if speedup else 0.0
    stats = RunStats()
    start = time.perf_counter()
    n = 0
    while limit is None or n < limit:
        if stop is not None and stop.is_set():
            break
        t0 = time.perf_counter()
        out = simulator.step()
        t1 = time.perf_counter()
        await sink.send(out.messages)
        t2 = time.perf_counter()
        n += 1
        stats.steps = n
        stats.port_samples += out.port_samples
        stats.messages += len(out.messages)
        stats.bytes += sum(len(m.value) for m in out.messages)
        stats.port_events += out.port_events
        stats.probes += out.probes
        stats.generate_s += t1 - t0
        stats.publish_s += t2 - t1
        stats.step_s.append(t2 - t0)
        stats.max_step_s = max(stats.max_step_s, t2 - t0)
        if slot and t2 - t0 > slot:
            stats.behind_steps += 1
        if on_step is not None:
            on_step(out)
        if slot:
            wait = start + n * slot - time.perf_counter()
            if wait > 0:
                if stop is not None:
                    try:
                        await asyncio.wait_for(stop.wait(), wait)
                    except TimeoutError:
                        pass
                else:
                    await asyncio.sleep(wait)
        else:
            await asyncio.sleep(0)  # let the producer's sender task run
    stats.wall_s = time.perf_counter() - start
    return stats


async def run_to_kafka(simulator: Simulator, bootstrap: str, **kwargs: object) -> RunStats:
    """``run`` through a ``Publisher`` on ``bootstrap``; flushes before returning."""
    from collectors.publish import Publisher

    async with Publisher(bootstrap, client_id="fabricwatch-sim") as publisher:
        t0 = time.perf_counter()
        stats = await run(simulator, KafkaSink(publisher), **kwargs)  # type: ignore[arg-type]
        await publisher.flush()
        stats.publish_s += time.perf_counter() - t0 - stats.wall_s
        stats.wall_s = time.perf_counter() - t0
    return stats
