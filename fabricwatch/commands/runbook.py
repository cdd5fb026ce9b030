"""``fabricwatch runbook ...`` for technicians and operators, and ``fabricwatch runbook-worker``.

``runbook list | show ID | step-done ID STEP [--note] [--actor] | approve ID | abort ID |
budget``: ID is a workflow id (``remediate/lab/leaf-su01-r3:17``) or just ``DEVICE:PORT`` of
the configured fabric. Every action carries the actor (default: the login name), which the
runbook records in the ledger. Exit code 2 on a bad ID or a step the runbook is not awaiting.

``runbook-worker`` runs the Temporal worker and the dispatcher (``fabric.detections`` ->
signal-with-start) until SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import signal
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, NoReturn

import click

from fabricwatch.settings import Settings, load_settings
from schemas import dumps
from schemas.errors import ContractError
from schemas.policy import Policy


def _fail(message: str) -> SystemExit:
    click.echo(f"error: {message}", err=True)
    return SystemExit(2)


def resolve_id(settings: Settings, ident: str) -> str:
    """A workflow id from ``remediate/...``, ``budget/...`` or ``DEVICE:PORT``."""
    if ident.startswith(("remediate/", "budget/")):
        return ident
    device, sep, port = ident.rpartition(":")
    if not sep or not device or not port.isdigit():
        raise _fail(f"{ident!r} is neither a workflow id nor DEVICE:PORT")
    return f"remediate/{settings.fabric}/{device}:{int(port)}"


def _default_actor() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _hard_exit(code: int = 0) -> NoReturn:
    """Leave without interpreter finalization.

    The Temporal client's Rust runtime keeps threads that can abort CPython's finalization
    ("PyGILState_Release: thread state ... must be current", temporalio/sdk-python#300),
    turning a successful command into exit code 134. These short commands have nothing to
    clean up beyond stdout and stderr, which are flushed first.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _run(coro: Any) -> Any:
    try:
        return asyncio.run(coro)
    except ConnectionError as exc:
        click.echo(f"error: cannot reach Temporal: {exc}", err=True)
        _hard_exit(2)
    except SystemExit as exc:
        _hard_exit(exc.code if isinstance(exc.code, int) else 1)


async def _client(settings: Settings) -> Any:
    from workflows.worker import connect

    try:
        return await connect(settings)
    except RuntimeError as exc:
        raise _fail(f"cannot reach Temporal at {settings.temporal.target}: {exc}") from None


async def _handle(settings: Settings, wf_id: str) -> Any:
    from temporalio.service import RPCError

    client = await _client(settings)
    handle = client.get_workflow_handle(wf_id)
    try:
        await handle.describe()
    except RPCError as exc:
        raise _fail(f"no runbook {wf_id}: {exc.message}") from None
    return handle


@click.group("runbook")
def runbook_group() -> None:
    """Look at and act on port remediation runbooks."""


@runbook_group.command("list")
@click.option("--all", "show_all", is_flag=True, help="Include finished runbooks.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of a table.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=200, show_default=True)
def list_command(show_all: bool, as_json: bool, limit: int) -> None:
    """Runbooks (running ones unless --all), with their current step."""
    settings = load_settings()

    async def go() -> list[dict[str, Any]]:
        from workflows.remediation.workflows import PortRemediation

        client = await _client(settings)
        query = "WorkflowType = 'PortRemediation'"
        if not show_all:
            query += " AND ExecutionStatus = 'Running'"
        rows = []
        async for wf in client.list_workflows(query, limit=limit):
            row: dict[str, Any] = {"id": wf.id, "status": wf.status.name if wf.status else "",
                                   "started": wf.start_time.isoformat()}
            if wf.status is not None and wf.status.name == "RUNNING":
                try:
                    st = await client.get_workflow_handle(wf.id).query(PortRemediation.status)
                    row.update(step=st.step, state=st.state, waiting_for=st.waiting_for,
                               shadow=st.shadow)
                except Exception as exc:  # noqa: BLE001 - a stuck worker must not hide the list
                    row["state"] = f"unavailable: {type(exc).__name__}"
            rows.append(row)
        return rows

    rows = _run(go())
    if as_json:
        for row in rows:
            click.echo(dumps(row).decode())
    elif not rows:
        click.echo("no runbooks")
    for row in rows if not as_json else []:
        waiting = f" waiting for {row['waiting_for']}" if row.get("waiting_for") else ""
        shadow = " [shadow]" if row.get("shadow") else ""
        click.echo(f"{row['id']}  {row['status']}  {row.get('state', '')}  "
                   f"{row.get('step', '')}{waiting}{shadow}")
    _hard_exit(0)


@runbook_group.command("show")
@click.argument("ident", metavar="ID")
@click.option("--json", "as_json", is_flag=True)
def show_command(ident: str, as_json: bool) -> None:
    """The runbook's step, history and evidence."""
    settings = load_settings()
    wf_id = resolve_id(settings, ident)

    async def go() -> Any:
        from workflows.remediation.workflows import PortRemediation

        handle = await _handle(settings, wf_id)
        return await handle.query(PortRemediation.status)

    st = _run(go())
    if as_json:
        click.echo(st.model_dump_json(indent=2))
        _hard_exit(0)
    click.echo(f"{st.workflow_id}\n  state: {st.state}  step: {st.step}"
               + (f"  waiting for: {st.waiting_for}" if st.waiting_for else "")
               + ("  [shadow]" if st.shadow else ""))
    click.echo(f"  port: {st.port.key}  SU {st.port.su}  rail {st.port.rail}  node "
               f"{st.port.node}  peer {st.port.peer_device}:{st.port.peer_port}")
    click.echo(f"  isolated: {st.isolated}  fenced: {st.fenced}  ticket: {st.ticket}  "
               f"budget held: {st.budget_held}")
    click.echo("  detections:")
    for d in st.detections:
        click.echo(f"    {d.detection} {d.severity} {d.id}")
    click.echo("  history:")
    for h in st.history:
        note = f" - {h.note}" if h.note else ""
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(h.ts / 1000))
        click.echo(f"    {when} {h.step} {h.outcome} by {h.actor}{note}")
    click.echo("  evidence:")
    for e in st.evidence:
        click.echo(f"    {e.tool} exit {e.exit_code} ({e.bytes} bytes)")
    _hard_exit(0)


@runbook_group.command("step-done")
@click.argument("ident", metavar="ID")
@click.argument("step")
@click.option("--note", default=None, help="What was done (recorded in the ledger).")
@click.option("--actor", default=None, help="Who did it (default: your login name).")
def step_done_command(ident: str, step: str, note: str | None, actor: str | None) -> None:
    """Tell the runbook that ladder step STEP is done."""
    settings = load_settings()
    wf_id = resolve_id(settings, ident)

    async def go() -> None:
        from temporalio.client import WorkflowUpdateFailedError
        from temporalio.service import RPCError

        from workflows.remediation.models import StepDone
        from workflows.remediation.workflows import PortRemediation

        handle = await _handle(settings, wf_id)
        try:
            await handle.execute_update(PortRemediation.complete_step,
                                        StepDone(step=step, actor=actor or _default_actor(),
                                                 note=note))
        except WorkflowUpdateFailedError as exc:
            raise _fail(f"{wf_id}: {exc.cause or exc}") from None
        except RPCError as exc:  # e.g. the runbook has finished: no step awaits anything
            raise _fail(f"{wf_id}: {exc.message}") from None

    _run(go())
    click.echo(f"{wf_id}: {step} done")
    _hard_exit(0)


def _signal_command(name: str, help_text: str) -> click.Command:
    @click.command(name, help=help_text)
    @click.argument("ident", metavar="ID")
    @click.option("--note", "--reason", "note", default=None, help="Why (recorded).")
    @click.option("--actor", default=None, help="Who (default: your login name).")
    def command(ident: str, note: str | None, actor: str | None) -> None:
        settings = load_settings()
        wf_id = resolve_id(settings, ident)
        who = actor or _default_actor()

        async def go() -> None:
            from temporalio.service import RPCError

            from workflows.remediation.models import AbortRequest, Approval
            from workflows.remediation.workflows import PortRemediation

            handle = await _handle(settings, wf_id)
            st = await handle.query(PortRemediation.status)
            try:
                if name == "approve":
                    if st.waiting_for != "approve":
                        raise _fail(f"{wf_id} is not waiting for an approval (state "
                                    f"{st.state}, step {st.step})")
                    await handle.signal(PortRemediation.approve, Approval(actor=who, note=note))
                else:
                    await handle.signal(PortRemediation.abort,
                                        AbortRequest(actor=who, reason=note))
            except RPCError as exc:  # e.g. the runbook has finished (state {st.state})
                raise _fail(f"{wf_id}: {exc.message} (state {st.state})") from None

        _run(go())
        click.echo(f"{wf_id}: {name} sent by {who}")
        _hard_exit(0)

    return command


runbook_group.add_command(_signal_command(
    "approve", "Let a runbook waiting for a human go on (past the breaker, or after an "
               "escalation)."))
runbook_group.add_command(_signal_command(
    "abort", "Stop a runbook; the port's isolation is rolled back."))


@runbook_group.command("budget")
@click.option("--su", default=None, help="One SU (default: the fabric-wide budget).")
def budget_command(su: str | None) -> None:
    """The isolation budget: who holds it, against which limit."""
    settings = load_settings()
    from workflows.budget.models import fabric_budget_id, su_budget_id

    wf_id = su_budget_id(settings.fabric, su) if su else fabric_budget_id(settings.fabric)

    async def go() -> Any:
        from workflows.budget.workflows import IsolationBudget

        handle = await _handle(settings, wf_id)
        return await handle.query(IsolationBudget.state)

    st = _run(go())
    click.echo(f"{wf_id}: {st.in_use} of {st.limit} in use; granted {st.granted_total}, "
               f"refused {st.refused_total}")
    for h in st.holders:
        forced = f" (override by {h.forced_by})" if h.forced_by else ""
        click.echo(f"  {h.port_key}  {h.holder}{forced}")
    _hard_exit(0)


@click.command("runbook-worker")
@click.option("--policy", "policy_path", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Policy YAML (default: settings.policy_path, else built-in).")
@click.option("--controller", type=click.Choice(["sim", "ufm", "sonic", "opensm"]),
              default="sim", show_default=True,
              help="sim: the simulator; ufm: UFM REST; sonic: RESTCONF; opensm: ibportstate.")
@click.option("--records", type=click.Choice(["ledger", "kafka"]), default="ledger",
              show_default=True,
              help="Write records to the ledger directly, or to fabric.actions for the "
                   "ledger's sink (when another process owns the embedded ledger).")
@click.option("--sim-state", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="The simulator's state folder (default: STATE_DIR/sim).")
@click.option("--inventory", "inventory_path", type=click.Path(path_type=Path, dir_okay=False),
              default=None,
              help="Device inventory (YAML, or JSON by its .json suffix) for --controller "
                   "ufm|sonic: each device's UFM GUID and ports or SONiC RESTCONF URL and "
                   "interface names, credentials by reference to secret files. A device or "
                   "port it does not list is refused.")
@click.option("--ticket-webhook", default=None, help="POST ticket operations here.")
@click.option("--k8s/--no-k8s", default=False, show_default=True,
              help="Label and taint nodes through the Kubernetes API.")
@click.option("--kubeconfig", default=None)
@click.option("--topology", "topology_path", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="ibnetdiscover output or a topology JSON event to start the "
                                 "inventory with (fabric.topology updates it).")
@click.option("--counters-check", type=click.Choice(["controller", "ledger"]),
              default="controller", show_default=True,
              help="Judge the clean-counter wait by the controller's view (the simulator) or "
                   "by the ledger's counter deltas since the wait began.")
@click.option("--dispatch/--no-dispatch", default=True, show_default=True,
              help="Also consume fabric.detections and start runbooks.")
@click.option("--audit-plan", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Cable plan CSV: create the daily topology audit schedule.")
@click.option("--audit-discovered", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="ibnetdiscover output the audit reads (default: run it).")
@click.option("--loglevel", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
def runbook_worker_command(policy_path: Path | None, controller: str, records: str,
                           sim_state: Path | None, inventory_path: Path | None,
                           ticket_webhook: str | None, k8s: bool, kubeconfig: str | None,
                           topology_path: Path | None, counters_check: str, dispatch: bool,
                           audit_plan: Path | None, audit_discovered: Path | None,
                           loglevel: str) -> None:
    """Run the Temporal worker of the runbooks (and the dispatcher) until stopped."""
    settings = load_settings()
    path = policy_path or settings.policy_path
    try:
        policy = Policy.load(path)
    except ContractError as exc:
        where = f" at {exc.path}" if exc.path else ""
        raise _fail(f"{path}{where}: {exc.reason}") from None
    from ledger import LedgerError
    from workflows.inventory import Inventory
    from workflows.wiring import WiringError, WiringOptions

    inventory = Inventory()
    if topology_path is not None:
        from fabricwatch.commands.topology import load_discovered

        try:
            topo, _ = load_discovered(topology_path.read_text(encoding="utf-8"),
                                      fabric=settings.fabric, ts=0)
        except (OSError, ContractError) as exc:
            raise _fail(f"--topology {topology_path}: {exc}") from None
        inventory.load(topo)
    opts = WiringOptions(controller=controller, records=records,  # type: ignore[arg-type]
                         sim_state_dir=sim_state, inventory_path=inventory_path,
                         topology=inventory, ticket_webhook=ticket_webhook, k8s=k8s,
                         kubeconfig=kubeconfig, counters_from_ledger=counters_check == "ledger")
    from workflows.wiring import check

    try:  # a bad inventory, M_Key or secret file: exit 2 now, before anything connects
        asyncio.run(check(settings, opts))
    except WiringError as exc:
        raise _fail(str(exc)) from None
    logging.basicConfig(level=loglevel.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    policy_text = path.read_text(encoding="utf-8") if path is not None else None
    # absolute: the audit activity may run in another worker's working directory
    audit_plan = audit_plan.resolve() if audit_plan else None
    audit_discovered = audit_discovered.resolve() if audit_discovered else None
    try:
        asyncio.run(_serve(settings, policy, inventory, opts, dispatch=dispatch,
                           audit_plan=audit_plan, audit_discovered=audit_discovered,
                           policy_text=policy_text))
    except WiringError as exc:
        raise _fail(str(exc)) from None
    except LedgerError as exc:
        raise _fail(f"{exc} (or run with --records kafka, or set FABRICWATCH_CLICKHOUSE_URL)"
                    ) from None
    _hard_exit(0)  # stopped cleanly (ledger closed, worker drained)


async def _serve(settings: Settings, policy: Policy, inventory: Any, opts: Any, *,
                 dispatch: bool, audit_plan: Path | None, audit_discovered: Path | None,
                 policy_text: str | None) -> None:
    from workflows.audit import AuditActivities, AuditInput, ensure_audit_schedule
    from workflows.budget.activities import BudgetActivities
    from workflows.dispatch import Dispatcher, run_dispatcher
    from workflows.wiring import build_activities
    from workflows.worker import connect, run_worker

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    client = await connect(settings)
    queue = settings.temporal.task_queue
    async with AsyncExitStack() as stack:
        fabric = await build_activities(settings, opts, stack)
        audit = AuditActivities(fabric.records)
        tasks = [asyncio.create_task(run_worker(settings, client, fabric,
                                                BudgetActivities(client, queue), audit,
                                                stop=stop))]
        if dispatch:
            dispatcher = Dispatcher(client, policy, inventory, task_queue=queue)
            tasks.append(asyncio.create_task(run_dispatcher(
                dispatcher, settings.kafka.bootstrap_servers, stop=stop)))
        if settings.metrics_port is not None:  # Prometheus: runbooks by status, breaker per SU
            from fabricwatch.metrics import RunbookMetrics, start_metrics_server

            start_metrics_server(settings.metrics_port)
            tasks.append(asyncio.create_task(RunbookMetrics(
                client, dispatcher=dispatcher if dispatch else None).run(stop)))
        if audit_plan is not None:
            sid = await ensure_audit_schedule(client, AuditInput(
                fabric=settings.fabric, plan_path=str(audit_plan),
                discovered_path=str(audit_discovered) if audit_discovered else None,
                policy_yaml=policy_text), task_queue=queue)
            logging.getLogger(__name__).info("topology audit schedule %s", sid)
        sys.stderr.write(f"runbook worker on {settings.temporal.target} queue {queue}"
                         f"{' with dispatcher' if dispatch else ''}\n")
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:
            if task.exception() is not None:
                raise task.exception()  # type: ignore[misc]


COMMANDS: list[click.Command] = [runbook_group, runbook_worker_command]
