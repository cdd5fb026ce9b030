"""``fabricwatch job impact`` and ``fabricwatch link jobs``: jobs and the links they cross.

``job impact JOB``: every link on the job's paths that had an episode in the window (a
detection of any kind, or a runbook's isolation), ranked by how much of the job's traffic
crosses it, with the detection and its time. ``link jobs DEVICE:PORT`` (or ``DEVICE`` for a
whole switch): the jobs running now (or ``--at``) whose traffic the cable carries — what an
operator checks before isolating it. Both read the ledger (placements, the latest topology,
detections, actions); the reasoning is ``streams.topology.jobpaths``.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from typing import Any, NoReturn

import click
import orjson

from fabricwatch.commands.ledger import _opened, render
from ledger import jobs as ledger_jobs
from runtime.settings import load_settings
from schemas import ts_to_ms
from schemas.policy import parse_duration_s
from streams.topology.jobpaths import held_window, job_impact, job_paths, jobs_on_port

EXIT_BAD_INPUT = 2


def _fail(message: str) -> NoReturn:
    click.echo(f"fabricwatch: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def _when(text: str | None, what: str) -> int:
    if text is None:
        return int(time.time() * 1000)
    try:
        return ts_to_ms(int(text)) if text.strip().isdigit() else ts_to_ms(text)
    except ValueError as exc:
        _fail(f"{what}: {exc}")


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds")


def _emit(doc: dict[str, Any], rows: list[dict[str, Any]], fmt: str, header: str) -> None:
    if fmt == "json":
        click.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
        return
    click.echo(header)
    click.echo(render(rows, "table"))


_format = click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
                       show_default=True)
_fabric = click.option("--fabric", default=None, help="Fabric [default: the fabric setting].")


@click.group("job")
def job_group() -> None:
    """Jobs on the fabric: which links a job crosses and what happened to them."""


@job_group.command("impact")
@click.argument("job")
@click.option("--since", "since", default="24h", show_default=True,
              help="Window length back from --until (e.g. 6h, 2d).")
@click.option("--until", "until", default=None, help="End of the window (RFC 3339 or epoch "
              "ms) [default: now].")
@_fabric
@_format
def impact_command(job: str, since: str, until: str | None, fabric: str | None,
                   fmt: str) -> None:
    """The links on JOB's paths with an episode in the window, the most depended-on first."""
    try:
        window_s = parse_duration_s(since)
    except ValueError as exc:
        _fail(f"--since: {exc}")
    until_ms = _when(until, "--until")
    since_ms = until_ms - int(window_s * 1000)
    settings = load_settings()
    fabric_name = fabric or settings.fabric
    with _opened(settings) as (ledger, _where):
        placement = ledger_jobs.current_placement(ledger, fabric_name, job, until_ms=until_ms)
        if placement is None:
            _fail(f"no placement of job {job!r} on fabric {fabric_name!r} in the ledger")
        fabric_map = ledger_jobs.fabric_map(ledger, fabric_name, since_ms=since_ms,
                                            until_ms=until_ms)
        if fabric_map is None:
            _fail(f"the ledger holds no topology of fabric {fabric_name!r}: the job's links "
                  "cannot be known")
        paths = job_paths(fabric_map, placement.nodes)
        found = job_impact(paths, ledger_jobs.episodes(ledger, fabric_name, since_ms=since_ms,
                                                       until_ms=until_ms),
                           window=held_window(placement))
    rows = [{"share %": f"{r.link.share * 100:.2f}", "link": r.link.cable.key,
             "tier": r.link.cable.tier, "rails": ",".join(map(str, r.link.rails)),
             "detection": r.episode.kind, "port": f"{r.episode.device}:{r.episode.port}",
             "first": _iso(r.episode.first_ms), "last": _iso(r.episode.last_ms),
             "n": r.episode.count} for r in found]
    extra_hops = [rp for rp in paths.rails if rp.off_rail or len(rp.leaves) > 1]
    doc = {"job": job, "fabric": fabric_name, "since_ms": since_ms, "until_ms": until_ms,
           "placement": placement.to_wire(), "links_on_paths": len(paths.links),
           "rails": [r.to_dict() for r in paths.rails],
           "missing_nodes": list(paths.missing_nodes),
           "impact": [r.to_dict() for r in found]}
    header = (f"job {job} ({len(placement.nodes)} nodes, {placement.state}): "
              f"{len(paths.links)} links on its paths, {len(found)} episode(s) on them "
              f"from {_iso(since_ms)} to {_iso(until_ms)}")
    for rp in extra_hops:
        header += (f"\n  rail {rp.rail}: {len(rp.leaves)} leaves, {rp.hops} hops"
                   + (f"; off-rail NICs {', '.join(rp.off_rail)}" if rp.off_rail else ""))
    if paths.missing_nodes:
        header += f"\n  not in the topology: {', '.join(paths.missing_nodes)}"
    _emit(doc, rows, fmt, header)


@click.group("link")
def link_group() -> None:
    """Links of the fabric and the jobs they carry."""


@link_group.command("jobs")
@click.argument("target", metavar="DEVICE[:PORT]")
@click.option("--at", "at", default=None, help="When (RFC 3339 or epoch ms) [default: now].")
@_fabric
@_format
def link_jobs_command(target: str, at: str | None, fabric: str | None, fmt: str) -> None:
    """The running jobs whose traffic crosses the cable at DEVICE:PORT (or any cable of
    DEVICE), largest share first: what isolating it would touch."""
    device, sep, port_text = target.rpartition(":")
    port: int | None
    if sep and port_text.isdigit():
        port = int(port_text)
    else:
        device, port = target, None
    if not device:
        _fail(f"{target!r} is not DEVICE:PORT or DEVICE")
    at_ms = _when(at, "--at")
    settings = load_settings()
    fabric_name = fabric or settings.fabric
    with _opened(settings) as (ledger, _where):
        fabric_map = ledger_jobs.fabric_map(ledger, fabric_name, since_ms=at_ms - 86_400_000,
                                            until_ms=at_ms + 1)
        if fabric_map is None:
            _fail(f"the ledger holds no topology of fabric {fabric_name!r}")
        cabled = (fabric_map.cable_at(device, port) is not None if port is not None
                  else any(c.touches(device) for c in fabric_map.cables))
        if not cabled:
            _fail(f"{target} is not cabled in the topology of fabric {fabric_name!r}")
        touched = jobs_on_port(fabric_map, ledger_jobs.placements(ledger, fabric_name,
                                                                  until_ms=at_ms + 1),
                               device, port, at_ms)
    rows = [{"job": t.job, "share %": f"{t.share * 100:.2f}", "link": t.link,
             "nodes": t.nodes, "gpus": "" if t.gpus is None else t.gpus} for t in touched]
    doc = {"target": target, "fabric": fabric_name, "at_ms": at_ms,
           "jobs": [t.to_dict() for t in touched]}
    _emit(doc, rows, fmt, f"{target}: {len(touched)} running job(s) cross it at {_iso(at_ms)}")


COMMANDS: list[click.Command] = [job_group, link_group]
