"""``fabricwatch incident ...`` as operators run it, against a ``fabricwatch runbook-worker``
process on the real broker and Temporal, with a real Alertmanager as its receiver and the
alerts file beside it: an incident of 50 ports published to fabric.incidents is one runbook
and one alert; ``incident list`` / ``show`` show it and its members, ``ack`` acknowledges,
the stream's ``closed`` message resolves it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from collectors.publish import Publisher
from fabricwatch.alertmanager import AlertmanagerUnavailable, LocalAlertmanager, build
from fabricwatch.stack_config import free_ports
from schemas.events import Incident, IncidentCause
from workflows.adapters.notify import AlertmanagerNotifier, read_alerts_file

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]


def _alertmanager(tmp_path: Path) -> LocalAlertmanager:
    try:
        am = LocalAlertmanager(build(), free_ports(1)[0], tmp_path / "am").start()
    except AlertmanagerUnavailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"Alertmanager: {exc} (CI=true: this check must run)")
        pytest.skip(f"Alertmanager: {exc}")
    return am


async def test_incident_commands_against_a_worker_process(
        wf_env: WorkflowEnvironment, kafka_bootstrap: str, tmp_path: Path) -> None:
    am = _alertmanager(tmp_path)
    target = wf_env.client.service_client.config.target_host
    fabric = f"cli{uuid.uuid4().hex[:6]}"
    inc = f"reboot-{uuid.uuid4().hex[:6]}"
    alerts = tmp_path / "alerts.jsonl"
    env = {**os.environ, "FABRICWATCH_STATE_DIR": str(tmp_path / "state"),
           "FABRICWATCH_FABRIC": fabric, "FABRICWATCH_TEMPORAL__ADDRESS": target,
           "FABRICWATCH_TEMPORAL__TASK_QUEUE": f"q-{fabric}",
           "FABRICWATCH_KAFKA__BOOTSTRAP": kafka_bootstrap}
    cli = [sys.executable, "-c", "from fabricwatch.cli import main; main()"]
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen([*cli, "runbook-worker", "--alertmanager", am.url,  # noqa: ASYNC220
                               "--alerts-file", str(alerts)],
                              cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=60, check=False)

    async def wait_for(args: tuple[str, ...], text: str, within: float = 90) -> str:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            out = await asyncio.to_thread(run, *args)
            if text in out.stdout:
                return out.stdout
            await asyncio.sleep(0.5)
        raise AssertionError(f"{text!r} never appeared; worker log:\n"
                             f"{(tmp_path / 'worker.log').read_text()[-3000:]}")

    members = [f"spine-03:{i}" for i in range(1, 51)]
    now = int(time.time() * 1000)

    def event(state: str, ts: int, ended: int | None = None) -> Incident:
        return Incident(id=f"{inc}-{state}", ts=ts, fabric=fabric, source="correlator",
                        incident=inc, cause=IncidentCause.SWITCH_REBOOT, root="spine-03",
                        state=state, started=now - 2000, ended=ended,  # type: ignore[arg-type]
                        members=members)

    notifier = AlertmanagerNotifier(am.url)
    try:
        async with Publisher(kafka_bootstrap) as pub:
            await pub.send(event("open", now))
        await wait_for(("incident", "list"), f"{inc}  RUNNING  switch_reboot spine-03  "
                                             "50 member(s)")
        shown = await asyncio.to_thread(run, "incident", "show", inc)
        assert shown.returncode == 0, shown.stderr
        assert "spine-03:50" in shown.stdout and "members (50)" in shown.stdout
        bad = await asyncio.to_thread(run, "incident", "approve", inc)
        assert bad.returncode == 2 and "no member runbook" in bad.stderr
        missing = await asyncio.to_thread(run, "incident", "show", "no-such-incident")
        assert missing.returncode == 2

        acked = await asyncio.to_thread(run, "incident", "ack", inc, "--actor", "oncall-ann")
        assert acked.returncode == 0, acked.stderr
        await wait_for(("incident", "list"), "acked by oncall-ann")
        held = [a for a in await notifier.alerts()
                if a["labels"].get("incident") == inc]
        assert len(held) == 1 and held[0]["annotations"]["member_count"] == "50"
        assert held[0]["labels"]["fabric"] == fabric

        async with Publisher(kafka_bootstrap) as pub:
            await pub.send(event("closed", now + 5000, ended=now + 4000))
        listed = await wait_for(("incident", "list", "--all", "--json"), '"closed"')
        row = next(json.loads(line) for line in listed.splitlines() if inc in line)
        assert row["status"] == "COMPLETED" and row["members"] == 50
        deadline = time.monotonic() + 10
        while [a for a in await notifier.alerts() if a["labels"].get("incident") == inc]:
            assert time.monotonic() < deadline, "the alert was never resolved"
            await asyncio.sleep(0.2)
        actions = [a["action"] for a in read_alerts_file(alerts) if a["labels"].get(
            "incident") == inc]
        assert actions == ["trigger", "acknowledge", "resolve"]
    finally:
        await notifier.aclose()
        worker.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(worker.wait, 60)
        log.close()
        am.stop()
    assert code == 0, (tmp_path / "worker.log").read_text()[-3000:]
    assert "alerts to alertmanager" in (tmp_path / "worker.log").read_text()
