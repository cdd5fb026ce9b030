"""``fabricwatch report``: the HTML report (and a terminal summary) from any ledger."""

from __future__ import annotations

import time
from pathlib import Path

import click
from rich.console import Console

from runtime.settings import load_settings
from schemas.policy import parse_duration_s


@click.command("report")
@click.option("--since", default="24h", show_default=True, help="How far back (e.g. 30m, 24h, 7d).")
@click.option("--out", "out", type=click.Path(path_type=Path, dir_okay=False),
              default=Path("fabricwatch-report.html"), show_default=True)
def report_command(since: str, out: Path) -> None:
    """Write the report of the last SINCE from the ledger the settings select."""
    from fabricwatch.commands.ledger import _opened
    from fabricwatch.report.build import alerts_from_file, build_report
    from fabricwatch.report.html import render_html
    from fabricwatch.report.terminal import print_summary

    try:
        seconds = parse_duration_s(since)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    settings = load_settings()
    now_ms = int(time.time() * 1000)
    t = settings.temporal
    with _opened(settings) as (ledger, _how):
        report = build_report(ledger, since_ms=now_ms - int(seconds * 1000), until_ms=now_ms,
                              temporal_ui=f"http://{t.host}:{t.ui_port}/namespaces/"
                                          f"{t.namespace}/workflows")
    if settings.alerts_file.exists():  # the alerts the notifier recorded (its file)
        report.alerts = alerts_from_file(settings.alerts_file, since_ms=report.since_ms,
                                         until_ms=report.until_ms)
        report.alerts_file = str(settings.alerts_file)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render_html(report), encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write {out}: {exc.strerror or exc}") from None
    console = Console()
    print_summary(report, console)
    console.print(f"report: {out}")


COMMANDS: list[click.Command] = [report_command]
