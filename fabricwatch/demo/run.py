"""The main job: a simulated fabric through the whole system, watched live, then a report.

``Demo(settings, options).run()``:

1. lays out the state folder (``--fresh`` wipes it first): the demo policy, the fabric's
   ibnetdiscover output and cable plan;
2. starts the local stack (Kafka, Temporal dev server) and the fabricwatch processes, each a
   child with its log in ``<state>/logs``: the ledger owner (``ledger serve --ingest``, the
   embedded chdb ledger's one writer, serving its HTTP endpoint), the stream worker, the
   runbook worker (Temporal worker + dispatcher), and two simulators — the InfiniBand fabric
   of the chosen preset with the scripted faults, and a small RoCE fabric for the pause storm;
3. watches: events/s and lag per topic, detections, incidents, runbooks by state, the
   breaker per SU, and acts as the site's technicians (each ladder step a runbook waits for
   is reported done after a short delay), until every fault was detected, every runbook
   reached a decision and every incident the scenario caused has closed;
4. writes the report (terminal summary and HTML) from the ledger, then stops everything.

Nothing here decides anything about the fabric: the detectors, the runbooks and the ledger
are the same processes an operator runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from fabricwatch.demo.scenario import Expectation, Scenario, build_scenario
from fabricwatch.demo.view import LiveState, render
from fabricwatch.demo.watch import watch_detections, watch_incidents, watch_topics
from fabricwatch.procs import ChildProcess
from fabricwatch.stack import LocalStack
from runtime.settings import Settings
from schemas import Detection, Incident
from schemas.policy import parse_duration_s
from schemas.topics import INPUT_TOPICS

# Demo policy: the production defaults except the clocks a person would not wait for. It says
# so in the file the workers load, and the report repeats it.
DEMO_POLICY = """\
# fabricwatch demo policy. Production defaults everywhere except the runbook's clocks:
# the clean-counter wait before return to service is shortened from 24 h to {clean},
# technician reminders from 4 h to 30 s, so that a run ends in minutes.
fabricHealth:
  flapDampening: {{window: 30m, maxLinkDowns: 2, action: isolatePort}}
  degradedLink: {{expectWidth: 4X, expectSpeed: NDR, action: isolatePort}}
  breaker: {{maxIsolatedPortsPerSU: 1%}}
  repairLadder: [clean-and-reseat, swap-optic, swap-cable, swap-switch-port]
  returnToService: [ib_write_bw-per-rail, nccl-allreduce-baseline, counters-clean-24h]
  shadow:
    fabrics: [{roce}]   # RoCE automation in shadow mode: decide, record, change nothing
  runbook:
    cleanCountersWait: {clean}
    stepReminder: 30s
    stepEscalation: 30m
    approvalTimeout: 24h
