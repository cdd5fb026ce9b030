"""``fabricwatch maintenance add | list | end``: maintenance windows and exclusions.

A window is an event on ``fabric.maintenance`` (``schemas.Maintenance``), the source of
truth the stream worker and ``replay`` both honour: detections in its scope and time are
recorded with ``maintenance: <window>`` and start no port runbook. ``--exclusion`` marks an
exclusion-list entry (a port or device left alone); its TTL is the window's end.

* ``add --device D | --su S | --fabric F --for 2h --reason TEXT [--exclusion]``: the fabric
  of the event is ``--fabric`` or else the settings' (``FABRICWATCH_FABRIC``); the scope is
  the device (or ``device:port``), the SU, or, with ``--fabric`` alone, the whole fabric.
* ``list [--all] [--format json] [--ledger]``: the windows in force now (``--all``: every
  window the topic holds), folded from the topic read from its start; ``--ledger`` reads
  the ledger's ``maintenance_windows`` instead (what the ledger has ingested of the topic).
* ``end ID``: ends a window now (a message with ``state: ended``).

Exit code 2 on a bad argument or an unknown window, 1 when the broker cannot be reached.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import getpass
import sys
import time
import uuid
from typing import Any, NoReturn

import click
import orjson

from runtime.settings import Settings, load_settings
from schemas import ContractError, Maintenance
from schemas.acceptance import accept
from schemas.events import check_device
from schemas.policy import parse_duration_s
from schemas.topics import MAINTENANCE
from streams.incidents.logic import fold_window

EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 1


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    click.echo(f"fabricwatch maintenance: {message}", err=True)
    sys.exit(code)


def _actor() -> str:
    try:
        return getpass.getuser() or "operator"
    except (OSError, KeyError):  # no login name in a bare container
        return "operator"


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds")


async def _publish(settings: Settings, msg: Maintenance) -> None:
    from collectors.publish import Publisher

    async with Publisher(settings.kafka.bootstrap_servers, client_id="fabricwatch-maintenance",
                         request_timeout_ms=15_000) as publisher:
        await publisher.send(msg)
        await publisher.flush()


async def _read(settings: Settings) -> list[Maintenance]:
    """Every valid message of the topic, from its start to its end now."""
    from aiokafka import AIOKafkaConsumer, TopicPartition  # type: ignore[import-untyped]

    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers,
                                group_id=None, enable_auto_commit=False,
                                request_timeout_ms=15_000)
    try:
        await consumer.start()
    except BaseException:
        await consumer.stop()  # release its client even though it never connected
        raise
    out: list[Maintenance] = []
    try:
        parts = consumer.partitions_for_topic(MAINTENANCE.name)
        if parts is None:
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(MAINTENANCE.name) or set()
        tps = [TopicPartition(MAINTENANCE.name, p) for p in sorted(parts)]
        if not tps:
            return out
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        deadline = time.monotonic() + 30
        async def behind() -> bool:
            return any([await consumer.position(tp) < ends[tp] for tp in tps])

        while await behind():
            if time.monotonic() > deadline:
                raise TimeoutError("reading fabric.maintenance took more than 30 s")
            batches = await consumer.getmany(timeout_ms=1000)
            for records in batches.values():
                for rec in records:
                    try:
                        msg = accept(MAINTENANCE, rec.value or b"", received_ms=rec.timestamp)
                    except ContractError:
                        continue  # the worker dead-letters it; a list shows valid windows
                    if isinstance(msg, Maintenance):
                        out.append(msg)
    finally:
        await consumer.stop()
    return out


def _windows(settings: Settings) -> dict[str, dict[str, Any]]:
    try:
        messages = asyncio.run(_read(settings))
    except (OSError, TimeoutError) as exc:
        _fail(f"cannot read {MAINTENANCE.name} from {settings.kafka.bootstrap_servers}: {exc}",
              EXIT_UNREACHABLE)
    except Exception as exc:  # aiokafka's connection errors are not OSErrors
        if type(exc).__module__.startswith("aiokafka"):
            _fail(f"cannot read {MAINTENANCE.name} from "
                  f"{settings.kafka.bootstrap_servers}: {exc}", EXIT_UNREACHABLE)
        raise
    windows: dict[str, dict[str, Any]] = {}
    for msg in messages:
        fold_window(windows, msg)
    return windows


LEDGER_SQL = (
    "SELECT id, toUnixTimestamp64Milli(ts) AS ts, fabric, source, window, scope, target, "
    "toUnixTimestamp64Milli(start) AS start, toUnixTimestamp64Milli(`end`) AS end_ms, state, "
    "reason, actor, exclusion FROM maintenance_windows FINAL")


def _ledger_windows(settings: Settings) -> dict[str, dict[str, Any]]:
    """The same fold over the ledger's copy of the topic (``maintenance_windows``)."""
    from fabricwatch.commands.ledger import _connect
    from ledger.base import LedgerError

    try:
        ledger, _where = _connect(settings)
    except LedgerError as exc:
        _fail(f"cannot open the ledger: {exc}", EXIT_UNREACHABLE)
    try:
        rows = ledger.query(LEDGER_SQL)
    except LedgerError as exc:
        _fail(f"the ledger query failed: {exc}", EXIT_UNREACHABLE)
    finally:
        ledger.close()
    windows: dict[str, dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: int(r["ts"])):
        row = {**row, "end": row.pop("end_ms"), "exclusion": bool(row["exclusion"])}
        fold_window(windows, Maintenance.model_validate(row))
    return windows


