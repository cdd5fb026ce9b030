"""Offline replay: a JSON-lines history through exactly the worker's detector code, in file order.

Operators backtest a policy change on history before rolling it out:
``fabricwatch replay --policy new.yaml history.jsonl``. A line that is not a valid contract
event is reported (line number and reason) and skipped; replay never stops on one. A
detection (or incident message) is yielded once per ``id`` (a duplicated input line that fired repeats the
identical detection, which the worker would publish again and consumers would drop).
Lines carry no broker receive time, so each ``ts`` is taken as written: the worker caps a
``ts`` at its receive time plus ``arrivalSlack`` (``schemas.acceptance.at_arrival``), which
changes only events stamped further ahead of their arrival.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator

from schemas import ContractError, Detection, Incident, decode
from schemas.policy import Policy
from streams.engine import Context, Engine

ErrorHandler = Callable[[int, ContractError], None]


def _stderr(lineno: int, error: ContractError) -> None:
    where = f" at {error.path}" if error.path else ""
    sys.stderr.write(f"line {lineno}: {error.reason}{where}; skipped\n")


def replay(lines: Iterable[bytes], policy: Policy, *, context: Context | None = None,
           on_error: ErrorHandler | None = _stderr) -> Iterator[Detection]:
    """The detections the worker would produce for ``lines`` (JSON-lines contract events)."""
    for item in replay_all(lines, policy, context=context, on_error=on_error):
        if isinstance(item, Detection):
            yield item


def replay_all(lines: Iterable[bytes], policy: Policy, *, context: Context | None = None,
               on_error: ErrorHandler | None = _stderr) -> Iterator[Detection | Incident]:
    """The detections and incidents the worker would publish for ``lines``, in order."""
    engine = Engine(policy, context)
    seen: set[str] = set()
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = decode(line)
        except ContractError as exc:
            if on_error is not None:
                on_error(lineno, exc)
            continue
        for det in engine.feed_all(event):
            if det.id not in seen:
                seen.add(det.id)
                yield det
