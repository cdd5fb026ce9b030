"""``fabricwatch runbook ...`` for technicians and operators, and ``fabricwatch runbook-worker``.

``runbook list | show ID | step-done ID STEP [--note] [--actor] [--new-port] [--serial] |
approve ID | abort ID | budget | reconcile [--apply]``: ID is a workflow id
(``remediate/lab/leaf-su01-r3:17~node0042/mlx5_3:1``) or just ``DEVICE:PORT`` of either end
of the cable, in the configured fabric. Every action carries the actor (default: the login
name), which the runbook records in the ledger. Exit code 2 on a bad ID or a step the
runbook is not awaiting.

``runbook-worker`` runs the Temporal worker, the dispatcher (``fabric.detections`` ->
signal-with-start) and the incident consumer (``fabric.incidents`` -> one incident runbook
each) until SIGINT/SIGTERM; alerts go to the configured receivers (``--alertmanager``,
``--pagerduty``, ``--slack``), else to the alerts file.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import click

from runtime.settings import Settings, load_settings
from schemas import dumps
from schemas.errors import ContractError
from schemas.policy import Policy


def _fail(message: str) -> SystemExit:
    click.echo(f"error: {message}", err=True)
    return SystemExit(2)


def resolve_id(settings: Settings, ident: str) -> str:
    """A workflow id from ``remediate/...``, ``budget/...`` or ``DEVICE:PORT`` (the id of a
    port without a known peer; ``_find`` looks up the cable that has the port as an end)."""
    if ident.startswith(("remediate/", "budget/")):
        return ident
    device, sep, port = ident.rpartition(":")
    if not sep or not device or not port.isdigit():
        raise _fail(f"{ident!r} is neither a workflow id nor DEVICE:PORT")
    return f"remediate/{settings.fabric}/{device}:{int(port)}"


def cable_ends(wf_id: str) -> list[str]:
    """The ``device:port`` ends named by a runbook id (one, or the cable's two)."""
    tail = wf_id.removeprefix("remediate/").split("/", 1)
    return tail[1].split("~") if len(tail) == 2 else []


async def _find(settings: Settings, client: Any, ident: str) -> str:
    """The runbook of ``ident``: as given, or the newest one with ``DEVICE:PORT`` as an end."""
    wf_id = resolve_id(settings, ident)
    if ident.startswith(("remediate/", "budget/")):
        return wf_id
    key = wf_id.removeprefix(f"remediate/{settings.fabric}/")
    prefix = f"remediate/{settings.fabric}/"
    for query in ("WorkflowType = 'PortRemediation' AND ExecutionStatus = 'Running'",
                  "WorkflowType = 'PortRemediation'"):
        async for wf in client.list_workflows(query, limit=10_000):
            if wf.id.startswith(prefix) and key in cable_ends(wf.id):
                return str(wf.id)
    return wf_id


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


async def _handle(settings: Settings, wf_id: str, ident: str | None = None) -> Any:
    from temporalio.service import RPCError

    client = await _client(settings)
    if ident is not None:
        wf_id = await _find(settings, client, ident)
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
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="json: one object per runbook, a JSON array.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of a table.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=200, show_default=True)
def list_command(show_all: bool, fmt: str, as_json: bool, limit: int) -> None:
    """Runbooks (running ones unless --all): cable, isolated end, state, rung, step."""
    settings = load_settings()

    async def go() -> list[dict[str, Any]]:
        from temporalio.client import WorkflowFailureError

        from workflows.remediation.workflows import PortRemediation

        client = await _client(settings)
        query = "WorkflowType = 'PortRemediation'"
        if not show_all:
            query += " AND ExecutionStatus = 'Running'"
        listed = [wf async for wf in client.list_workflows(query, limit=limit)]
        gate = asyncio.Semaphore(8)
        # a runbook whose worker is gone must not hang the list: short, concurrent calls
        rpc = timedelta(seconds=5)

        async def row_of(wf: Any) -> dict[str, Any]:
            status = wf.status.name if wf.status else ""
            row: dict[str, Any] = {"id": wf.id, "cable": cable_ends(wf.id),
                                   "isolated_end": None, "state": status.lower(), "rung": None,
                                   "status": status, "started": wf.start_time.isoformat()}
            try:
                async with gate:
                    if status == "RUNNING":
                        st = await client.get_workflow_handle(wf.id).query(
                            PortRemediation.status, rpc_timeout=rpc)
                        row.update(cable=st.cable or row["cable"], isolated_end=st.port.key,
                                   state=st.state, rung=st.rung, step=st.step,
                                   waiting_for=st.waiting_for, shadow=st.shadow,
                                   isolated=st.isolated, owned=st.owned,
                                   needs_human=st.needs_human)
                    elif status == "COMPLETED":
                        res = await client.get_workflow_handle_for(
                            PortRemediation.run, wf.id, run_id=wf.run_id).result(
                                follow_runs=False, rpc_timeout=rpc)
                        row.update(cable=res.cable or row["cable"],
                                   isolated_end=res.isolated_end, state=res.outcome,
                                   rung=res.fixed_by, still_isolated=res.still_isolated)
            except WorkflowFailureError:
                pass  # failed / terminated: its status says so
            except Exception as exc:  # noqa: BLE001 - a stuck worker must not hide the list
                row["state"] = f"unavailable: {type(exc).__name__}"
            return row

        return list(await asyncio.gather(*(row_of(wf) for wf in listed)))

    rows = _run(go())
    if fmt == "json":
        click.echo(dumps(rows).decode())
        _hard_exit(0)
    if as_json:
        for row in rows:
            click.echo(dumps(row).decode())
    elif not rows:
        click.echo("no runbooks")
    for row in rows if not as_json else []:
        waiting = f" waiting for {row['waiting_for']}" if row.get("waiting_for") else ""
        shadow = " [shadow]" if row.get("shadow") else ""
        iso = f"  isolating {row['isolated_end']}" if row.get("isolated_end") else ""
        click.echo(f"{row['id']}  {row['status']}  {row.get('state', '')}  "
                   f"{row.get('step', '')}{waiting}{shadow}{iso}")
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

        handle = await _handle(settings, wf_id, ident)
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
    click.echo(f"  cable: {' ~ '.join(st.cable)}  isolated end: {st.isolated_end}")
    click.echo(f"  isolated: {st.isolated}  by fabricwatch: {st.owned}  fenced: {st.fenced}  "
               f"ticket: {st.ticket}  budget held: {st.budget_held}")
    if st.found_isolated:
        click.echo(f"  found isolated: {st.found_isolated}")
    if st.needs_human:
        click.echo(f"  NEEDS A HUMAN: {st.needs_human}  (port: {st.port_state})")
    for check, who in st.waived.items():
        click.echo(f"  waived: {check} by {who}")
    if st.measurements:
        click.echo("  probation:")
        for m in st.measurements[-6:]:  # the latest rounds
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(m["ts"] / 1000))
            click.echo(f"    {when} round {m['round']} {m['detail']}")
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
@click.option("--new-port", type=click.IntRange(0, 1024), default=None,
              help="swap-switch-port: the switch port the cable moved to.")
