"""The cyclic garbage collector of a long-running hot-path process (stream worker, ingest).

Such a process holds hundreds of thousands of long-lived containers (every port's state)
and allocates many short-lived ones per message (decoded columns, samples, outputs), freed
by reference counting, not by the collector. With CPython's default thresholds (700, 10,
10) the young generation is collected every 700 net allocations and, as the states grow,
full collections walk all of them: measured in-process on the host-message path, the
collector took 0.78 s of 3.4 s (~65 us a message) against 0.08 s with a young threshold
of 50,000 (``benchmarks/host_path.py``'s messages, ``BENCHMARKS.md``). Cycles are still
collected, only in larger steps; objects alive at start-up (modules, the policy, the plan)
are frozen out of every collection.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)

# Older generations at CPython's ratio of ten to one, and one more order for the oldest:
# a full collection walks every state, and the states are not garbage.
MIDDLE_RATIO = 10
OLDEST_RATIO = 100


def tune(young: int) -> None:
    """Collect the young generation every ``young`` allocations (0: CPython's defaults) and
    freeze what is alive now."""
    if young <= 0:
        return
    gc.collect()
    gc.freeze()  # start-up's objects: never garbage, never walked again
    gc.set_threshold(young, MIDDLE_RATIO, OLDEST_RATIO)
    log.info("garbage collector: young threshold %d, %d objects frozen", young,
             gc.get_freeze_count())
