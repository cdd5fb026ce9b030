"""The publisher's bookkeeping of undelivered futures stays linear while the broker lags."""

from __future__ import annotations

import asyncio
from typing import Any

from collectors.publish import Publisher


class _LaggingProducer:
    """Accepts sends and acknowledges nothing until told: a broker far behind."""

    def __init__(self) -> None:
        self.futures: list[asyncio.Future[Any]] = []

    async def send(self, topic: str, value: bytes, key: bytes | None) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.futures.append(future)
        return future

    async def flush(self) -> None:
        for future in self.futures:
            if not future.done():
                future.set_result(None)


async def test_reaping_is_amortised_while_nothing_is_acknowledged() -> None:
    publisher = Publisher("127.0.0.1:9")
    producer = _LaggingProducer()
    publisher._producer = producer  # type: ignore[assignment]  # noqa: SLF001
    scans = 0
    original = publisher._reap  # noqa: SLF001

    async def counting_reap() -> None:
        nonlocal scans
        scans += 1
        await original()

    publisher._reap = counting_reap  # type: ignore[method-assign]  # noqa: SLF001
    for _ in range(20_000):
        await publisher.send_raw("t", None, b"x")
    # 4096, 8192, 16384: three scans for 20k undelivered sends, not one per send past 4096.
    assert scans == 3
    assert await publisher.flush() == 20_000
