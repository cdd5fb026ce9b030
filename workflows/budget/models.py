"""Inputs, outputs and limit arithmetic of the isolation budget (the breaker).

Two scopes share one workflow type: ``budget/{fabric}/{su}`` holds the per-SU limit
(``maxIsolatedPortsPerSU`` of the SU's ports) and ``budget/{fabric}`` the fabric-wide cap
(max(``fabric_min_ports``, ``fabric_fraction`` of all ports), the cap NVIDIA's UFM port-health
plugin applies). A port is isolated only when both grant.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


def su_budget_id(fabric: str, su: str) -> str:
    return f"budget/{fabric}/{su}"


def fabric_budget_id(fabric: str) -> str:
    return f"budget/{fabric}"


def rail_hold_id(fabric: str, node: str, rail: int | None) -> str:
    """The holders of a node's rail fence (same entity workflow, scope ``rail``, no limit)."""
    return f"railhold/{fabric}/{node}/{'all' if rail is None else rail}"


RAIL_NO_LIMIT = 1_000_000


def su_limit(fraction: float, su_ports: int) -> int:
    """Ports an SU may have isolated at once: floor(fraction × ports), at least 1.

    At least one, because with 1 % of a 64-port lab SU the floor is 0 and automation could
    never act at all; an operator who wants none sets the fraction to 0.
    """
    if fraction <= 0 or su_ports <= 0:
        return 0
    return max(1, math.floor(fraction * su_ports))


def fabric_limit(fraction: float, min_ports: int, fabric_ports: int) -> int:
    """The fabric-wide cap: max(min_ports, floor(fraction × all ports))."""
    return max(min_ports, math.floor(fraction * max(fabric_ports, 0)))


class Holder(_Model):
    holder: str  # the runbook's workflow id
    port_key: str
    granted_ts: int
    forced_by: str | None = None  # the human who approved a grant past the limit
    # the latest acquire attempt that asked for this grant (None: unknown, before attempts)
    attempt: int | None = None


class BudgetInput(_Model):
    fabric: str
    scope: Literal["su", "fabric", "rail"]
    su: str | None = None
    limit: int = 0
    limit_ts: int = 0  # when the limit was resolved (see GrantRequest.limit_ts)
    holders: list[Holder] = Field(default_factory=list)
    granted_total: int = 0
    refused_total: int = 0
    # Continue-as-new once the history reaches this many events (the server's hard limit is
    # 51,200 events / 50 MB; a budget lives for years, so it starts afresh long before).
    max_history_events: int = 2000


class GrantRequest(_Model):
    holder: str
    port_key: str
    # The requester's view of the limit, resolved from the policy and the SU's size when its
    # runbook started (``limit_ts``, ms). The most recently resolved limit wins, not the
    # latest request: a runbook started before a policy change must not put back the old
    # limit (a larger one would let the SU past the new one). 0: unstamped (older runbooks).
    limit: int
    limit_ts: int = 0
    force_by: str | None = None  # grant past the limit: a human approved
    probe: bool = False  # shadow mode: answer as if, hold nothing (nor change the limit)
    attempt: int | None = None  # the acquire activity's attempt (see ReleaseRequest)


class GrantResult(_Model):
    granted: bool
    reason: str = ""
    in_use: int = 0
    limit: int = 0
    already_held: bool = False


class ReleaseRequest(_Model):
    holder: str
    # Release only the grant this attempt of the acquire activity asked for last. A timed-out
    # attempt still running when its retry has taken both grants and isolated must not take
    # the SU grant back when its own fabric request is refused. None: release whatever is held.
    only_attempt: int | None = None


class ReleaseResult(_Model):
    released: bool
    in_use: int


class BudgetState(_Model):
    fabric: str
    scope: str
    su: str | None
    limit: int
    in_use: int
    holders: list[Holder]
    granted_total: int
    refused_total: int


class AcquireInput(_Model):
    """The runbook's request to both budgets (activity input)."""

    fabric: str
    su: str
    holder: str
    port_key: str
    su_limit: int
    fabric_limit: int
    ts: int
    limits_ts: int = 0  # when su_limit and fabric_limit were resolved (RunbookConfig)
    force_by: str | None = None
    probe: bool = False


class ReleaseInput(_Model):
    fabric: str
    su: str
    holder: str
