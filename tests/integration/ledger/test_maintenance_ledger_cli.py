"""``fabricwatch maintenance list --ledger``: the windows the ledger holds, folded as the topic."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from ledger.embedded import EmbeddedLedger
from runtime.settings import Settings
from schemas import Maintenance

pytestmark = pytest.mark.integration

FABRICWATCH = str(Path(sys.executable).parent / "fabricwatch")


def test_list_from_the_ledger(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    common = {"fabric": "f1", "source": "fabricwatch", "scope": "device", "reason": "swap",
              "actor": "alice"}
    live = Maintenance.model_validate({**common, "id": "a1", "ts": now - 60_000,
                                       "window": "mw-live", "target": "spine-3",
                                       "start": now - 60_000, "end": now + 3_600_000,
                                       "exclusion": True})
    gone = Maintenance.model_validate({**common, "id": "b1", "ts": now - 120_000,
                                       "window": "mw-gone", "target": "leaf-su01-r2",
                                       "start": now - 120_000, "end": now + 3_600_000})
    ended = gone.model_copy(update={"id": "b2", "ts": now - 30_000, "state": "ended"})
    settings = Settings(state_dir=tmp_path / "state")
    ledger = EmbeddedLedger(settings.ledger_path)
    try:
        ledger.migrate()
        assert ledger.write([ended, live, gone]) == 3  # order of arrival does not matter
    finally:
        ledger.close()
    env = {**os.environ, "FABRICWATCH_STATE_DIR": str(settings.state_dir),
           "FABRICWATCH_KAFKA__BOOTSTRAP": "127.0.0.1:9"}  # never read: the ledger is asked

    def listed(*args: str) -> list[dict[str, object]]:
        proc = subprocess.run([FABRICWATCH, "maintenance", "list", "--ledger", "--format",
                               "json", *args], capture_output=True, env=env, check=False,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        rows: list[dict[str, object]] = orjson.loads(proc.stdout)
        return rows

    (row,) = listed()
    assert (row["window"], row["target"], row["exclusion"], row["in_force"]) == (
        "mw-live", "spine-3", True, True)
    every = {r["window"]: r for r in listed("--all")}
    assert every["mw-gone"]["state"] == "ended" and not every["mw-gone"]["in_force"]