"""

DECIDED_STATES = frozenset({"awaiting_approval", "escalated", "needs_human",
                            "awaiting_handover"})
TEMPORAL_CALL_S = 10.0  # no Temporal call may stall the watch loop longer than this


@dataclass
class DemoOptions:
    preset: str = "10k-gpu"
    short: bool = False  # faults sooner and a 2 s sampling interval (the end-to-end test)
    fresh: bool = False
    live: bool = True
    timeout_s: float = 1800.0
    clean_wait: str = "45s"
    technician_delay_s: float = 5.0
    keep_running: bool = False
    report_path: Path | None = None
    fabric: str | None = None  # the IB fabric's name [default: the preset's]; RoCE: NAME-roce
    app_id: str = "fabricwatch-streams"  # the stream worker's consumer group


@dataclass
class RunbookView:
    workflow_id: str
    state: str  # running | awaiting_technician | awaiting_approval | ... | completed outcome
    step: str
    done: bool
    outcome: str | None = None


@dataclass
class DemoResult:
    ok: bool
    elapsed_s: float
    detected: dict[str, list[str]] = field(default_factory=dict)  # label -> detection ids
    missing: list[str] = field(default_factory=list)
    runbooks: dict[str, RunbookView] = field(default_factory=dict)
    undecided: list[str] = field(default_factory=list)
    breaker: dict[str, tuple[int, int]] = field(default_factory=dict)
    # label -> the simulated jobs running on the links its detections were on (the report's)
    jobs_touched: dict[str, list[str]] = field(default_factory=dict)
    # incident id -> its latest message, and the runbooks started for a cable of its members
    incidents: dict[str, Incident] = field(default_factory=dict)
    incident_runbooks: dict[str, list[str]] = field(default_factory=dict)
    # runbook -> the ladder steps the simulated technicians did on it
    technician_steps: dict[str, list[str]] = field(default_factory=dict)
    report_html: Path | None = None
    report: Any = None  # the fabricwatch.report.build.Report it was rendered from
    message: str = ""
    # where the alerts went (Alertmanager's URL and/or the alerts file) and how many
    alerts_to: str = ""
    alerts_sent: int = 0  # every alert message (trigger, update, ack, resolve)
    alerts_distinct: int = 0  # distinct alerts (one per incident or runbook that paged)
    alerts_in_alertmanager: int | None = None  # listed by its API at the end (None: not used)


class DemoError(RuntimeError):
    """The demo could not start or a part of it died; the message names the log to read."""


class Demo:
    def __init__(self, settings: Settings, options: DemoOptions,
                 console: Console | None = None) -> None:
        self.settings = settings
        self.opts = options
        self.console = console or Console()
        self.state_dir = settings.state_dir.resolve()
        self.demo_dir = self.state_dir / "demo"
        self.scenario: Scenario = build_scenario(options.preset, short=options.short,
                                                 fabric_name=options.fabric)
        self.children: list[ChildProcess] = []
        self.live = LiveState()
        self.detected: dict[str, list[str]] = {e.label: [] for e in self.scenario.expectations}
        # label -> "fabric|device:port" of each detection that proved it
        self.detected_ports: dict[str, set[str]] = {e.label: set()
                                                    for e in self.scenario.expectations}
        self.jobs_touched: dict[str, list[str]] = {}
        self._started_wall = time.time()
        self._known: dict[str, RunbookView] = {}
        self._children_started = time.time()
        # where both simulators' clocks start (their fault times count from it): set with
        # the children, passed to each simulator, and the reference of "after the fault began"
        self._sim_start_ms = int(self._children_started * 1000)
        self.alertmanager: Any = None  # a LocalAlertmanager when the binary is built
        self.alerts_file = self.state_dir / "alerts.jsonl"
        self.technician_steps: dict[str, list[str]] = {}

    @staticmethod
    def scenario_of(options: DemoOptions) -> Scenario:
        """The scenario a demo with ``options`` runs (what its test asserts against)."""
        return build_scenario(options.preset, short=options.short, fabric_name=options.fabric)

    # ---- set-up -------------------------------------------------------------------------

    def _prepare(self) -> None:
        if self.opts.fresh and self.state_dir.exists():
            LocalStack(self.settings).down()  # nothing may hold the folder we wipe
            shutil.rmtree(self.state_dir)
        self.demo_dir.mkdir(parents=True, exist_ok=True)
        (self.demo_dir / "policy.yaml").write_text(
            DEMO_POLICY.format(clean=self.opts.clean_wait, roce=self.scenario.roce_fabric))
        topo = self.demo_dir / "ibnetdiscover.txt"
        if not topo.exists() or not (self.demo_dir / "plan.csv").exists():
            from sim.topology import generate

            fabric = generate(self.opts.preset)
            topo.write_text(fabric.to_ibnetdiscover())
            (self.demo_dir / "plan.csv").write_text(fabric.to_plan_csv())
        self._pin_baselines()

    def _pin_baselines(self) -> None:
        """Probation judges a repaired link against pinned baselines: the demo pins what the
        simulator's healthy rails carry, with ``fabricwatch baseline pin`` as an operator
        would (before the ledger's owner starts: the embedded ledger has one process)."""
        import subprocess

        from sim.topology import resolve_params
        from workflows.adapters.sim import SIM_PROBES

        rails = [arg for r in range(resolve_params(self.scenario.ib_preset).rails)
                 for arg in ("--rail", str(r))]
        for probe, (size, scale, gbps) in SIM_PROBES.items():
            argv = [sys.executable, "-m", "fabricwatch", "baseline", "pin", "--probe", probe,
                    "--size", str(size), "--scale", str(scale), "--gbps", str(gbps),
                    "--actor", "fabricwatch-demo", "--note", "the simulator's healthy rail",
                    *rails]
            done = subprocess.run(argv, env=self._env(), cwd=self.state_dir,  # noqa: S603
                                  capture_output=True, text=True, check=False, timeout=120)
            if done.returncode != 0:
                raise DemoError(f"pinning the {probe} baselines failed: "
                                f"{done.stderr.strip()[-500:]}")

    def _env(self) -> dict[str, str]:
        import os

        env = dict(os.environ)
        env.update({
            "FABRICWATCH_STATE_DIR": str(self.state_dir),
            "FABRICWATCH_POLICY_PATH": str(self.demo_dir / "policy.yaml"),
            "FABRICWATCH_PLAN_PATH": str(self.demo_dir / "plan.csv"),
            "FABRICWATCH_FABRIC": self.scenario.ib_fabric,
            "FABRICWATCH_KAFKA__BOOTSTRAP": self.settings.kafka.bootstrap_servers,
            "FABRICWATCH_TEMPORAL__ADDRESS": self.settings.temporal.target,
            "FABRICWATCH_LEDGER__HTTP_PORT": str(self.settings.ledger.http_port),
            "PYTHONUNBUFFERED": "1",
            # the children run in the state folder, whose `ledger` data folder would shadow the
            # `ledger` package (a namespace package from the working directory) otherwise
            "PYTHONSAFEPATH": "1",
        })
        return env

    def _child(self, name: str, *args: str) -> ChildProcess:
        argv = [sys.executable, "-m", "fabricwatch", *args]
        child = ChildProcess(name, argv, self.state_dir / "logs" / f"{name}.log",
                             env=self._env(), cwd=self.state_dir)
        self.children.append(child.start())
        return child

    def _start_children(self) -> None:
        sc = self.scenario
        self._children_started = time.time()
        # One clock for the simulators and the checks. Left to itself each simulator starts
        # an interval before it got going, which on a quick start is before this moment: a
        # fault at 25 s then stamped its trap before 25 s by the demo's clock, and a spine
        # reboot or SM failover that was caught was counted as not (a CI run timed out so).
        self._sim_start_ms = (int(self._children_started) * 1000  # whole ms both ways
                              - int(parse_duration_s(sc.interval) * 1000))
        sim_start = datetime.fromtimestamp(self._sim_start_ms / 1000, UTC).isoformat()
        self._child("ledger", "ledger", "serve", "--ingest")
        self._child("worker", "worker", "--no-ledger", "--app-id", self.opts.app_id)
        self._child("runbooks", "runbook-worker", "--records", "kafka", "--topology",
                    str(self.demo_dir / "ibnetdiscover.txt"), "--alerts-file",
                    str(self.alerts_file), *self._alertmanager_args())
        ib_faults = [arg for spec in sc.specs(sc.ib_fabric) for arg in ("--fault", spec)]
        ib_faults += [arg for name, nodes in sc.jobs for arg in ("--job", f"{name}={','.join(nodes)}")]
        self._child("sim-ib", "sim", "run", "--preset", sc.ib_preset, "--fabric", sc.ib_fabric,
                    "--interval", sc.interval, "--start", sim_start,
                    "--topology-every", "3", "--probe-every", "2",
                    "--state-dir", str(self.state_dir / "sim"), *ib_faults)
        roce_faults = [arg for spec in sc.specs(sc.roce_fabric) for arg in ("--fault", spec)]
        self._child("sim-roce", "sim", "run", "--preset", sc.roce_preset, "--transport", "roce",
                    "--fabric", sc.roce_fabric, "--interval", sc.interval, "--start", sim_start,
                    "--topology-every", "0", "--probe-every", "2",
                    "--state-dir", str(self.state_dir / "sim-roce"), *roce_faults)

    def _alertmanager_args(self) -> list[str]:
        """Start Alertmanager on a free loopback port when it is built (make setup); its URL
        for the runbook worker. Without it the alerts go to the alerts file only."""
        from fabricwatch.alertmanager import AlertmanagerUnavailable, LocalAlertmanager, find_binary
        from fabricwatch.stack_config import free_ports

        binary = find_binary()
        if binary is None:
            return []
        try:
            self.alertmanager = LocalAlertmanager(binary, free_ports(1)[0],
                                                  self.demo_dir / "alertmanager").start()
        except AlertmanagerUnavailable as exc:
            self.console.print(f"[yellow]Alertmanager did not start ({exc}); alerts go to "
                               f"{self.alerts_file}[/]")
            self.alertmanager = None
            return []
        return ["--alertmanager", self.alertmanager.url]

    def _alerts_summary(self, result: DemoResult) -> None:
        """Where the alerts went and how many (the file has every one; Alertmanager is asked
        what it holds now)."""
        from workflows.adapters.notify import read_alerts_file

        rows = read_alerts_file(self.alerts_file)
        result.alerts_sent = len(rows)
        result.alerts_distinct = len({r["key"] for r in rows})
        places = [f"file {self.alerts_file}"]
        if self.alertmanager is not None:
            places.insert(0, f"Alertmanager {self.alertmanager.url}")
            import json
            import urllib.request

            try:
                with urllib.request.urlopen(  # noqa: S310 - our loopback Alertmanager
                        f"{self.alertmanager.url}/api/v2/alerts", timeout=10) as resp:
                    result.alerts_in_alertmanager = len(json.loads(resp.read()))
            except OSError as exc:
                self.console.print(f"[yellow]Alertmanager did not answer: {exc}[/]")
        result.alerts_to = ", ".join(places)
        held = ("" if result.alerts_in_alertmanager is None
                else f"; {result.alerts_in_alertmanager} firing in Alertmanager now")
        self.console.print(f"alerts: {result.alerts_distinct} alert(s), {result.alerts_sent} "
                           f"message(s) to {result.alerts_to}{held}")

    def _check_children(self) -> None:
        for child in self.children:
            if not child.running:
                raise DemoError(f"{child.name} exited with code {child.returncode}; "
                                f"its log {child.log} ends:\n{child.tail()}")

    def _stop_children(self) -> None:
        for child in reversed(self.children):  # simulators first, the ledger owner last
            child.stop()
        self.children.clear()

    @contextlib.contextmanager
    def _step(self, progress: Progress, text: str) -> Iterator[None]:
        task = progress.add_task(text, total=None)
        yield
        progress.update(task, completed=1, total=1, description=f"[green]✓[/] {text}")

    # ---- the run ----------------------------------------------------------------------

    def run(self) -> DemoResult:
        # aiokafka logs every retry while a fresh broker elects leaders; the view says enough.
        logging.getLogger("aiokafka").setLevel(logging.ERROR)
        # SIGTERM stops the demo like Ctrl-C: through the finally below, which stops every
        # child's process group (a child that ignores SIGTERM is killed after a grace period).
        signal.signal(signal.SIGTERM, _interrupt)
        stack = LocalStack(self.settings)
        started = time.monotonic()
        try:
            with Progress(SpinnerColumn(), TextColumn("{task.description}"),
                          TimeElapsedColumn(), console=self.console,
                          transient=False) as progress:
                with self._step(progress, f"laying out {self.state_dir} "
                                          f"({self.opts.preset} fabric, demo policy)"):
                    self._prepare()
                with self._step(progress, "starting Kafka (KRaft) and the Temporal dev server"):
                    stack.up()
                with self._step(progress, "starting the ledger, stream worker, runbook worker "
                                          "and simulators"):
                    self._start_children()
            self.live.scenario = [(e.label, "waiting") for e in self.scenario.expectations]
            self.live.phase = "running the scenario"
            result = asyncio.run(self._watch())
            result.elapsed_s = time.monotonic() - started
            # The report reads the ledger: stop the simulators, let the ledger owner drain.
            for child in self.children:
                if child.name.startswith("sim-"):
                    child.stop()
            with Progress(SpinnerColumn(), TextColumn("{task.description}"),
                          TimeElapsedColumn(), console=self.console) as progress:
                with self._step(progress, "letting the ledger catch up before the report"):
                    lag = asyncio.run(_ledger_drained(self.settings.kafka.bootstrap_servers,
                                                      timeout_s=240.0))
            if lag:
                self.console.print(f"[yellow]the ledger is still {lag:,} messages behind; "
                                   "the report shows what it holds[/]")
            result.report_html = self._report(result)
            result.jobs_touched = dict(self.jobs_touched)
            self._alerts_summary(result)
            self._print_incidents(result)
            return result
        finally:
            if not self.opts.keep_running:
                self._stop_children()
                if self.alertmanager is not None:
                    self.alertmanager.stop()
                stack.down()

    async def _watch(self) -> DemoResult:
        bootstrap = self.settings.kafka.bootstrap_servers
        topics = [t.name for t in INPUT_TOPICS] + ["fabric.detections", "fabric.actions",
                                                   "fabric.dlq"]
        tasks = [asyncio.create_task(watch_topics(self.live, bootstrap, topics, self.opts.app_id)),
                 asyncio.create_task(self._detections(bootstrap)),
                 asyncio.create_task(watch_incidents(self.live, bootstrap))]
        try:
            return await self._until_decided()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _detections(self, bootstrap: str) -> None:
        task = asyncio.create_task(watch_detections(self.live, bootstrap))
        try:
            while True:
                await asyncio.sleep(0.2)
                batch, self.live.unmatched = self.live.unmatched, []
                for det in batch:
                    self._match(det)
        finally:
            task.cancel()

    def _match(self, detection: Detection) -> None:
        for index, expectation in enumerate(self.scenario.expectations):
            if expectation.matches(detection, self._sim_start_ms):
                self.detected[expectation.label].append(detection.id)
                self.detected_ports[expectation.label].add(f"{detection.fabric}|{detection.key}")
                self.live.scenario[index] = (expectation.label,
                                             f"detected: {detection.detection.value} on "
                                             f"{detection.key}")

    def _match_incidents(self) -> None:
        started = self._sim_start_ms
        for index, expectation in enumerate(self.scenario.expectations):
            for inc in list(self.live.incidents.values()):
                if expectation.matches_incident(inc, started) and \
                        inc.incident not in self.detected[expectation.label]:
                    self.detected[expectation.label].append(inc.incident)
                    self.live.scenario[index] = (
                        expectation.label, f"incident: {inc.cause.value} of {inc.root}, "
                                           f"{len(inc.members)} ports, {inc.state}")

    def _print_incidents(self, result: DemoResult) -> None:
        if not result.incidents:
            self.console.print("incidents: none")
        for iid, inc in sorted(result.incidents.items(), key=lambda kv: kv[1].started):
            runbooks = result.incident_runbooks.get(iid, [])
            steps = sum(len(result.technician_steps.get(r, [])) for r in runbooks)
            self.console.print(
                f"incident {iid}: {inc.cause.value} of {inc.root} ({inc.state}), "
                f"{len(inc.members)} member ports, {len(runbooks)} port runbook(s) and "
                f"{steps} technician step(s) for them")

    async def _until_decided(self) -> DemoResult:
        from workflows.worker import connect

        client = await connect(self.settings)
        deadline = time.monotonic() + self.opts.timeout_s
        acted: dict[tuple[str, str], float] = {}  # (workflow, step) -> when the tech finishes
        stable_since: float | None = None
        last_count = -1
        last_print = 0.0
        live_ctx: Any = (Live(render(self.live), console=self.console, refresh_per_second=2,
                              transient=False)
                         if self.opts.live and self.console.is_terminal
                         else contextlib.nullcontext())
        with live_ctx as live:
            while True:
                self._check_children()
                self._match_incidents()
                runbooks = await self._runbooks(client)
                await self._technicians(client, runbooks, acted)
                self.live.runbooks_by_state = _count_states(runbooks)
                self.live.breaker = await self._breaker(client)
                if live is not None:
                    live.update(render(self.live))
                elif time.monotonic() - last_print > 15:
                    last_print = time.monotonic()
                    self.console.print(_status_line(self.live, self.detected))
                missing = [e.label for e in self.scenario.expectations if not self.detected[e.label]]
                undecided = [r.workflow_id for r in runbooks.values()
                             if not r.done and r.state not in DECIDED_STATES]
                if len(runbooks) != last_count:
                    last_count, stable_since = len(runbooks), time.monotonic()
                settled = (stable_since is not None and time.monotonic() - stable_since > 15
                           and time.time() - self._children_started > self.scenario.min_duration_s)
                # an incident the scenario caused must also have closed: its cause cleared
                unsettled = [e.label for e in self.scenario.expectations if e.incident_root
                             and not any(i in self.live.incidents
                                         and self.live.incidents[i].state == "closed"
                                         for i in self.detected[e.label])]
                if not missing and not undecided and not unsettled and runbooks and settled:
                    self.live.phase = "every fault detected, every runbook decided"
                    if live is not None:
                        live.update(render(self.live))
                    return self._result(True, runbooks, [], [], "")
                if time.monotonic() > deadline:
                    return self._result(False, runbooks, missing, undecided,
                                        f"timed out after {self.opts.timeout_s:.0f} s")
                await asyncio.sleep(1.0)

    async def _runbooks(self, client: Any) -> dict[str, RunbookView]:
        """Every runbook of this demo's fabrics and where it stands.

        Queries run concurrently, and a runbook already waiting for a human (the breaker's
        approval, an escalation) is not asked again: only a human moves it on, and on a
        loaded machine 100+ sequential queries would stall the view for minutes.
        """
        from temporalio.client import WorkflowExecutionStatus

        from workflows.remediation.workflows import PortRemediation

        prefixes = tuple(f"remediate/{f}/" for f in (self.scenario.ib_fabric,
                                                     self.scenario.roce_fabric))
        listed = [wf for wf in await _listed(client, "WorkflowType = 'PortRemediation'")
                  if wf.id.startswith(prefixes)
                  and wf.start_time.timestamp() >= self._started_wall - 5]
        gate = asyncio.Semaphore(8)

        async def view(wf: Any) -> RunbookView | None:
            known = self._known.get(wf.id)
            running = wf.status == WorkflowExecutionStatus.RUNNING
            if known is not None and (known.done or (running and known.state in DECIDED_STATES)):
                return known
            async with gate:
                try:
                    if running:
                        st = await asyncio.wait_for(
                            client.get_workflow_handle(wf.id).query(PortRemediation.status),
                            TEMPORAL_CALL_S)
                        return RunbookView(wf.id, st.state, st.step, False)
                    handle = client.get_workflow_handle_for(PortRemediation.run, wf.id)
                    result = await asyncio.wait_for(handle.result(), TEMPORAL_CALL_S)
                    return RunbookView(wf.id, result.outcome, "done", True, result.outcome)
                except Exception:  # noqa: BLE001 - a busy workflow answers next round
                    return known

        for found in await asyncio.gather(*(view(wf) for wf in listed)):
            if found is not None:
                self._known[found.workflow_id] = found
        return {wf.id: self._known[wf.id] for wf in listed if wf.id in self._known}

    async def _technicians(self, client: Any, runbooks: dict[str, RunbookView],
                           acted: dict[tuple[str, str], float]) -> None:
        """The site's technicians: each awaited ladder step is done a few seconds later."""
        from workflows.remediation.models import StepDone
        from workflows.remediation.workflows import PortRemediation

        now = time.monotonic()
        for view in runbooks.values():
            if view.done or view.state != "awaiting_technician":
                continue
            rung = view.step.removeprefix("ladder:")
            key = (view.workflow_id, view.step)
            due = acted.setdefault(key, now + self.opts.technician_delay_s)
            if now < due:
                continue
            try:
                await asyncio.wait_for(
                    client.get_workflow_handle(view.workflow_id).execute_update(
                        PortRemediation.complete_step,
                        StepDone(step=rung, actor="tech:demo-site",
                                 note="done by the demo's simulated technician")),
                    TEMPORAL_CALL_S)
            except Exception as exc:  # noqa: BLE001 - retried next round
                self.live.notes.append(f"technician could not report {rung}: {exc!r:.80}")
                acted[key] = now + self.opts.technician_delay_s
                continue
            self.live.notes.append(f"technician: {rung} done on "
                                   f"{view.workflow_id.removeprefix('remediate/')}")
            self.technician_steps.setdefault(view.workflow_id, []).append(rung)
            acted[key] = float("inf")

    async def _breaker(self, client: Any) -> dict[str, tuple[int, int]]:
        from workflows.budget.workflows import IsolationBudget

        out: dict[str, tuple[int, int]] = {}
        for wf in await _listed(client, "WorkflowType = 'IsolationBudget' AND "
                                        "ExecutionStatus = 'Running'"):
            if wf.id.startswith("railhold/"):
                continue  # a node rail's fence holders, not an isolation budget
            with contextlib.suppress(Exception):
                st = await asyncio.wait_for(
                    client.get_workflow_handle(wf.id).query(IsolationBudget.state),
                    TEMPORAL_CALL_S)
                out[f"{st.fabric}/{st.su or 'all'}"] = (st.in_use, st.limit)
        return out

    def _result(self, ok: bool, runbooks: dict[str, RunbookView], missing: list[str],
                undecided: list[str], message: str) -> DemoResult:
        incidents = dict(self.live.incidents)
        return DemoResult(ok=ok, elapsed_s=0.0, detected=dict(self.detected), missing=missing,
                          runbooks=runbooks, undecided=undecided, breaker=dict(self.live.breaker),
                          message=message, incidents=incidents,
                          incident_runbooks=incident_runbooks(incidents, runbooks),
                          technician_steps=dict(self.technician_steps))

    # ---- the report -------------------------------------------------------------------

    def _report(self, result: DemoResult) -> Path | None:
        from fabricwatch.report.build import build_report
        from fabricwatch.report.html import render_html
        from fabricwatch.report.terminal import print_summary
        from ledger.http import advertised_endpoint, endpoint_client

        url = advertised_endpoint(self.state_dir)
        if url is None:
            self.console.print("[yellow]the ledger endpoint is gone; no report[/]")
            return None
        ledger = endpoint_client(url, self.settings)
        try:
            # The window is the run (a resumed run's first events included): binned to an
            # hour before it, a 3-minute demo had three points per series.
            looked = int(self._started_wall * 1000) - 3_600_000
            first = ledger.query(
                "SELECT toUnixTimestamp64Milli(min(ts)) AS t, count() AS n FROM port_events "
                "WHERE ts >= fromUnixTimestamp64Milli({since:Int64})", {"since": looked})
            since = (int(first[0]["t"]) - 10_000 if first and int(first[0]["n"])
                     else int(self._started_wall * 1000))
            report = build_report(ledger, since_ms=since,
                                  until_ms=int(time.time() * 1000) + 10_000,
                                  temporal_ui=f"http://{self.settings.temporal.host}:"
                                              f"{self.settings.temporal.ui_port}/namespaces/"
                                              f"{self.settings.temporal.namespace}/workflows")
        finally:
            ledger.close()
        result.report = report
        from fabricwatch.report.build import alerts_from_file

        report.alerts = alerts_from_file(self.alerts_file, since_ms=report.since_ms,
                                         until_ms=report.until_ms)
        report.alerts_file = str(self.alerts_file)
        path = self.opts.report_path or self.demo_dir / "report.html"
        path.write_text(render_html(report), encoding="utf-8")
        print_summary(report, self.console)
        self.jobs_touched = jobs_touched(self.detected_ports, report.touched)
        for label, jobs in self.jobs_touched.items():
            self.console.print(f"{label}: touched {', '.join(jobs) if jobs else 'no job'}")
        self.console.print(f"report: {path}")
        return path


async def _ledger_drained(bootstrap: str, *, timeout_s: float) -> int:
    """Wait until the ledger's consumer group has committed every message; returns the lag."""
    from aiokafka import AIOKafkaConsumer, TopicPartition  # type: ignore[import-untyped]
    from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped]

    from fabricwatch.demo.watch import committed_offsets, lag_of, topic_partitions
    from ledger.ingest import GROUP_ID, INGEST_TOPICS

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await consumer.start()
    await admin.start()
    lag = -1
    try:
        deadline = time.monotonic() + timeout_s
        partitions = [TopicPartition(t.name, p) for t in INGEST_TOPICS
                      for p in sorted(await topic_partitions(consumer, t.name))]
        while time.monotonic() < deadline:
            ends = await consumer.end_offsets(partitions)
            lag = lag_of(ends, await committed_offsets(admin, GROUP_ID))
            if lag == 0:
                break
            await asyncio.sleep(2.0)
    finally:
        await consumer.stop()
        await admin.close()
    return max(lag, 0)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _status_line(live: LiveState, detected: dict[str, list[str]]) -> str:
    caught = sum(1 for ids in detected.values() if ids)
    states = ", ".join(f"{n} {s}" for s, n in sorted(live.runbooks_by_state.items())) or "none"
    rates = sum(t.per_s for t in live.topics.values())
    return (f"[{time.strftime('%H:%M:%S')}] {rates:,.0f} events/s; {live.detections_total} "
            f"detections; faults caught {caught}/{len(detected)}; runbooks: {states}"
            + (f"; {live.notes[-1]}" if live.notes else ""))


