"""The SIGUSR1 task dump names where each task waits."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest

from runtime import taskdump


async def _waits_on(event: asyncio.Event) -> None:
    await event.wait()


async def test_the_dump_shows_the_await_chain_of_a_waiting_task() -> None:
    event = asyncio.Event()
    task = asyncio.create_task(_waits_on(event), name="stuck-one")
    await asyncio.sleep(0)
    text = taskdump.dump_tasks()
    event.set()
    await task
    assert "--- stuck-one" in text
    assert "_waits_on" in text  # the frame it is suspended in
    assert "event.wait()" in text


async def test_sigusr1_logs_the_dump(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    taskdump.install(loop)
    try:
        with caplog.at_level(logging.WARNING, logger="runtime.taskdump"):
            os.kill(os.getpid(), signal.SIGUSR1)
            for _ in range(50):
                await asyncio.sleep(0.01)
                if caplog.records:
                    break
        assert any("task dump on SIGUSR1" in r.getMessage() for r in caplog.records)
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
