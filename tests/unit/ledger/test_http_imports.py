"""Finding or calling a ledger endpoint does not load the ClickHouse engine."""

from __future__ import annotations

import subprocess
import sys


def test_the_endpoint_client_does_not_load_chdb() -> None:
    # the runbook worker and the CLI only find and call an endpoint; chdb costs ~0.6 s of CPU
    code = ("import sys, ledger.http\n"
            "from ledger.http import advertised_endpoint, endpoint_client\n"
            "print(sorted(m for m in sys.modules if m == 'chdb' or m.startswith('chdb.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"
