"""``fabricwatch demo``: the main job — a simulated fabric through the whole system."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from runtime.settings import load_settings


@click.command("demo")
@click.option("--preset", default="10k-gpu", show_default=True,
              help="Simulated fabric: lab, su, 10k-gpu, 100k-port.")
@click.option("--fresh", is_flag=True,
              help="Wipe the state folder first (make demo does). Else resume: the detectors "
                   "remember the faults they reported, so the every-fault check is for a "
                   "fresh run.")
@click.option("--short", is_flag=True,
              help="Faults sooner and a 2 s sampling interval (what the end-to-end test runs).")
@click.option("--timeout", "timeout_s", type=float, default=1800.0, show_default=True,
              help="Give up after this many seconds.")
@click.option("--clean-wait", default="45s", show_default=True,
              help="The demo policy's clean-counter wait (production: 24h).")
@click.option("--live/--no-live", default=True, show_default=True,
              help="The live terminal view (off when output is not a terminal).")
@click.option("--keep-running", is_flag=True,
              help="Leave the stack and workers running afterwards (stop: fabricwatch stack down).")
@click.option("--report", "report_path", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="HTML report path [default: STATE_DIR/demo/report.html].")
def demo_command(preset: str, fresh: bool, short: bool, timeout_s: float, clean_wait: str,
                 live: bool, keep_running: bool, report_path: Path | None) -> None:
    """Run a simulated fabric with scripted faults through detection, ledger and runbooks.

    Starts the local stack, the ledger, the stream and runbook workers and the simulator,
    places three simulated jobs, injects a flapping link, a link trained at 2X, a swapped
    pair of cables, rising BER, a RoCE pause storm, a slow-not-dead link and a spine reboot,
    plays the site's technicians, and ends with a report once every runbook has reached a
    decision, naming for each fault the jobs it touched. Ctrl-C stops it all.
    """
    from fabricwatch.demo.run import Demo, DemoError, DemoOptions
    from fabricwatch.stack import StackError

    console = Console()
    settings = load_settings()
    options = DemoOptions(preset=preset, short=short, fresh=fresh, live=live,
                          timeout_s=timeout_s, clean_wait=clean_wait,
                          keep_running=keep_running, report_path=report_path)
    try:
        result = Demo(settings, options, console).run()
    except (DemoError, StackError) as exc:
        console.print(f"[red]demo failed:[/] {exc}")
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        console.print("stopped; --fresh (what make demo runs) starts over; without it the "
                      "last state resumes, and faults already reported are not again")
        raise SystemExit(130) from None
    for label, ids in result.detected.items():
        mark = "[green]✓[/]" if ids else "[red]✗[/]"
        jobs = result.jobs_touched.get(label)
        touched = f"; jobs touched: {', '.join(jobs) if jobs else 'none'}" \
            if jobs is not None else ""
        console.print(f"{mark} {label}: {len(ids)} detection(s){touched}")
    decided: dict[str, int] = {}
    for view in result.runbooks.values():
        decided[view.state] = decided.get(view.state, 0) + 1
    console.print("runbooks: " + ", ".join(f"{n} {s}" for s, n in sorted(decided.items())))
    console.print(f"alerts: {result.alerts_distinct} alert(s), {result.alerts_sent} message(s)"
                  f" to {result.alerts_to or 'nowhere'}")
    console.print(f"finished in {result.elapsed_s:,.0f} s"
                  + ("" if result.ok else f" — [red]{result.message}[/]: missing "
                     f"{result.missing}, undecided {result.undecided}"))
    raise SystemExit(0 if result.ok else 1)


COMMANDS: list[click.Command] = [demo_command]