@click.option("--serial", "serials", multiple=True, metavar="END=SERIAL",
              help="A swap rung's new optic / cable serial, e.g. leaf-su01-r3:17=MT2231FT0123.")
def step_done_command(ident: str, step: str, note: str | None, actor: str | None,
                      new_port: int | None, serials: tuple[str, ...]) -> None:
    """Tell the runbook that ladder step STEP is done."""
    settings = load_settings()
    wf_id = resolve_id(settings, ident)

    new_serials: dict[str, str] = {}
    for item in serials:
        end, sep, serial = item.partition("=")
        if not sep or not end or not serial or len(serial) > 128:
            raise _fail(f"--serial {item!r}: expected END=SERIAL")
        new_serials[end] = serial

    async def go() -> str:
        from temporalio.client import WorkflowUpdateFailedError
        from temporalio.service import RPCError

        from workflows.remediation.models import StepDone
        from workflows.remediation.workflows import PortRemediation

        handle = await _handle(settings, wf_id, ident)
        found: str = handle.id
        try:
            await handle.execute_update(PortRemediation.complete_step,
                                        StepDone(step=step, actor=actor or _default_actor(),
                                                 note=note, new_port=new_port,
                                                 new_serials=new_serials))
        except WorkflowUpdateFailedError as exc:
            raise _fail(f"{found}: {exc.cause or exc}") from None
        except RPCError as exc:  # e.g. the runbook has finished: no step awaits anything
            raise _fail(f"{found}: {exc.message}") from None
        return found

    click.echo(f"{_run(go())}: {step} done")
    _hard_exit(0)


