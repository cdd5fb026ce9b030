"""Ledger fixtures: the real ClickHouse engine (chdb) in temporary folders.

The engine serves one data folder per process at a time, so every fixture here closes its
ledger before the next opens one; a module-scoped ledger holds the folder for its module.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.embedded import EmbeddedLedger
from schemas.events import Event

from .synth import Expected, history

HOUR_MS = 3_600_000


def history_start() -> int:
    """Four whole hours ago: recent enough for the views that read "the last 24 h"."""
    return (int(time.time()) // 3600 - 4) * HOUR_MS


@pytest.fixture
def fresh_ledger(tmp_path: Path) -> Iterator[EmbeddedLedger]:
    ledger = EmbeddedLedger(tmp_path / "ledger")
    try:
        yield ledger
    finally:
        ledger.close()


@pytest.fixture
def ledger(fresh_ledger: EmbeddedLedger) -> EmbeddedLedger:
    fresh_ledger.migrate()
    return fresh_ledger


@pytest.fixture(scope="module")
def synth() -> tuple[list[Event], Expected]:
    return history(history_start())


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory,
           synth: tuple[list[Event], Expected]) -> Iterator[EmbeddedLedger]:
    ledger = EmbeddedLedger(tmp_path_factory.mktemp("loaded") / "ledger")
    try:
        ledger.migrate()
        ledger.write(synth[0])
        yield ledger
    finally:
        ledger.close()
