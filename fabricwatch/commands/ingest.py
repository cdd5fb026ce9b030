"""``fabricwatch ingest``: parse fabric tool output and publish it as contract events.

Every input is read and parsed before anything is published, so a bad file anywhere in
the list publishes nothing: the error names the file, the line and the reason, and the
command exits 2. With ``--print`` the events go to stdout as JSON lines instead of Kafka.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import NoReturn

import click

from collectors.errors import ParseError
from collectors.formats import FORMATS, MAX_INPUT_BYTES, IngestOptions, parse_input
from collectors.ibnetdiscover import parse_nodes
from collectors.lidmap import LidMap
from collectors.publish import Publisher
from runtime.settings import Settings, load_settings
from schemas import dumps, ts_to_ms
from schemas.events import Event

EXIT_BAD_INPUT = 2
EXIT_PUBLISH_FAILED = 1


def _read(path: str) -> bytes:
    """The bytes of ``path`` (``-`` is stdin), at most MAX_INPUT_BYTES + 1 of them."""
    if path == "-":
        return sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
    try:
        with Path(path).open("rb") as handle:
            return handle.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise ParseError(path, None, f"cannot read: {exc.strerror or exc}") from None


def _fail(error: ParseError) -> NoReturn:
    click.echo(f"fabricwatch ingest: {error}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def _ts_option(value: str | None) -> int:
    if value is None:
        return int(time.time() * 1000)
    text = value.strip()
    try:
        return ts_to_ms(int(text)) if text.isdigit() else ts_to_ms(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--ts") from None


async def _publish(settings: Settings, events: list[Event]) -> int:
    async with Publisher(settings.kafka.bootstrap_servers,
                         columnar=settings.kafka.columnar_counters) as publisher:
        await publisher.send_many(events)
        return await publisher.flush()


def _list_formats() -> None:
    width = max(len(name) for name in FORMATS)
    for name, spec in FORMATS.items():
        click.echo(f"{name.ljust(width)}  {spec.summary}")


@click.command("ingest")
@click.argument("fmt", metavar="FORMAT", required=False)
@click.argument("paths", metavar="PATH...", nargs=-1)
@click.option("--list", "list_formats", is_flag=True, help="Name the formats and exit.")
@click.option("--fabric", help="Fabric name (default: the fabric setting).")
@click.option("--device", help="Device the output is about, where the output does not say "
              "(perfquery, ethtool, mlxlink, SONiC); the host name for sysfs, rdma-statistic, "
              "ibstat and ibstatus.")
@click.option("--port", type=click.IntRange(0, 1024), default=1, show_default=True,
              help="Port of --device for ethtool -S and mlxlink.")
@click.option("--ts", "ts_text", metavar="TS", help="Reading time (RFC 3339 or epoch ms) for "
              "outputs that carry none; default: now.")
@click.option("--tz", help="IANA zone of local-time log stamps (opensm, ufm-events).")
@click.option("--year", type=click.IntRange(1970, 9999),
              help="Year of the first opensm log line (default: the year of --ts).")
@click.option("--topology", type=click.Path(dir_okay=False, path_type=Path),
              help="ibnetdiscover output to resolve LIDs and GUIDs to device names.")
@click.option("--rail", type=click.IntRange(0, None), default=0, show_default=True,
              help="Rail of a probe (ib_write_bw, nccl-tests).")
@click.option("--src", help="Probe source (default: what the output says).")
@click.option("--dst", help="Probe destination (default: what the output says).")
@click.option("--baseline-gbps", type=click.FloatRange(0, None),
              help="Expected bandwidth of a probe.")
@click.option("--job-label", help="Pod label whose value names the job (k8s-pods), e.g. "
              "batch.kubernetes.io/job-name.")
@click.option("--print", "print_only", is_flag=True,
              help="Write the events to stdout as JSON lines instead of publishing them.")
def ingest(fmt: str | None, paths: tuple[str, ...], list_formats: bool, fabric: str | None,
           device: str | None, port: int, ts_text: str | None, tz: str | None,
           year: int | None, topology: Path | None, rail: int, src: str | None,
           dst: str | None, baseline_gbps: float | None, job_label: str | None,
           print_only: bool) -> None:
    """Parse FORMAT output from each PATH (- is stdin) and publish the events."""
    if list_formats:
        _list_formats()
        return
    if fmt is None or not paths:
        raise click.UsageError("give a FORMAT and at least one PATH (or --list)")
    if fmt not in FORMATS:
        raise click.BadParameter(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}",
                                 param_hint="FORMAT")
    if paths.count("-") > 1:
        raise click.UsageError("stdin (-) can be read only once")
    settings = load_settings()
    lids = None
    if topology is not None:
        try:
            text = _read(str(topology)).decode("utf-8", errors="strict")
            lids = LidMap.from_nodes(parse_nodes(text))
        except UnicodeDecodeError:
            _fail(ParseError(str(topology), None, "not UTF-8 text"))
        except ParseError as error:
            _fail(error if error.file else error.in_file(str(topology)))
    opts = IngestOptions(fabric=fabric or settings.fabric, ts=_ts_option(ts_text),
                         device=device, port=port, tz=tz, year=year, lids=lids, rail=rail,
                         src=src, dst=dst, baseline_gbps=baseline_gbps,
                         job_label=job_label)
    events: list[Event] = []
    for path in paths:
        name = "<stdin>" if path == "-" else path
        try:
            events.extend(parse_input(fmt, _read(path), opts))
        except ParseError as error:
            _fail(error if error.file else error.in_file(name))
        for note in opts.notes:
            click.echo(f"fabricwatch ingest: {name}: {note}", err=True)
        opts.notes.clear()
    if print_only:
        out = sys.stdout.buffer
        for event in events:
            out.write(dumps(event) + b"\n")
        out.flush()
        return
    try:
        acked = asyncio.run(_publish(settings, events))
    except Exception as exc:  # noqa: BLE001 - any broker failure ends the command the same way
        click.echo(f"fabricwatch ingest: publishing to {settings.kafka.bootstrap_servers} "
                   f"failed: {exc}", err=True)
        sys.exit(EXIT_PUBLISH_FAILED)
    click.echo(f"published {acked} events from {len(paths)} input(s)", err=True)


COMMANDS: list[click.Command] = [ingest]