SendSignal = Callable[[Settings, str, str, str | None], Awaitable[str]]


def signal_command(name: str, help_text: str, send: SendSignal) -> click.Command:
    """A human's decision sent to one workflow: ``ID [--note] [--actor]``.

    ``send(settings, ident, actor, note)`` finds the workflow, checks it can take the
    decision (raising ``_fail`` with the reason) and signals it; it returns the workflow id.
    """
    @click.command(name, help=help_text)
    @click.argument("ident", metavar="ID")
    @click.option("--note", "--reason", "note", default=None, help="Why (recorded).")
    @click.option("--actor", default=None, help="Who (default: your login name).")
    def command(ident: str, note: str | None, actor: str | None) -> None:
        who = actor or _default_actor()
        click.echo(f"{_run(send(load_settings(), ident, who, note))}: {name} sent by {who}")
        _hard_exit(0)

    return command


def _runbook_signal(name: str) -> SendSignal:
    async def send(settings: Settings, ident: str, who: str, note: str | None) -> str:
        from temporalio.service import RPCError

        from workflows.remediation.models import AbortRequest, Approval
        from workflows.remediation.workflows import PortRemediation

        handle = await _handle(settings, resolve_id(settings, ident), ident)
        wf_id: str = handle.id
        st = await handle.query(PortRemediation.status)
        try:
            if name == "approve":
                if st.waiting_for != "approve":
                    raise _fail(f"{wf_id} is not waiting for an approval (state "
                                f"{st.state}, step {st.step})")
                await handle.signal(PortRemediation.approve, Approval(actor=who, note=note))
            else:
                await handle.signal(PortRemediation.abort, AbortRequest(actor=who, reason=note))
        except RPCError as exc:  # e.g. the runbook has finished (state {st.state})
            raise _fail(f"{wf_id}: {exc.message} (state {st.state})") from None
        return wf_id

    return send


runbook_group.add_command(signal_command(
    "approve", "Let a runbook waiting for a human go on (past the breaker, after an "
               "escalation, retry a step that needed a human, or hand over a port it found "
               "isolated).", _runbook_signal("approve")))
runbook_group.add_command(signal_command(
    "abort", "Stop a runbook; the port's isolation is rolled back.", _runbook_signal("abort")))


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


@runbook_group.command("reconcile")
@click.option("--apply", "apply_", is_flag=True,
              help="Repair the accounting (release stale slots, grant missing ones); the "
                   "fabric is never touched.")
@click.option("--controller", type=click.Choice(["sim", "none"]), default="sim",
              show_default=True, help="Where to read the isolated ports from (none: the "
                                      "checks that need it are reported as not run).")
