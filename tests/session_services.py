"""The session's services as tests get them: checked for life at each request."""

from __future__ import annotations

import signal

import pytest

from fabricwatch.stack import LocalStack

_RESTARTS_PER_SERVICE = 1  # a second death in one session is a failure, not bad luck


class SessionService:
    """One session service, checked each time a test asks for it.

    A server that ended under the session (a crash, or a signal meant for another process)
    would otherwise fail every later test with "connection refused" and no word of why: its
    exit status and the end of its log go to the session's summary, and it is started again
    on the same ports and data, once.
    """

    def __init__(self, stack: LocalStack, service: str, endings: list[str]) -> None:
        self.stack = stack
        self.service = service
        self.endings = endings  # where each ending is reported (the session's summary)
        self.restarts = 0

    def alive(self) -> LocalStack:
        code = self.stack.exited(self.service)
        if code is None:
            return self.stack
        how = (f"killed by {signal.Signals(-code).name}" if code < 0
               else f"exit status {code}")
        log = self.stack.log_path(self.service)
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log.exists() else ""
        report = f"the session's {self.service} server ended ({how}); {log} ended with:\n{tail}"
        self.endings.append(report)
        if self.restarts >= _RESTARTS_PER_SERVICE:
            pytest.fail(f"{report}\n(it had been started again once already)")
        self.restarts += 1
        self.stack.up()
        return self.stack