def _send(settings: Settings, msg: Maintenance) -> None:
    try:
        asyncio.run(_publish(settings, msg))
    except Exception as exc:
        if isinstance(exc, OSError | TimeoutError) or type(exc).__module__.startswith(
                "aiokafka") or type(exc).__name__ == "PublishError":
            _fail(f"cannot publish to {settings.kafka.bootstrap_servers}: {exc}",
                  EXIT_UNREACHABLE)
        raise


@click.group("maintenance")
def maintenance_group() -> None:
    """Maintenance windows and exclusions (fabric.maintenance): in scope, nothing starts."""


@maintenance_group.command("add")
@click.option("--device", default=None, help="A switch or host name, or device:port.")
@click.option("--su", default=None, help="A scalable unit (su01).")
@click.option("--fabric", default=None,
              help="The fabric (alone: the whole fabric is the scope) [default: settings'].")
@click.option("--for", "duration", required=True, help="How long: 30m, 2h, 1d.")
@click.option("--reason", required=True, help="Why (shown on every detection it covers).")
@click.option("--exclusion", is_flag=True, help="An exclusion-list entry (TTL: --for).")
@click.option("--actor", default=None, help="Who [default: the login name].")
@click.option("--start", "start_at", default=None, help="Start (epoch ms) [default: now].")
def add_command(device: str | None, su: str | None, fabric: str | None, duration: str,
                reason: str, exclusion: bool, actor: str | None, start_at: str | None) -> None:
    """Open a maintenance window (or an exclusion) and print its id."""
    if device is not None and su is not None:
        _fail("give one of --device and --su (and --fabric alone for the whole fabric)")
    if device is None and su is None and fabric is None:
        _fail("give --device D, --su S or --fabric F")
    try:
        seconds = parse_duration_s(duration)
    except ValueError as exc:
        _fail(f"--for: {exc}")
    if seconds <= 0:
        _fail("--for must be longer than zero")
    if not reason.strip():
        _fail("--reason must say why")
    settings = load_settings()
    fabric_name = fabric or settings.fabric
    scope, target = (("device", device) if device is not None else ("su", su) if su is not None
                     else ("fabric", fabric_name))
    assert target is not None  # noqa: S101 - one of the three is set (checked above)
    try:
        check_device(target)
        start = int(start_at) if start_at is not None else int(time.time() * 1000)
    except ValueError as exc:
        _fail(f"--{scope}: {exc}" if start_at is None else f"--start: {exc}")
    now = int(time.time() * 1000)
    window = f"mw-{uuid.uuid4().hex[:12]}"
    try:
        msg = Maintenance(id=f"{window}/active/{now}", ts=now, fabric=fabric_name,
                          source="fabricwatch", window=window, scope=scope,
                          target=target if scope != "su" else target.lower(), start=start,
                          end=start + round(seconds * 1000), reason=reason.strip(),
                          actor=actor or _actor(),
                          exclusion=exclusion)
    except ValueError as exc:
        _fail(str(exc).splitlines()[0])
    _send(settings, msg)
    click.echo(window)
    click.echo(f"{'exclusion' if exclusion else 'maintenance window'} {window}: {scope} "
               f"{msg.target} in {fabric_name} until {_iso(msg.end)}", err=True)


@maintenance_group.command("list")
@click.option("--all", "show_all", is_flag=True, help="Every window, ended ones too.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.option("--ledger", "from_ledger", is_flag=True,
              help="Read the ledger's maintenance_windows instead of the topic.")
def list_command(show_all: bool, fmt: str, from_ledger: bool) -> None:
    """The maintenance windows and exclusions in force now, from fabric.maintenance."""
    settings = load_settings()
    now = int(time.time() * 1000)
    found = _ledger_windows(settings) if from_ledger else _windows(settings)
    rows = [{"window": wid, **w, "in_force": w["start"] <= now < w["end"]}
            for wid, w in sorted(found.items(), key=lambda kv: kv[1]["start"])]
    if not show_all:
        rows = [r for r in rows if r["end"] > now]
    if fmt == "json":
        sys.stdout.buffer.write(orjson.dumps(rows) + b"\n")
        return
    if not rows:
        click.echo("no maintenance window" + ("" if show_all else " in force or planned"))
        return
    click.echo(f"{'window':<16} {'kind':<11} {'scope':<7} {'target':<24} {'until':<25} reason")
    for r in rows:
        kind = "exclusion" if r["exclusion"] else "window"
        until = _iso(r["end"]) + ("" if r["state"] == "active" else " (ended)")
        click.echo(f"{r['window']:<16} {kind:<11} {r['scope']:<7} {r['target']:<24} "
                   f"{until:<25} {r['reason']}")


@maintenance_group.command("end")
@click.argument("window")
def end_command(window: str) -> None:
    """End the maintenance window WINDOW now."""
    settings = load_settings()
    held = _windows(settings).get(window)
    if held is None:
        _fail(f"no maintenance window {window!r} on {MAINTENANCE.name}")
    now = int(time.time() * 1000)
    msg = Maintenance(id=f"{window}/ended/{now}", ts=now, fabric=held["fabric"],
                      source="fabricwatch", window=window, scope=held["scope"],
                      target=held["target"], start=held["start"], end=held["planned_end"],
                      state="ended", reason=held["reason"], actor=_actor(),
                      exclusion=held["exclusion"])
    _send(settings, msg)
    click.echo(f"maintenance window {window} ended at {_iso(now)}", err=True)


COMMANDS: list[click.Command] = [maintenance_group]
