"""``fabricwatch policy check FILE``: print the effective policy, or the error and its path."""

from __future__ import annotations

from pathlib import Path

import click

from schemas.errors import ContractError
from schemas.policy import Policy


@click.group("policy")
def policy_group() -> None:
    """Check and show detection and automation policies."""


@policy_group.command("check")
@click.argument("path", type=click.Path(path_type=Path, dir_okay=False))
def check(path: Path) -> None:
    """Validate PATH and print the effective policy (every default filled in)."""
    try:
        policy = Policy.load(path)
    except ContractError as exc:
        where = f" at {exc.path}" if exc.path else ""
        click.echo(f"error: {path}{where}: {exc.reason}", err=True)
        raise SystemExit(2) from None
    click.echo(policy.to_yaml(), nl=False)


COMMANDS: list[click.Command] = [policy_group]
