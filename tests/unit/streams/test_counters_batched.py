"""The batched counters consumer's pure parts: the order of a fetch, the changelog store."""

from __future__ import annotations

from collections import namedtuple

from hypothesis import given
from hypothesis import strategies as st

from streams.counters.batched import ChangelogStore, in_turns

TP = namedtuple("TP", "topic partition")
Rec = namedtuple("Rec", "partition offset")


@given(st.dictionaries(st.integers(0, 11), st.integers(1, 30), max_size=12))
def test_a_fetch_is_applied_in_turns_of_one_message_per_partition(sizes: dict[int, int]
                                                                  ) -> None:
    batch = {TP("fabric.counters", p): [Rec(p, o) for o in range(n)]
             for p, n in sizes.items()}
    order = in_turns(batch)
    assert sorted(order) == sorted(r for rs in batch.values() for r in rs)  # each once
    for p in sizes:  # a partition's own order kept
        assert [r.offset for r in order if r.partition == p] == list(range(sizes[p]))
    # turn k holds the k-th record of every partition that has one, by partition
    k = 0
    for turn in range(max(sizes.values(), default=0)):
        width = sum(1 for n in sizes.values() if n > turn)
        assert [r.offset for r in order[k:k + width]] == [turn] * width
        assert [r.partition for r in order[k:k + width]] == sorted(
            p for p, n in sizes.items() if n > turn)
        k += width


def test_the_store_sends_a_key_once_per_batch_on_its_partition() -> None:
    store = ChangelogStore("t")
    store.current = 3
    store[b"a"] = b"1"
    store[b"a"] = b"2"  # written twice in the batch: sent once, the last value
    store.current = 5
    store[b"b"] = b"x"
    assert sorted(store.take_changed()) == [(b"a", b"2", 3), (b"b", b"x", 5)]
    assert store.take_changed() == []
    assert store.get(b"a") == b"2"
    store.drop({3})  # a revoked partition's states go
    assert store.get(b"a") is None and store.get(b"b") == b"x"
    store.restored(b"c", b"y", 7)
    store.restored(b"b", None, 5)  # a tombstone
    assert store.get(b"c") == b"y" and store.get(b"b") is None
    assert store.take_changed() == []  # what was read back is not sent again


def test_a_state_handed_over_as_its_encoder_is_encoded_once_as_of_the_flush() -> None:
    # a device's state written with each of its messages in a batch is encoded when the
    # flush sends it, once, with every message applied (not as of its last write)
    import orjson

    store = ChangelogStore("t")
    state = {"n": 0}
    calls = []

    def encode() -> bytes:
        calls.append(1)
        return orjson.dumps(state)

    store.current = 2
    for n in range(1, 41):
        state["n"] = n
        if n % 4 == 0:  # written with some of the messages
            store.keep(b"dev", encode)
    state["n"] = 41  # a message after its last write, applied before the flush
    assert calls == []
    assert store.get(b"dev") == b'{"n":41}'  # read back meanwhile: as of now, still to send
    assert store.take_changed() == [(b"dev", b'{"n":41}', 2)]
    assert len(calls) == 2
    state["n"] = 42  # kept as sent: equal to the changelog until written again
    assert store.get(b"dev") == b'{"n":41}' and store.take_changed() == []
    assert len(calls) == 2
    store.keep(b"dev", encode)
    store.drop({2})  # a revoked partition's pending state goes unencoded
    assert store.take_changed() == [] and len(calls) == 2
