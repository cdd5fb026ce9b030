"""The commit gate passes an offset only once the records queued before it are handed on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.commit_gate import CommitGate


def test_offsets_wait_for_the_records_queued_before_them() -> None:
    gate: CommitGate[str] = CommitGate()
    gate.offer({"a": 10}, mark=5)
    gate.offer({"a": 20, "b": 3}, mark=9)
    assert gate.ready(4) == {}  # the first commit's records are not all handed on
    assert len(gate) == 2 and gate.last_mark == 9
    assert gate.ready(7) == {"a": 10}
    assert gate.ready(9) == {"a": 20, "b": 3}
    assert not gate and gate.last_mark == 0
    assert gate.ready(100) == {}


def test_several_ready_commits_pass_as_one_with_the_highest_offset_per_partition() -> None:
    gate: CommitGate[str] = CommitGate()
    gate.offer({"a": 10, "b": 7}, mark=1)
    gate.offer({"a": 12}, mark=2)
    gate.offer({"c": 1}, mark=8)
    assert gate.ready(2) == {"a": 12, "b": 7}
    assert len(gate) == 1


def test_revoked_partitions_are_forgotten_and_the_rest_still_wait() -> None:
    gate: CommitGate[str] = CommitGate()
    gate.offer({"a": 10, "b": 7}, mark=3)
    gate.offer({"b": 9}, mark=4)
    gate.forget({"b"})
    assert len(gate) == 1
    assert gate.ready(4) == {"a": 10}


def test_nothing_offered_is_nothing_kept_and_marks_only_grow() -> None:
    gate: CommitGate[str] = CommitGate()
    gate.offer({}, mark=3)
    assert not gate
    gate.offer({"a": 1}, mark=3)
    with pytest.raises(ValueError, match="before the last"):
        gate.offer({"a": 2}, mark=2)


@given(st.lists(st.tuples(st.integers(0, 5), st.dictionaries(st.sampled_from("abc"),
                                                               st.integers(0, 1000),
                                                               max_size=3)),
                max_size=12),
       st.lists(st.integers(0, 40), max_size=12))
def test_what_passes_is_exactly_what_the_handed_on_records_cover(
        steps: list[tuple[int, dict[str, int]]], handed_at: list[int]) -> None:
    """Against the plain rule: a commit's offsets pass at the first ask whose handed-on
    count reaches its mark, and never before."""
    gate: CommitGate[str] = CommitGate()
    offered: list[tuple[int, dict[str, int]]] = []
    mark = 0
    for grow, offsets in steps:
        mark += grow
        gate.offer(offsets, mark)
        if offsets:
            offered.append((mark, offsets))
    handed = 0
    for more in handed_at:
        handed = max(handed, more)
        got = gate.ready(handed)
        due = [o for m, o in offered if m <= handed]
        offered = [(m, o) for m, o in offered if m > handed]
        want: dict[str, int] = {}
        for offsets in due:
            for key, offset in offsets.items():
                want[key] = max(want.get(key, -1), offset)
        assert got == want
    assert len(gate) == len(offered)
