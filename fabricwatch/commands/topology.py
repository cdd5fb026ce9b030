"""``fabricwatch topology diff``: the discovered fabric against the cable plan.

``--discovered`` is ``ibnetdiscover`` output (default or ``-p`` format, parsed by the
collector with the pinned device naming rule) or a JSON ``topology`` event. Exit status:
0 when the fabric matches the plan, 1 when there are findings, 2 on bad input.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from runtime.settings import load_settings
from schemas import ContractError, Topology, decode, dumps
from schemas.policy import Policy
from streams.topology.logic import DiffReport, diff, guid_names_from_topology
from streams.topology.plan import Plan, load_plan, plan_from_topology

MAX_INPUT_BYTES = 512 * 1024 * 1024  # a 100k-port ibnetdiscover is ~20 MB; far beyond is not one


def _fail(message: str) -> SystemExit:
    click.echo(f"error: {message}", err=True)
    return SystemExit(2)


def _read(path: Path, what: str) -> str:
    try:
        if str(path) == "-":  # a pipe: ibnetdiscover | fabricwatch topology diff ... -
            raw = click.get_binary_stream("stdin").read(MAX_INPUT_BYTES + 1)
            if len(raw) > MAX_INPUT_BYTES:
                raise _fail(f"{what} on stdin: larger than {MAX_INPUT_BYTES} bytes")
        elif path.stat().st_size > MAX_INPUT_BYTES:
            raise _fail(f"{what} {path}: larger than {MAX_INPUT_BYTES} bytes")
        else:
            raw = path.read_bytes()
    except OSError as exc:
        raise _fail(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(f"{what} {path}: not UTF-8 text (byte {exc.start})") from None


def load_discovered(text: str, *, fabric: str, ts: int) -> tuple[Topology, dict[str, str]]:
    """The discovered topology and its GUID -> name map, from either input form.

    Raises ``ContractError`` (the collector's ``ParseError`` is one) on bad input.
    """
    if text.lstrip().startswith("{"):
        event = decode(text)
        if not isinstance(event, Topology):
            raise ContractError(f"a JSON --discovered must be a topology event, not {event.kind}",
                                "kind")
        return event, {}
    # Imported here: the collectors package is only needed for tool output.
    from collectors.ibnetdiscover import parse_ibnetdiscover, parse_nodes

    topology = parse_ibnetdiscover(text, fabric=fabric, ts=ts, source="ibnetdiscover")
    if guid_names_from_topology(topology):
        # The event already carries its nodes (GUID and name): no second parse of the text.
        return topology, {}
    return topology, {node.guid: node.name for node in parse_nodes(text)}


def render_text(report: DiffReport) -> str:
    """One line per finding (kind, ends, explanation), then a summary line."""
    lines = []
    for f in report.findings:
        lines.append(f"{f.kind:<16} {f.a_device}:{f.a_port} <-> {f.b_device}:{f.b_port}  "
                     f"{f.explanation}")
    s = report.summary
    verdict = "fabric matches the plan" if report.ok else f"{s['findings']} finding(s)"
    lines.append(f"{verdict}: {s['planned_links']} planned, {s['discovered_links']} discovered, "
                 f"{s['matched_links']} as planned; miswire {s['miswire']}, missing "
                 f"{s['missing_link']}, unexpected {s['unexpected_link']}, degraded "
                 f"{s['degraded_link']}")
    if s["rails_affected"]:
        rails = "; ".join(f"{node} {','.join(map(str, r))}"
                          for node, r in s["rails_affected"].items())
        lines.append(f"rails affected: {rails}")
    return "\n".join(lines) + "\n"


@click.group("topology")
def topology_group() -> None:
    """Check the discovered fabric against the cable plan."""


@topology_group.command("diff")
@click.option("--plan", "plan_path", default=None, type=click.Path(path_type=Path,
              dir_okay=False), help="cable plan CSV: a_device,a_port,b_device,b_port[,cable_id,"
              "width,speed] (default: FABRICWATCH_PLAN_PATH)")
@click.option("--discovered", "discovered_path", required=True,
              type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
              help="ibnetdiscover output (either format) or a JSON topology event; - for stdin")
@click.option("--format", "fmt", type=click.Choice(["json", "text"]), default="json",
              show_default=True)
@click.option("--policy", "policy_path", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="policy YAML (degradedLink expectations); default: settings")
@click.option("--fabric", default=None, help="fabric name for ibnetdiscover input "
              "(default: settings)")
def diff_command(plan_path: Path | None, discovered_path: Path, fmt: str, policy_path: Path | None,
                 fabric: str | None) -> None:
    """Diff the discovered topology against the plan: exit 0 match, 1 findings, 2 bad input."""
    settings = load_settings()
    try:
        policy = Policy.load(policy_path or settings.policy_path)
    except ContractError as exc:
        raise _fail(f"policy: {exc}") from None
    plan_path = plan_path or settings.plan_path
    if plan_path is None:
        raise _fail("no plan: give --plan PLAN.csv or set FABRICWATCH_PLAN_PATH")
    try:
        plan: Plan = load_plan(_read(plan_path, "plan"))
    except ContractError as exc:
        raise _fail(f"{plan_path}: {exc}") from None
    try:
        topology, names = load_discovered(_read(discovered_path, "discovered topology"),
                                          fabric=fabric or settings.fabric,
                                          ts=int(time.time() * 1000))
    except ContractError as exc:
        in_file = getattr(exc, "in_file", None)  # the collectors' ParseError names file:line
        raise _fail(str(in_file(str(discovered_path))) if callable(in_file)
                    else f"{discovered_path}: {exc}") from None
    try:
        report = diff(plan, topology, policy, guid_names=names)
    except ContractError as exc:
        raise _fail(f"{plan_path}: {exc}") from None
    if fmt == "json":
        click.echo(dumps(report.to_dict()).decode("utf-8"))
    else:
        click.echo(render_text(report), nl=False)
    raise SystemExit(0 if report.ok else 1)


@topology_group.command("plan")
@click.option("--discovered", "discovered_path", required=True,
              type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
              help="ibnetdiscover output (either format) or a JSON topology event; - for stdin")
@click.option("--cable-prefix", default=None, help="number the cables PREFIX1, PREFIX2, ...")
@click.option("--fabric", default=None, help="fabric name for ibnetdiscover input")
def plan_command(discovered_path: Path, cable_prefix: str | None, fabric: str | None) -> None:
    """Write a cable plan CSV that says the fabric is exactly as discovered (to bootstrap one)."""
    settings = load_settings()
    try:
        topology, _ = load_discovered(_read(discovered_path, "discovered topology"),
                                      fabric=fabric or settings.fabric,
                                      ts=int(time.time() * 1000))
    except ContractError as exc:
        in_file = getattr(exc, "in_file", None)
        raise _fail(str(in_file(str(discovered_path))) if callable(in_file)
                    else f"{discovered_path}: {exc}") from None
    click.echo(plan_from_topology(topology, cable_prefix=cable_prefix).to_csv(), nl=False)


COMMANDS: list[click.Command] = [topology_group]
