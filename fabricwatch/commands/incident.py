"""``fabricwatch incident list [--ledger] | show ID | ack ID | approve ID | abort ID | close ID``.

An incident's runbook (``IncidentRunbook``, id ``incident/{fabric}/{incident id}``) pages
once for all its ports. ID is the incident id (``breaker/su03``, the correlator's id) in the
configured fabric, or the full workflow id. ``ack`` acknowledges the alert; ``approve`` /
``abort`` is the one word for every member runbook (a breaker incident's); ``close`` ends
the incident and resolves its alert. Every action carries the actor (default: the login
name). Exit code 2 on an unknown ID or an incident that has ended.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import click

from fabricwatch.commands.runbook import SendSignal, _client, _fail, _hard_exit, _run, signal_command
from runtime.settings import Settings, load_settings
from schemas import dumps


def incident_wf_id(settings: Settings, ident: str) -> str:
    if ident.startswith("incident/"):
        return ident
    if not ident or any(c.isspace() for c in ident):
        raise _fail(f"{ident!r} is not an incident id")
    return f"incident/{settings.fabric}/{ident}"


def _when(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


@click.group("incident")
def incident_group() -> None:
    """Incidents: one root cause, one runbook, one page."""


@incident_group.command("list")
@click.option("--all", "show_all", is_flag=True, help="Include closed incidents.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=1000, show_default=True)
@click.option("--ledger", "from_ledger", is_flag=True,
              help="From the ledger's incidents_current (every incident the stream and the "
                   "runbooks recorded, also those whose runbook is long gone), not Temporal.")
def list_command(show_all: bool, as_json: bool, limit: int, from_ledger: bool) -> None:
    """Incidents (open ones unless --all): cause, root, members, who acknowledged."""
    settings = load_settings()
    if from_ledger:
        _list_from_ledger(settings, show_all, as_json, limit)

    async def go() -> list[dict[str, Any]]:
        from workflows.incident.workflows import IncidentRunbook

        client = await _client(settings)
        query = "WorkflowType = 'IncidentRunbook'"
        if not show_all:
            query += " AND ExecutionStatus = 'Running'"
        listed = [wf async for wf in client.list_workflows(query, limit=limit)]
        rpc = timedelta(seconds=5)
        gate = asyncio.Semaphore(8)

        async def row_of(wf: Any) -> dict[str, Any]:
            status = wf.status.name if wf.status else ""
            row: dict[str, Any] = {"id": wf.id, "status": status,
                                   "started": wf.start_time.isoformat()}
            try:
                async with gate:
                    if status == "RUNNING":
                        v = await client.get_workflow_handle(wf.id).query(
                            IncidentRunbook.status, rpc_timeout=rpc)
                        row.update(incident=v.incident, cause=v.cause, root=v.root,
                                   state=v.state, members=len(v.members),
                                   acked_by=v.acked_by, waiting_for=v.waiting_for,
                                   alerts_sent=v.alerts_sent)
                    elif status == "COMPLETED":
                        res = await client.get_workflow_handle_for(
                            IncidentRunbook.run, wf.id, run_id=wf.run_id).result(
                                follow_runs=False, rpc_timeout=rpc)
                        row.update(incident=res.incident, state=res.outcome,
                                   members=len(res.members), alerts_sent=res.alerts_sent)
            except Exception as exc:  # noqa: BLE001 - one stuck incident must not hide the rest
                row["state"] = f"unavailable: {type(exc).__name__}"
            return row

        return list(await asyncio.gather(*(row_of(wf) for wf in listed)))

    rows = _run(go())
    if as_json:
        for row in rows:
            click.echo(dumps(row).decode())
    elif not rows:
        click.echo("no incidents")
    else:
        for row in rows:
            waiting = f"  waiting for {row['waiting_for']}" if row.get("waiting_for") else ""
            acked = f"  acked by {row['acked_by']}" if row.get("acked_by") else ""
            click.echo(f"{row.get('incident', row['id'])}  {row['status']}  "
                       f"{row.get('cause', '')} {row.get('root', '')}  "
                       f"{row.get('members', '?')} member(s)  {row.get('state', '')}"
                       f"{waiting}{acked}")
    _hard_exit(0)


LEDGER_SQL = """
SELECT incident, cause, root, state, toUnixTimestamp64Milli(started) AS started,
       toUnixTimestamp64Milli(ended) AS ended, length(members) AS members, su,
       toUnixTimestamp64Milli(updated) AS updated