async def _listed(client: Any, query: str) -> list[Any]:
    """The workflows a visibility query finds, or none when Temporal is slow to answer."""
    async def collect() -> list[Any]:
        return [wf async for wf in client.list_workflows(query)]

    try:
        return await asyncio.wait_for(collect(), TEMPORAL_CALL_S * 3)
    except TimeoutError:
        return []


def _count_states(runbooks: dict[str, RunbookView]) -> dict[str, int]:
    out: dict[str, int] = {}
    for view in runbooks.values():
        out[view.state] = out.get(view.state, 0) + 1
    return out


def jobs_touched(detected_ports: dict[str, set[str]],
                 touched: dict[str, list[str]]) -> dict[str, list[str]]:
    """For each injected fault, the jobs running on the links its detections were on."""
    out: dict[str, list[str]] = {}
    for label, ports in detected_ports.items():
        names: set[str] = set()
        for port in ports:
            names.update(touched.get(port, ()))
        out[label] = sorted(names)
    return out


def incident_runbooks(incidents: dict[str, Incident], runbooks: dict[str, RunbookView]
                      ) -> dict[str, list[str]]:
    """For each incident, the runbooks of a cable with an end among its members."""
    out: dict[str, list[str]] = {}
    for iid, inc in incidents.items():
        prefix = f"remediate/{inc.fabric}/"
        members = set(inc.members)
        out[iid] = sorted(wf for wf in runbooks if wf.startswith(prefix) and any(
            end in members for end in wf.removeprefix(prefix).split("~")))
    return out


def describe(expectations: list[Expectation]) -> list[str]:
    return [f"{e.label}: {e.spec} -> {e.detection}"
            + (f" (or {e.or_localised} localised to the cable)" if e.or_localised else "")
            for e in expectations]