@click.option("--sim-state", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="The simulator's state folder (default: STATE_DIR/sim).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
def reconcile_command(apply_: bool, controller: str, sim_state: Path | None, fmt: str) -> None:
    """Compare budgets, the controller's isolated ports and open runbooks; report every
    difference. Exit 0 when they agree (or --apply repaired all), 1 when differences remain."""
    settings = load_settings()

    async def go() -> tuple[list[Any], str | None]:
        from workflows.reconcile import compare, gather, repair

        client = await _client(settings)
        runs, budgets = await gather(client, settings.fabric)
        isolated: set[str] | None = None
        note = None
        if controller == "sim":
            from sim.controller import SimController

            state = sim_state or settings.state_dir / "sim"
            isolated = set(SimController(state).isolated_ports())
        else:
            note = "the controller's isolated set was not read: those checks did not run"
        diffs = compare(runs, budgets, isolated)
        if apply_:
            await repair(client, diffs)
        return diffs, note

    diffs, note = _run(go())
    left = [d for d in diffs if not d.repaired]
    if fmt == "json":
        click.echo(dumps({"differences": [d.to_json() for d in diffs], "not_run": note,
                          "applied": apply_}).decode())
    else:
        if note:
            click.echo(f"note: {note}")
        if not diffs:
            click.echo("budgets, controller and runbooks agree")
        for d in diffs:
            mark = " [repaired]" if d.repaired else ""
            click.echo(f"{d.kind}: {d.detail}{mark}")
    _hard_exit(1 if left or note else 0)


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
@click.option("--alertmanager", "alertmanager_url", default=None, metavar="URL",
              help="Post alerts (incidents, pages) to this Alertmanager's v2 API (also "
                   "FABRICWATCH_NOTIFY__ALERTMANAGER_URL).")
@click.option("--pagerduty", is_flag=True,
              help="Send alerts to PagerDuty Events API v2 (routing key: "
                   "FABRICWATCH_SECRETS__PAGERDUTY_ROUTING_KEY_FILE).")
@click.option("--slack", is_flag=True,
              help="Post alerts to a Slack incoming webhook (its URL: "
                   "FABRICWATCH_SECRETS__SLACK_WEBHOOK_URL_FILE).")
@click.option("--alerts-file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also append every alert to this JSON-lines file (with no receiver it is "
                   "the only one; default STATE_DIR/alerts.jsonl).")
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
@click.option("--check", "checks", multiple=True, metavar="NAME=ARGV",
              help="A return-to-service check's command as an argument template, split like "
                   "a shell word list but never run by one (e.g. 'ib_write_bw-per-rail="
                   "ib_write_bw -d {hca} -i {hca_port} -F --report_gbits -D 10 {peer}'), or "
                   "NAME=default for the documented default template. Overrides the policy's "
                   "probation.checks. A check with no command fails closed.")
@click.option("--probe-partner", "partners", multiple=True, metavar="RAIL=HOST",
              help="The healthy host that answers a link's probes on RAIL ({peer}).")
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
                           ticket_webhook: str | None, alertmanager_url: str | None,
                           pagerduty: bool, slack: bool, alerts_file: Path | None,
                           k8s: bool, kubeconfig: str | None,
                           topology_path: Path | None, counters_check: str,
                           checks: tuple[str, ...], partners: tuple[str, ...], dispatch: bool,
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
    commands, probe_partners = check_options(policy, checks, partners)
    opts = WiringOptions(controller=controller, records=records,  # type: ignore[arg-type]
                         sim_state_dir=sim_state, inventory_path=inventory_path,
                         topology=inventory, ticket_webhook=ticket_webhook, k8s=k8s,
                         kubeconfig=kubeconfig, counters_from_ledger=counters_check == "ledger",
                         check_commands=commands, probe_partners=probe_partners,
                         alertmanager_url=alertmanager_url, pagerduty=pagerduty, slack=slack,
                         alerts_file=alerts_file)
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


def check_options(policy: Policy, checks: tuple[str, ...], partners: tuple[str, ...]
                  ) -> tuple[dict[str, Any], dict[int, str]]:
    """The check commands and probe partners: the policy's, then the options (exit 2 on a
    malformed one)."""
    import shlex

    from pydantic import ValidationError

    from schemas.policy import DEFAULT_CHECK_TEMPLATES, CheckCommand
    from workflows.adapters.tools import check_name

    prob = policy.fabric_health.probation
    commands: dict[str, Any] = dict(prob.checks)
    for item in checks:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name or not text.strip():
            raise _fail(f"--check {item!r}: give NAME=ARGV")
        try:
            if text.strip() == "default":
                if name not in DEFAULT_CHECK_TEMPLATES:
                    raise _fail(f"--check {name}=default: no default for {name} (defaults: "
                                f"{', '.join(DEFAULT_CHECK_TEMPLATES)})")
                commands[name] = CheckCommand.model_validate(DEFAULT_CHECK_TEMPLATES[name])
            else:
                base = prob.checks.get(name)
                argv = shlex.split(text)
                commands[name] = (base.model_copy(update={"argv": argv}) if base is not None
                                  else CheckCommand(argv=argv))
        except (ValueError, ValidationError) as exc:
            raise _fail(f"--check {name}: {exc}") from None
    found: dict[int, str] = dict(prob.partners)
    for item in partners:
        rail, sep, host = item.partition("=")
        try:
            if not sep or not rail.strip().isdigit():
                raise ValueError("give RAIL=HOST")
            found[int(rail)] = check_name(host.strip(), "probe partner")
        except Exception as exc:  # noqa: BLE001 - AdapterRejected or ValueError: one message
            raise _fail(f"--probe-partner {item!r}: {exc}") from None
    return commands, found


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
            from workflows.incident.activities import default_config
            from workflows.incident.dispatch import IncidentDispatcher, run_incident_consumer

            dispatcher = Dispatcher(client, policy, inventory, task_queue=queue,
                                    ticketing=fabric.ticketing, records=fabric.records,
                                    evidence_task_queue=settings.temporal.evidence_task_queue)
            tasks.append(asyncio.create_task(run_dispatcher(
                dispatcher, settings.kafka.bootstrap_servers, stop=stop)))
            # fabric.incidents -> one IncidentRunbook per incident (it pages once)
            incidents = IncidentDispatcher(client, task_queue=queue,
                                           config=default_config(settings.notify.horizon_s),
                                           bounds=dispatcher.bounds)
            tasks.append(asyncio.create_task(run_incident_consumer(
                incidents, settings.kafka.bootstrap_servers, stop=stop)))
        if settings.metrics_port is not None:  # Prometheus: runbooks by status, breaker per SU
            from runtime.metrics import RunbookMetrics, start_metrics_server

            start_metrics_server(settings.metrics_port)
            tasks.append(asyncio.create_task(RunbookMetrics(
                client, dispatcher=dispatcher if dispatch else None).run(stop)))
        if audit_plan is not None:
            sid = await ensure_audit_schedule(client, AuditInput(
                fabric=settings.fabric, plan_path=str(audit_plan),
                discovered_path=str(audit_discovered) if audit_discovered else None,
                policy_yaml=policy_text), task_queue=queue)
            logging.getLogger(__name__).info("topology audit schedule %s", sid)
        from workflows.adapters.notify import describe

        alerts_to = describe(fabric.ticketing.notifier) if hasattr(fabric.ticketing,
                                                                   "notifier") else "tickets"
        sys.stderr.write(f"runbook worker on {settings.temporal.target} queue {queue}"
                         f"{' with dispatcher' if dispatch else ''}; alerts to {alerts_to}\n")
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:
            if task.exception() is not None:
                raise task.exception()  # type: ignore[misc]


@click.command("evidence-worker")
@click.option("--ca", default=None, help="The local HCA the tools use (perfquery -C).")
@click.option("--loglevel", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
def evidence_worker_command(ca: str | None, loglevel: str) -> None:
    """Serve the runbooks' evidence activity on settings.temporal.evidence_task_queue.

    For the host with the fabric tools and the umad device (the fabric agent): perfquery and
    mlxlink of both ends of a cable before it is isolated, their output recorded to
    fabric.actions for the ledger; a tool that cannot run is recorded as not captured, with
    why. The runbook workers themselves need neither the tools nor the device.
    """
    settings = load_settings()
    queue = settings.temporal.evidence_task_queue
    if not queue:
        raise _fail("evidence-worker serves FABRICWATCH_TEMPORAL__EVIDENCE_TASK_QUEUE: "
                     "set it (the runbook workers' dispatcher sends the evidence there)")
    from workflows.adapters.base import AdapterRejected
    from workflows.adapters.tools import FabricToolsEvidence

    try:
        evidence = FabricToolsEvidence(ca=ca)
    except AdapterRejected as exc:  # a CA name no tool argument may carry
        raise _fail(f"--ca: {exc}") from None
    logging.basicConfig(level=loglevel.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(_serve_evidence(settings, queue, evidence))
    _hard_exit(0)


async def _serve_evidence(settings: Settings, queue: str, evidence: Any) -> None:
    from collectors.publish import Publisher
    from workflows.adapters.records import KafkaSink
    from workflows.remediation.activities import EvidenceActivities
    from workflows.worker import connect, run_evidence_worker

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    client = await connect(settings)
    async with Publisher(settings.kafka.bootstrap_servers,
                         client_id="fabricwatch-evidence") as publisher:
        sys.stderr.write(f"evidence worker on {settings.temporal.target} queue {queue}\n")
        await run_evidence_worker(client, queue, EvidenceActivities(
            records=KafkaSink(publisher), evidence=evidence), stop=stop)


COMMANDS: list[click.Command] = [runbook_group, runbook_worker_command, evidence_worker_command]