FROM incidents_current
WHERE fabric = {fabric:String} AND ({all:UInt8} = 1 OR state != 'closed')
ORDER BY updated DESC
LIMIT {limit:UInt32}
"""


def _list_from_ledger(settings: Settings, show_all: bool, as_json: bool, limit: int) -> None:
    from fabricwatch.commands.ledger import _connect
    from ledger.base import LedgerError

    try:
        ledger, _where = _connect(settings)
    except LedgerError as exc:
        raise _fail(str(exc)) from None
    try:
        rows = ledger.query(LEDGER_SQL, {"fabric": settings.fabric, "all": int(show_all),
                                         "limit": limit})
    except LedgerError as exc:
        raise _fail(str(exc)) from None
    finally:
        ledger.close()
    if as_json:
        for row in rows:
            click.echo(dumps(row).decode())
    elif not rows:
        click.echo("no incidents in the ledger")
    for row in rows if not as_json else []:
        click.echo(f"{row['incident']}  {row['state']}  {row['cause']} {row['root']}  "
                   f"{row['members']} member(s)  started {_when(row['started'])}  "
                   f"ended {_when(row['ended'])}")
    _hard_exit(0)


async def _status(settings: Settings, wf_id: str) -> tuple[Any, Any]:
    from temporalio.service import RPCError

    from workflows.incident.workflows import IncidentRunbook

    client = await _client(settings)
    handle = client.get_workflow_handle_for(IncidentRunbook.run, wf_id)
    try:
        view = await handle.query(IncidentRunbook.status)
    except RPCError as exc:
        raise _fail(f"no incident {wf_id}: {exc.message}") from None
    return handle, view


@incident_group.command("show")
@click.argument("ident", metavar="ID")
@click.option("--json", "as_json", is_flag=True)
def show_command(ident: str, as_json: bool) -> None:
    """The incident's cause, root, every member and what it waits for."""
    settings = load_settings()
    wf_id = incident_wf_id(settings, ident)

    async def go() -> Any:
        return (await _status(settings, wf_id))[1]

    v = _run(go())
    if as_json:
        click.echo(v.model_dump_json(indent=2))
        _hard_exit(0)
    click.echo(f"{v.workflow_id}\n  {v.cause} at {v.root}  state: {v.state}  started "
               f"{_when(v.started)}  ended {_when(v.ended)}"
               + (f"  SU {v.su}" if v.su else ""))
    if v.reason:
        click.echo(f"  reason: {v.reason}")
    click.echo(f"  alert: {v.alert_key}  sent {v.alerts_sent} time(s) to "
               f"{', '.join(v.receivers) or '-'}")
    if v.alert_error:
        click.echo(f"  ALERT REFUSED (not sent): {v.alert_error}")
    click.echo(f"  acknowledged by: {v.acked_by or '-'}  decision: "
               + (f"{v.decision.action} by {v.decision.actor}" if v.decision else "-")
               + (f"  waiting for: {v.waiting_for}" if v.waiting_for else ""))
    click.echo(f"  members ({len(v.members)}):")
    for m in v.members:
        runbook = v.runbooks.get(m)
        click.echo(f"    {m}" + (f"  runbook {runbook}" if runbook else ""))
    _hard_exit(0)


def _incident_signal(name: str) -> SendSignal:
    async def send(settings: Settings, ident: str, who: str, note: str | None) -> str:
        from temporalio.service import RPCError

        from workflows.incident.models import Decision

        wf_id = incident_wf_id(settings, ident)
        handle, view = await _status(settings, wf_id)
        desc = await handle.describe()
        if desc.status is None or desc.status.name != "RUNNING":
            raise _fail(f"{wf_id} has ended ({desc.status.name if desc.status else '?'})")
        if name in ("approve", "abort") and not any(view.runbooks.values()):
            raise _fail(f"{wf_id} has no member runbook waiting for approve / abort "
                        "(its ports start none while it is open): ack or close it")
        try:
            await handle.signal(name, Decision(actor=who, note=note, action=name))
        except RPCError as exc:
            raise _fail(f"{wf_id}: {exc.message}") from None
        return wf_id

    return send


incident_group.add_command(signal_command(
    "ack", "Acknowledge the incident's alert (a human is on it).", _incident_signal("ack")))
incident_group.add_command(signal_command(
    "approve", "Let every member runbook go on at once (a breaker incident: isolate past the "
               "SU's budget).", _incident_signal("approve")))
incident_group.add_command(signal_command(
    "abort", "Stop every member runbook at once (their isolations are rolled back).",
    _incident_signal("abort")))
incident_group.add_command(signal_command(
    "close", "Close the incident and resolve its alert.", _incident_signal("close")))


COMMANDS: list[click.Command] = [incident_group]
