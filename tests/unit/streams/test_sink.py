"""The ledger sink's batching, retry and bound (with an in-process writer of the Ledger protocol)."""

from __future__ import annotations

from collections.abc import Sequence

from schemas import DeadLetter, DetectionKind, Event
from streams.common import make_detection
from streams.sink import LedgerSink


class ListLedger:
    """Keeps what it is given; fails the first ``fail`` writes like an unreachable server."""

    def __init__(self, fail: int = 0) -> None:
        self.rows: list[str] = []
        self.fail = fail
        self.closed = False

    def write(self, events: Sequence[Event | DeadLetter]) -> int:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("ledger unavailable")
        self.rows += [getattr(e, "id", "") for e in events]
        return len(events)

    def close(self) -> None:
        self.closed = True


def det(n: int) -> object:
    return make_detection(kind=DetectionKind.FLAP, fabric="lab", device="d", port=n,
                          ts=1_700_000_000_000, action="isolatePort", episode=f"flap/d:{n}/0",
                          evidence={})


async def test_batches_retries_and_closes() -> None:
    ledger = ListLedger(fail=1)
    sink = LedgerSink(lambda: ledger, max_batch=3)
    assert sink.add([det(i) for i in range(2)]) is False  # type: ignore[misc]
    assert sink.add([det(i) for i in range(2, 5)]) is True  # type: ignore[misc]
    assert await sink.flush() == 0 and sink.failures == 1  # failed: kept for a retry
    assert await sink.flush() == 3
    await sink.close()  # writes the rest, then closes the ledger
    assert ledger.rows == [f"det:flap/d:{i}/0" for i in range(5)] and ledger.closed


async def test_buffer_is_bounded() -> None:
    sink = LedgerSink(lambda: ListLedger(), max_batch=10, max_buffer=4)
    sink.add([det(i) for i in range(6)])  # type: ignore[misc]
    assert sink.dropped == 2
    assert await sink.flush() == 4
