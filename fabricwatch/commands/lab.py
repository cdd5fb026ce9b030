"""``fabricwatch lab``: ibsim + the real opensm on this machine, driven by contract device names.

``lab up --topology FILE [--m-key]`` starts ibsim with the net file (ibnetdiscover format,
e.g. from ``fabricwatch sim topology``) and opensm against it (with the settings' M_Key and
protection level 2 with ``--m-key``), state and logs in ``<state_dir>/lab``;
``lab down`` stops both; ``lab status`` says whether they run. ``lab inject`` writes ibsim
console commands: ``flap DEVICE:PORT [--count N --every S]``, ``unlink``/``relink``/``reseat
DEVICE:PORT``, ``swap DEVICE:PORT DEVICE:PORT``, ``counters DEVICE:PORT NAME=VALUE...``
(``PerformanceSet``). ``lab run TOOL ARGS...`` runs one infiniband-diags tool against the lab
(a fixed list of tools, each argument checked, no shell).

Exit codes: 0 done, 1 the lab failed or is not running, 2 bad input, 3 ``status``: not running.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import click

from collectors.live.tools import check_arg
from fabricwatch.lab import COUNTER_NAME, LabError, LabStack
from runtime.settings import Settings, load_settings

TOOLS = ("ibnetdiscover", "iblinkinfo", "perfquery", "ibqueryerrors", "ibportstate",
         "smpquery", "saquery", "ibroute", "ibswitches", "ibhosts", "sminfo", "ibaddr",
         "ibtracert", "ibswinfo")


def _lab(ctx: click.Context) -> LabStack:
    settings: Settings = ctx.obj if isinstance(ctx.obj, Settings) else load_settings()
    return LabStack(settings.state_dir)


def _port(value: str) -> tuple[str, int]:
    device, sep, port = value.rpartition(":")
    if not sep or not device or not port.isdigit():
        raise click.BadParameter(f"{value!r} is not DEVICE:PORT")
    return device, int(port)


def _run(action: object) -> None:
    try:
        result = action() if callable(action) else action
    except LabError as exc:
        raise click.ClickException(str(exc)) from None
    if isinstance(result, list):
        for line in result:
            click.echo(line)
    elif result is not None:
        click.echo(json.dumps(result, indent=1, sort_keys=True))


@click.group("lab")
def lab() -> None:
    """The InfiniBand lab: ibsim, opensm and infiniband-diags on this machine."""


@lab.command("up")
@click.option("--topology", "topology", type=click.Path(exists=True, dir_okay=False,
                                                         path_type=Path), required=True,
              help="net file in ibnetdiscover format")
@click.option("--timeout", type=float, default=60.0, show_default=True)
@click.option("--m-key/--no-m-key", "use_m_key", default=False, show_default=True,
              help="Configure opensm with the M_Key of the settings "
                   "(FABRICWATCH_SECRETS__M_KEY_FILE), as the runbook worker reads it.")
@click.option("--m-key-protection", type=click.IntRange(0, 3), default=2, show_default=True,
              help="opensm's m_key_protection_level with --m-key.")
@click.pass_context
def up(ctx: click.Context, topology: Path, timeout: float, use_m_key: bool,
       m_key_protection: int) -> None:
    """Start ibsim with TOPOLOGY and opensm against it."""
    from runtime.settings import SecretFileError, read_secret

    stack = _lab(ctx)
    m_key = None
    if use_m_key:
        settings: Settings = ctx.obj if isinstance(ctx.obj, Settings) else load_settings()
        try:
            m_key = read_secret(settings.secrets.m_key, settings.secrets.m_key_file, "M_Key")
        except SecretFileError as exc:
            raise click.UsageError(str(exc)) from None
        if m_key is None:
            raise click.UsageError("--m-key: FABRICWATCH_SECRETS__M_KEY_FILE (or __M_KEY) "
                                   "is not set")
    _run(lambda: stack.up(topology, timeout_s=timeout, m_key=m_key,
                          m_key_protection_level=m_key_protection))


@lab.command("down")
@click.pass_context
def down(ctx: click.Context) -> None:
    """Stop opensm and ibsim."""
    stack = _lab(ctx)
    stopped = stack.down()
    click.echo(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@lab.command("status")
@click.pass_context
def status(ctx: click.Context) -> None:
    """Whether ibsim and opensm run (exit 3 when not)."""
    try:
        st = _lab(ctx).status()
    except LabError as exc:
        click.echo(str(exc))
        sys.exit(3)
    click.echo(json.dumps(st, indent=1, sort_keys=True))
    if not st["running"]:
        sys.exit(3)


@lab.group("inject")
def inject() -> None:
    """Drive ibsim's console with contract device names."""


@inject.command("flap")
@click.argument("where")
@click.option("--count", type=click.IntRange(1, 1000), default=3, show_default=True)
@click.option("--every", type=click.FloatRange(0.05, 3600), default=2.0, show_default=True,
              help="seconds per down/up cycle")
@click.pass_context
def flap(ctx: click.Context, where: str, count: int, every: float) -> None:
    device, port = _port(where)
    stack = _lab(ctx)
    _run(lambda: stack.flap(device, port, count=count, every_s=every))


@inject.command("unlink")
@click.argument("where")
@click.pass_context
def unlink(ctx: click.Context, where: str) -> None:
    device, port = _port(where)
    stack = _lab(ctx)
    _run(lambda: [stack.unlink(device, port)])


@inject.command("relink")
@click.argument("where")
@click.pass_context
def relink(ctx: click.Context, where: str) -> None:
    device, port = _port(where)
    stack = _lab(ctx)
    _run(lambda: [stack.relink(device, port)])


@inject.command("reseat")
@click.argument("where")
@click.pass_context
def reseat(ctx: click.Context, where: str) -> None:
    device, port = _port(where)
    stack = _lab(ctx)
    _run(lambda: stack.reseat(device, port))


@inject.command("swap")
@click.argument("first")
@click.argument("second")
@click.pass_context
def swap(ctx: click.Context, first: str, second: str) -> None:
    a, ap = _port(first)
    b, bp = _port(second)
    stack = _lab(ctx)
    _run(lambda: stack.swap(a, ap, b, bp))


@inject.command("counters")
@click.argument("where")
@click.argument("values", nargs=-1, required=True)
@click.pass_context
def counters(ctx: click.Context, where: str, values: tuple[str, ...]) -> None:
    """Set counters: NAME=VALUE (PortCounters.NAME by default, or PortCountersExtended.NAME)."""
    device, port = _port(where)
    parsed: dict[str, int] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not value.isdigit() or not COUNTER_NAME.match(name):
            raise click.BadParameter(f"{item!r} is not NAME=VALUE (NAME a PortCounters or "
                                     "PortCountersExtended field, VALUE an integer)")
        parsed[name] = int(value)
    stack = _lab(ctx)
    _run(lambda: stack.set_counters(device, port, parsed))


@lab.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("tool", type=click.Choice(TOOLS))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--timeout", type=float, default=60.0, show_default=True)
@click.pass_context
def run(ctx: click.Context, tool: str, args: tuple[str, ...], timeout: float) -> None:
    """Run an infiniband-diags TOOL against the lab."""
    try:
        checked = [check_arg(a) for a in args]
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    try:
        runner = _lab(ctx).tool_runner()
    except LabError as exc:
        raise click.ClickException(str(exc)) from None
    res = asyncio.run(runner.run([tool, *checked], timeout))
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    sys.exit(1 if res.exit_code is None else res.exit_code)


COMMANDS: list[click.Command] = [lab]
