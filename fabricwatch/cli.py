"""The ``fabricwatch`` command: one click group, with a sub-command module per area."""

from __future__ import annotations

import click

from fabricwatch.commands import REGISTERED


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """fabricwatch: fabric operations for GPU-cluster InfiniBand and RoCE."""


for _command in REGISTERED():
    main.add_command(_command)
