"""The Arrow counters path writes exactly the rows the JSON row path wrote, on the real engine.

The same batches (several devices, a host agent's HCA samples, unreadable ports, optic
serials, nulls, the later counters, resets, a port polled twice in a batch, a sample twice,
a replayed batch, a sample later than the port's last stored one) go into one ledger three
times, each under its own fabric: through the row path (JSONCompactEachRow), the Arrow path
of the embedded backend (ArrowStream into chdb) and the Arrow path of the server backend
(clickhouse-connect's ``insert_arrow`` to the ledger's ClickHouse HTTP endpoint). Every
counter table then holds the same rows under each fabric, deltas, reset bits, hours and
late samples included.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ledger.base import LedgerBase
from ledger.embedded import EmbeddedLedger
from ledger.http import LedgerHTTPServer
from ledger.server import ServerLedger
from schemas import Counters, PortSample

from .conftest import history_start

pytestmark = pytest.mark.integration

# Every table the counter samples reach, and the columns that say when, not what.
TABLES = ("counter_samples", "counter_last", "counter_hourly", "counter_late")
WALL_CLOCK = {"fabric", "recorded", "inserted_at"}


def _sample(port: int, k: int, **extra: Any) -> PortSample:
    return PortSample.model_validate({
        "port": port, "symbol_errors": k * port, "link_downed": k // 3,
        "rcv_errors": None if port == 3 else k, "xmit_wait": 1000 * k + port,
        "fec_corrected": 37 * k, "port_xmit_data": (1 << 40) + k * 4096,
        "phy_link_down": k % 2, "raw_ber": 1.5e-12 * (k + 1), "effective_ber": 0.0,
        "module_temp_c": 45.25 + k / 8, "rx_power_dbm": -2.3 - port / 10,
        "width": "4X", "speed": "NDR" if port % 2 else None, **extra})


def _batches(fabric: str, t0: int) -> list[list[Counters]]:
    def leaf(d: int, k: int, ts: int) -> Counters:
        ports = [_sample(p, k) for p in range(1, 5)]
        ports.append(_sample(5, k, optic_serial=f"MT{d}1X" if k % 2 else ""))
        ports.append(PortSample(port=6, error="perfquery timed out"))
        return Counters(id=f"leaf{d}-{k}", ts=ts, fabric=fabric, source="sim",
                        device=f"leaf-su01-r{d}", ports=ports)

    def host(k: int, ts: int, reset: bool = False) -> Counters:
        return Counters(id=f"host-{k}", ts=ts, fabric=fabric, source="host-agent",
                        device="node0001", ports=[
                            _sample(1, 0 if reset else k, device="node0001/mlx5_0"),
                            _sample(1, k, device="node0001/mlx5_1", cable_serial="CB-7")])

    step = 10_000
    first = [leaf(d, 1, t0) for d in range(3)] + [host(1, t0)]
    # two polls of every port in one batch, the newer first, and one message twice
    second = [leaf(d, 3, t0 + 2 * step) for d in range(3)]
    second += [leaf(d, 2, t0 + step) for d in range(3)]
    second += [host(2, t0 + step), host(2, t0 + step)]
    # a reset on one HCA, and a sample older than its port's last stored one (late)
    third = [host(4, t0 + 3 * step, reset=True), leaf(0, 2, t0 + step // 2)]
    return [first, second, first, third]


def _contents(ledger: LedgerBase, table: str, fabric: str) -> list[tuple[Any, ...]]:
    columns = [r["name"] for r in ledger.query(
        "SELECT name FROM system.columns WHERE database = currentDatabase() "
        "AND table = {t:String} ORDER BY position", {"t": table})]
    keep = [c for c in columns if c not in WALL_CLOCK]
    rows = ledger.query(
        f"SELECT {', '.join(keep)} FROM {table} FINAL WHERE fabric = {{f:String}}",  # noqa: S608
        {"f": fabric})
    return sorted((tuple(row[c] for c in keep) for row in rows), key=repr)


@pytest.fixture
def server(ledger: EmbeddedLedger) -> Iterator[ServerLedger]:
    with LedgerHTTPServer(ledger, port=0, allow_writes=True) as endpoint:
        client = ServerLedger(endpoint.start())
        try:
            yield client
        finally:
            client.close()


def test_arrow_and_row_paths_write_the_same_counter_rows(
        ledger: EmbeddedLedger, server: ServerLedger) -> None:
    t0 = history_start()
    written: dict[str, list[int]] = {}
    for fabric, writer, mode in (("rows", ledger, "rows"), ("arrow", ledger, "arrow"),
                                 ("server-arrow", server, "arrow")):
        writer.counter_insert = mode
        written[fabric] = [writer.write(batch) for batch in _batches(fabric, t0)]
    ledger.counter_insert = "arrow"
    assert written["arrow"] == written["rows"] == written["server-arrow"]
    assert written["rows"][0] == 3 * 5 + 2  # the unreadable ports are not written
    for table in TABLES:
        want = _contents(ledger, table, "rows")
        assert want, table
        assert _contents(ledger, table, "arrow") == want, table
        assert _contents(ledger, table, "server-arrow") == want, table
    # what the batches mean, so that two equally wrong paths cannot pass
    late = ledger.query("SELECT device, port FROM counter_late_samples "
                        "WHERE fabric = 'arrow' ORDER BY port")
    assert [(r["device"], r["port"]) for r in late] == [("leaf-su01-r0", p) for p in range(1, 6)]
    resets = ledger.query(
        "SELECT reset_mask, d_symbol_errors, d_xmit_wait FROM counter_samples FINAL "
        "WHERE fabric = 'arrow' AND device = 'node0001/mlx5_0' ORDER BY ts")
    assert [r["reset_mask"] & 1 for r in resets] == [0, 0, 1]
    assert [r["d_xmit_wait"] for r in resets] == [0, 1000, 1]
    serials = ledger.query(
        "SELECT device, optic_serial FROM counter_last FINAL WHERE fabric = 'arrow' "
        "AND optic_serial IS NOT NULL ORDER BY device")
    assert [(r["device"], r["optic_serial"]) for r in serials] == [
        ("leaf-su01-r0", "MT01X"), ("leaf-su01-r1", "MT11X"), ("leaf-su01-r2", "MT21X"),
        ("node0001/mlx5_1", "CB-7")]
