"""CLI command groups, one module per area, assembled by ``fabricwatch.cli``.

Each module in this package exposes ``COMMANDS``: a list of click commands or groups.
Importing is lazy per area so that a broken optional area never hides the others' help.
"""

from __future__ import annotations

import importlib
import pkgutil

import click


def REGISTERED() -> list[click.Command]:  # noqa: N802 - reads as a constant at the call site
    commands: list[click.Command] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        commands.extend(getattr(module, "COMMANDS", []))
    return commands
