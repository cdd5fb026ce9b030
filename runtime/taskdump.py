"""Every asyncio task's await chain to the log on SIGUSR1.

A stream worker that stops moving without an error has a coroutine waiting on something
that never comes; a thread dump (py-spy) shows only an idle event loop. ``kill -USR1 PID``
logs where each task waits, so an operator can see it on a live process.
"""

from __future__ import annotations

import asyncio
import io
import logging
import signal

log = logging.getLogger(__name__)


def dump_tasks(loop: asyncio.AbstractEventLoop | None = None) -> str:
    """The stack of every pending task of ``loop`` (the running one by default)."""
    tasks = sorted(asyncio.all_tasks(loop), key=lambda t: t.get_name())
    out = io.StringIO()
    out.write(f"{len(tasks)} tasks\n")
    for task in tasks:
        out.write(f"--- {task.get_name()} {task.get_coro()!r}\n")
        task.print_stack(limit=None, file=out)  # walks the coroutine's await chain
    return out.getvalue()


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Log :func:`dump_tasks` whenever the process gets SIGUSR1."""
    def on_signal() -> None:
        log.warning("task dump on SIGUSR1:\n%s", dump_tasks(loop))

    loop.add_signal_handler(signal.SIGUSR1, on_signal)
