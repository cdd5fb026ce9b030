"""Which running jobs a cable carries, for the runbook's ticket and page.

A fabric team's first question about a ticket is "what does this touch?": the jobs whose
traffic crosses the cable (``ledger.jobs.jobs_touching``: placements and the fabric as
cabled, from the ledger). The lookup never fails a ticket: when it cannot run (no ledger
reachable from this worker, a query error) the ticket says so plainly instead of listing no
jobs, which would read as "touches nothing".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

Queryable = Any  # ledger.jobs.Queryable: anything with query(sql, params)


class LedgerJobs:
    """Job lookups over a ledger handle, opened on first use by ``connect`` (the runbook
    worker may start before the ledger's owner does)."""

    def __init__(self, connect: Callable[[], Queryable | None]) -> None:
        self._connect = connect
        self._ledger: Queryable | None = None

    async def touching(self, fabric: str, device: str, port: int, at_ms: int
                       ) -> dict[str, Any]:
        """``{"jobs": [...]}``, largest share first, or ``{"not_looked_up": reason}``."""
        from ledger.jobs import jobs_touching

        if self._ledger is None:
            self._ledger = await asyncio.to_thread(self._connect)
            if self._ledger is None:
                return {"not_looked_up": "no ledger reachable from the runbook worker"}
        try:
            jobs = await asyncio.to_thread(jobs_touching, self._ledger, fabric, device, port,
                                           at_ms=at_ms)
        except Exception as exc:  # noqa: BLE001 - a ticket must not fail on a lookup
            log.warning("job lookup for %s:%s failed: %s", device, port, exc)
            return {"not_looked_up": f"the job lookup failed: {str(exc)[:300]}"}
        return {"jobs": [j.to_dict() for j in jobs]}
