"""Consumer lag as the demo reads it: end offsets past the group's committed offsets."""

from __future__ import annotations

from aiokafka import TopicPartition  # type: ignore[import-untyped]

from fabricwatch.demo.watch import lag_of


def test_lag_counts_uncommitted_partitions_whole_and_never_goes_negative() -> None:
    a, b, c = (TopicPartition("fabric.counters", p) for p in range(3))
    ends = {a: 100, b: 50, c: 7}
    # b never committed: all 50 are lag; c committed past a truncated end: 0, not -3
    assert lag_of(ends, {a: 90, c: 10}) == 10 + 50 + 0
    assert lag_of(ends, {a: 100, b: 50, c: 7}) == 0
    assert lag_of({}, {a: 1}) == 0
