"""``fabricwatch replay --policy FILE INPUT``: backtest a policy on a JSON-lines history.

INPUT is a path or ``-`` (stdin). Each output line is one detection or one incident message
(``kind: "incident"``: its id, cause, root device, state and members) as contract JSON;
invalid input lines are reported on stderr with their line number and skipped. Exit code
0 on success (with or without detections), 2 on a bad policy or an unreadable input.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click

from schemas import encode
from schemas.errors import ContractError
from schemas.events import Detection
from schemas.policy import Policy
from streams.replay import replay_all


def _lines(source: str) -> Iterator[bytes]:
    if source == "-":
        yield from sys.stdin.buffer
        return
    with Path(source).open("rb") as fh:
        yield from fh


@click.command("replay")
@click.option("--policy", "policy_path", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Policy YAML to judge with (default: built-in defaults).")
@click.argument("source", metavar="INPUT")
def replay_command(policy_path: Path | None, source: str) -> None:
    """Run INPUT (JSON lines of contract events, or - for stdin) through the detectors."""
    try:
        policy = Policy.load(policy_path)
    except ContractError as exc:
        where = f" at {exc.path}" if exc.path else ""
        click.echo(f"error: {policy_path}{where}: {exc.reason}", err=True)
        raise SystemExit(2) from None
    if source != "-" and not Path(source).is_file():
        click.echo(f"error: {source}: no such file", err=True)
        raise SystemExit(2)
    errors = 0

    def on_error(lineno: int, exc: ContractError) -> None:
        nonlocal errors
        errors += 1
        where = f" at {exc.path}" if exc.path else ""
        click.echo(f"line {lineno}: {exc.reason}{where}; skipped", err=True)

    out = sys.stdout.buffer
    count = incidents = 0
    try:
        for item in replay_all(_lines(source), policy, on_error=on_error):
            out.write(encode(item) + b"\n")
            if isinstance(item, Detection):
                count += 1
            else:
                incidents += 1
    except OSError as exc:
        click.echo(f"error: {source}: {exc.strerror}", err=True)
        raise SystemExit(2) from None
    out.flush()
    click.echo(f"{count} detection(s), {incidents} incident message(s), {errors} invalid "
               "line(s) skipped", err=True)


COMMANDS: list[click.Command] = [replay_command]
