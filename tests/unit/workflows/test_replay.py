"""Replay the committed histories (tests/histories/*.json) against today's workflow code.

The ``remediation_*`` histories predate the ``cable-runbook`` patch (``workflow.patched``):
they replay down the old branch; the ``cable_*`` ones take the new, without probation (their
checks run with the port isolated); the ``probation_*`` ones take the ``probation`` patch.

The ``incident_*`` and ``cable_breaker_joins_incident`` histories were recorded with the
``incident-alerts`` patch (a budget refusal joins the SU's breaker incident).

A change to ``PortRemediation``, ``IsolationBudget`` or ``IncidentRunbook`` that would break
a running workflow (a different sequence of commands for the same history) fails here. The Replayer needs no
server: this is a unit test. A second test proves the check bites: a workflow that skips
the evidence step replays as a nondeterminism error.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner
from temporalio.workflow import NondeterminismError

from workflows.audit import TopologyAudit
from workflows.budget.workflows import IsolationBudget
from workflows.incident.workflows import IncidentRunbook
from workflows.remediation.models import RemediationInput, RemediationResult
from workflows.remediation.workflows import PortRemediation

HISTORIES = Path(__file__).resolve().parents[2] / "histories"
FILES = sorted(HISTORIES.glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, path.read_text())


def test_histories_exist() -> None:
    names = {p.stem for p in FILES}
    # recorded before the cable-runbook patch (kept: running runbooks of that time replay)
    assert {"remediation_ladder", "remediation_breaker_approve_abort", "remediation_shadow",
            "budget_su"} <= names
    # recorded with it (before the probation patch)
    assert {"cable_ladder_reflap", "cable_needs_human", "cable_found_isolated"} <= names
    # recorded with probation
    assert {"probation_slow_then_pass", "probation_soak_reflap_abort"} <= names
    # recorded with the incident-alerts patch (tests/histories/record_incidents.py)
    assert {"cable_breaker_joins_incident", "incident_stream", "incident_breaker"} <= names
    # recorded with retry-grant-within-limit (tests/histories/record_retry_grant.py)
    assert "cable_retry_within_limit" in names


def _patches(path: Path) -> set[str]:
    events = json.loads(path.read_text())["events"]
    found = set()
    for e in events:
        attrs = e.get("markerRecordedEventAttributes") or {}
        if attrs.get("markerName") == "core_patch":
            payload = attrs["details"]["patch-data"]["payloads"][0]["data"]
            found.add(json.loads(base64.b64decode(payload))["id"])
    return found


def test_the_cable_histories_took_the_patch() -> None:
    from workflows.remediation.workflows import CABLE_PATCH

    for name in ("cable_ladder_reflap", "cable_needs_human", "cable_found_isolated"):
        assert _patches(HISTORIES / f"{name}.json") == {CABLE_PATCH}
    assert _patches(HISTORIES / "remediation_ladder.json") == set()


def test_the_probation_histories_took_both_patches() -> None:
    from workflows.remediation.workflows import CABLE_PATCH, PROBATION_PATCH

    for name in ("probation_slow_then_pass", "probation_soak_reflap_abort"):
        assert _patches(HISTORIES / f"{name}.json") == {CABLE_PATCH, PROBATION_PATCH}


def test_the_breaker_history_took_the_incident_patch() -> None:
    from workflows.remediation.workflows import CABLE_PATCH, INCIDENT_PATCH

    assert _patches(HISTORIES / "cable_breaker_joins_incident.json") == {CABLE_PATCH,
                                                                        INCIDENT_PATCH}
    # the earlier cable histories replay without it (runbooks running at the upgrade)
    assert INCIDENT_PATCH not in _patches(HISTORIES / "cable_needs_human.json")


def test_the_retried_isolate_history_took_the_retry_grant_patch() -> None:
    from workflows.remediation.workflows import RETRY_GRANT_PATCH

    # an approve of a refused isolate, with the SU full by then: the new branch (asked
    # within the limit, refused, the breaker's way); the needs_human history before it
    # took the old one (a forced grant) and replays so
    assert RETRY_GRANT_PATCH in _patches(HISTORIES / "cable_retry_within_limit.json")
    assert RETRY_GRANT_PATCH not in _patches(HISTORIES / "cable_needs_human.json")


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
async def test_history_replays(path: Path) -> None:
    replayer = Replayer(workflows=[PortRemediation, IsolationBudget, TopologyAudit,
                                   IncidentRunbook],
                        data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(load(path), raise_on_replay_failure=True)
    assert result.replay_failure is None


@workflow.defn(name="PortRemediation")
class SkipsEvidence(PortRemediation):
    """Today's runbook with the evidence step removed: not replay-compatible."""

    async def _capture_evidence(self) -> None:
        return None

    @workflow.run
    async def run(self, inp: RemediationInput) -> RemediationResult:
        return await super().run(inp)


async def test_a_determinism_break_fails_replay() -> None:
    # unsandboxed: the sandbox would re-import this test module by a name it cannot find
    replayer = Replayer(workflows=[SkipsEvidence], data_converter=pydantic_data_converter,
                        workflow_runner=UnsandboxedWorkflowRunner())
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(load(HISTORIES / "remediation_ladder.json"))
