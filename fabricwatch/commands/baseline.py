"""``fabricwatch baseline show | pin | unpin``: the pinned probe baselines probation judges by.

A baseline is what a healthy link of a rail carries for one probe (``ib_write_bw``,
``nccl_allreduce``) at one message size and scale (ranks spanned). ``pin`` takes the
bandwidth given (``--gbps``) or the median of the ledger's probe runs in a window whose
ends had no detection (``--from-ledger --since 7d``), and records who pinned it and when;
``--link DEV:PORT`` names the links the pinned runs crossed (probation refuses a baseline
measured across the cable it judges). ``unpin`` withdraws one, recorded the same way.
Exit 2 on bad input.
"""

from __future__ import annotations

import getpass
import sys
import time
from typing import Any, NoReturn

import click
import orjson

from fabricwatch.commands.ledger import _opened, render
from ledger.baselines import PROBES, BaselineError, PinnedBaseline, current, healthy_median
from ledger.baselines import pin as pin_baseline
from ledger.baselines import unpin as unpin_baseline
from runtime.settings import load_settings
from schemas.policy import parse_duration_s

MIN_RUNS = 3  # fewer healthy runs than this are not a baseline


def _fail(message: str) -> NoReturn:
    click.echo(f"fabricwatch: {message}", err=True)
    sys.exit(2)


def _migrated(ledger: Any, where: str) -> None:
    # the embedded ledger is this command's own: bring it to the schema with baselines (a
    # server or a running owner migrates itself)
    if where == "embedded":
        ledger.migrate()


_fabric = click.option("--fabric", default=None, help="Fabric [default: the fabric setting].")
_key = [
    click.option("--probe", type=click.Choice(PROBES), required=True),
    click.option("--size", "size_bytes", type=click.IntRange(0), required=True,
                 help="Message size in bytes (ib_write_bw 65536, all-reduce 1073741824)."),
    click.option("--scale", type=click.IntRange(1), default=2, show_default=True,
                 help="Ranks the probe spans (2: a pair)."),
]


def _with_key(fn: Any) -> Any:
    for option in reversed(_key):
        fn = option(fn)
    return fn


@click.group("baseline")
def baseline_group() -> None:
    """Pinned probe baselines (probation's yardstick)."""


@baseline_group.command("show")
@_fabric
@click.option("--rail", type=click.IntRange(0, 65535), default=None)
@click.option("--all", "show_all", is_flag=True, help="Include unpinned keys.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
def show_command(fabric: str | None, rail: int | None, show_all: bool, fmt: str) -> None:
    """The baselines pinned now."""
    settings = load_settings()
    with _opened(settings) as (ledger, _):
        rows = current(ledger, fabric or settings.fabric, rail, include_unpinned=show_all)
    docs = [b.to_json() for b in rows]
    if fmt == "json":
        click.echo(orjson.dumps(docs, option=orjson.OPT_INDENT_2).decode())
        return
    if not docs:
        click.echo("no baselines pinned (fabricwatch baseline pin)")
        return
    click.echo(render([{**d, "links": ",".join(d["links"])} for d in docs], "table"))


@baseline_group.command("pin")
@_fabric
@click.option("--rail", "rails", type=click.IntRange(0, 65535), required=True, multiple=True,
              help="The rail (repeat it to pin one bandwidth on several).")
@_with_key
@click.option("--gbps", type=float, default=None, help="The healthy bandwidth, Gb/s.")
@click.option("--from-ledger", is_flag=True,
              help="The median of the ledger's runs in --since whose ends had no detection.")
@click.option("--since", default="7d", show_default=True, help="The window for --from-ledger.")
@click.option("--link", "links", multiple=True, metavar="DEV:PORT",
              help="A link the pinned runs crossed (--from-ledger adds the runs' ends).")
@click.option("--note", default=None)
@click.option("--actor", default=None, help="Who pins it (default: your login name).")
def pin_command(fabric: str | None, rails: tuple[int, ...], probe: str, size_bytes: int,
                scale: int,
                gbps: float | None, from_ledger: bool, since: str, links: tuple[str, ...],
                note: str | None, actor: str | None) -> None:
    """Pin a baseline for (fabric, rail, probe, size, scale)."""
    settings = load_settings()
    if (gbps is None) == (not from_ledger):
        _fail("give --gbps or --from-ledger (one of them)")
    if from_ledger and len(rails) > 1:
        _fail("--from-ledger pins one rail at a time (each rail's own runs)")
    now = int(time.time() * 1000)
    name = fabric or settings.fabric
    with _opened(settings, for_write=True) as (ledger, where):
        _migrated(ledger, where)
        for rail in rails:
            ends = tuple(links)
            value, why = gbps, note
            if from_ledger:
                try:
                    window_ms = int(parse_duration_s(since) * 1000)
                except ValueError as exc:
                    _fail(f"--since: {exc}")
                runs, median, seen = healthy_median(ledger, name, rail, probe, size_bytes,
                                                    now - window_ms, now)
                if median is None or runs < MIN_RUNS:
                    _fail(f"only {runs} healthy run(s) of {probe} {size_bytes} B on rail {rail} "
                          f"in {since}; need {MIN_RUNS}")
                value = median
                ends = tuple(sorted({*ends, *seen}))
                why = why or f"median of {runs} healthy runs in {since}"
            assert value is not None  # noqa: S101 - one of the two was given
            try:
                pinned = pin_baseline(ledger, PinnedBaseline(
                    fabric=name, rail=rail, probe=probe, size_bytes=size_bytes, scale=scale,
                    gbps=round(value, 3), pinned_by=actor or getpass.getuser(), pinned_ts=now,
                    links=ends, note=why))
            except BaselineError as exc:
                _fail(str(exc))
            click.echo(f"pinned {pinned.probe} rail {pinned.rail} {pinned.size_bytes} B scale "
                       f"{pinned.scale}: {pinned.gbps} Gb/s by {pinned.pinned_by}")


@baseline_group.command("unpin")
@_fabric
@click.option("--rail", type=click.IntRange(0, 65535), required=True)
@_with_key
@click.option("--actor", default=None, help="Who unpins it (default: your login name).")
def unpin_command(fabric: str | None, rail: int, probe: str, size_bytes: int, scale: int,
                  actor: str | None) -> None:
    """Withdraw a pinned baseline (probation then holds for a human until one is pinned)."""
    settings = load_settings()
    name = fabric or settings.fabric
    with _opened(settings, for_write=True) as (ledger, where):
        _migrated(ledger, where)
        have = [b for b in current(ledger, name, rail) if (b.probe, b.size_bytes, b.scale)
                == (probe, size_bytes, scale)]
        if not have:
            _fail(f"no baseline pinned for rail {rail} {probe} {size_bytes} B scale {scale}")
        unpin_baseline(ledger, PinnedBaseline(
            fabric=name, rail=rail, probe=probe, size_bytes=size_bytes, scale=scale,
            gbps=have[0].gbps, pinned_by=actor or getpass.getuser(),
            pinned_ts=int(time.time() * 1000)))
    click.echo(f"unpinned {probe} rail {rail} {size_bytes} B scale {scale}")


COMMANDS: list[click.Command] = [baseline_group]
