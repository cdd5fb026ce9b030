"""The embedded ledger's ClickHouse HTTP endpoint, with real clients over real HTTP:
clickhouse-connect (compressed and not), ServerLedger, and plain HTTP as curl sends it."""

from __future__ import annotations

import datetime as dt
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import clickhouse_connect
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from ledger.embedded import EmbeddedLedger
from ledger.http import ENDPOINT_FILE, LedgerHTTPServer, advertised_endpoint
from ledger.server import ServerLedger
from schemas import PortEvent

from .conftest import history_start
from .synth import history

pytestmark = pytest.mark.integration


@pytest.fixture
def endpoint(ledger: EmbeddedLedger, tmp_path: Path) -> Iterator[str]:
    with LedgerHTTPServer(ledger, port=0, allow_writes=True) as server:
        yield server.start(tmp_path)


@pytest.fixture
def readonly(ledger: EmbeddedLedger) -> Iterator[str]:
    with LedgerHTTPServer(ledger, port=0) as server:
        yield server.start()


def _http(url: str, data: bytes | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=data, headers=headers or {})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 - loopback
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


@pytest.mark.parametrize("compress", [False, True])
def test_clickhouse_connect_round_trip(endpoint: str, compress: bool) -> None:
    port = int(endpoint.rsplit(":", 1)[1])
    client = clickhouse_connect.get_client(host="127.0.0.1", port=port, compress=compress)
    try:
        assert client.server_version.startswith("26.")
        assert client.query("SELECT {x:UInt32} * 2 AS y", parameters={"x": 21}).result_rows == [
            (42,)]
        client.command("CREATE TABLE IF NOT EXISTS cc (a UInt32, s String, "
                       "t DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY a")
        now = dt.datetime.now(dt.UTC)
        # Large enough for several blocks (each its own lz4 frame when compressed).
        client.insert("cc", [[i, f"s{i}", now] for i in range(120_000)],
                      column_names=["a", "s", "t"])
        assert client.query("SELECT count(), sum(a) FROM cc").result_rows == [
            (120_000, sum(range(120_000)))]
        df_rows = client.query("SELECT a, s FROM cc WHERE a < 3 ORDER BY a",
                               settings={"max_threads": 1}).result_rows
        assert df_rows == [(0, "s0"), (1, "s1"), (2, "s2")]
        with pytest.raises(DatabaseError, match="UNKNOWN_TABLE|60"):
            client.query("SELECT * FROM no_such_table")
    finally:
        client.command("DROP TABLE IF EXISTS cc")
        client.close()


def test_server_ledger_writes_and_reads_through_the_endpoint(endpoint: str) -> None:
    server = ServerLedger(endpoint)
    try:
        events, exp = history(history_start(), hours=1)
        first, again = server.write(events), server.write(events)
        # a replay hands the engine the same rows (which collapse under FINAL) except the
        # runbook records, whose stored ids are not inserted again
        actions = sum(1 for e in events if e.kind == "action")
        assert first > 0 and actions > 0 and again == first - actions
        rows = server.query("SELECT count() AS n FROM counter_samples")
        ports = len({(e.device, s.port) for e in events if e.kind == "counters"
                     for s in e.ports})  # type: ignore[union-attr]
        assert rows == [{"n": ports * 60}]  # replay added nothing
        got = server.query("SELECT ts FROM port_events FINAL ORDER BY ts LIMIT 1")
        assert got[0]["ts"].tzinfo is not None
        assert server.migrate() == []
    finally:
        server.close()


def test_plain_http_like_curl(endpoint: str, ledger: EmbeddedLedger) -> None:
    ledger.write([PortEvent(id="e1", ts=history_start(), fabric="f", source="sim",
                            device="leaf-su01-r1", port=3, state="down")])
    q = urllib.parse.quote("SELECT device, port FROM port_events FINAL FORMAT JSON")
    status, headers, body = _http(f"{endpoint}/?query={q}")
    assert status == 200 and headers["X-ClickHouse-Format"] == "JSON"
    assert json.loads(body)["data"] == [{"device": "leaf-su01-r1", "port": 3}]
    status, _, body = _http(endpoint + "/?param_p=3&default_format=CSV",
                            data=b"SELECT device FROM port_events WHERE port = {p:UInt16}")
    assert (status, body) == (200, b'"leaf-su01-r1"\n')
    status, _, body = _http(endpoint, data=b"SELECT 1 AS a, 'x' AS b")
    assert (status, body) == (200, b"1\tx\n")  # TabSeparated by default
    status, _, _ = _http(endpoint, data=b"CREATE TABLE t2 (a UInt8) ENGINE = Memory")
    assert status == 200
    status, _, _ = _http(endpoint, data=b"INSERT INTO t2 FORMAT CSV\n1\n2\n")
    assert status == 200
    assert _http(endpoint + "/?query=SELECT%20sum(a)%20FROM%20t2")[2] == b"3\n"
    status, headers, body = _http(endpoint, data=b"SELECT (1")
    assert status == 400 and headers["X-ClickHouse-Exception-Code"] == "62"
    assert body.startswith(b"Code: 62.")
    assert _http(endpoint + "/ping")[2] == b"Ok.\n"
    # GET is read-only even on a writable endpoint, as in ClickHouse.
    status, headers, _ = _http(endpoint + "/?query=DROP%20TABLE%20t2")
    assert status == 500 and headers["X-ClickHouse-Exception-Code"] == "164"  # as ClickHouse


def test_read_only_endpoint_refuses_writes(readonly: str) -> None:
    for sql in (b"DROP TABLE port_events", b"INSERT INTO port_events FORMAT CSV\n",
                b"SELECT 1; DROP TABLE port_events",
                b"SELECT * FROM file('/etc/hostname', 'LineAsString')"):
        status, headers, _ = _http(readonly, data=sql)
        assert status in (400, 500), sql
    port = int(readonly.rsplit(":", 1)[1])
    client = clickhouse_connect.get_client(host="127.0.0.1", port=port)
    try:
        assert client.query("SELECT count() FROM port_events").result_rows == [(0,)]
        with pytest.raises(DatabaseError, match="read-only"):
            client.command("TRUNCATE TABLE port_events")
    finally:
        client.close()


def test_endpoint_is_advertised_while_it_runs(ledger: EmbeddedLedger, tmp_path: Path) -> None:
    server = LedgerHTTPServer(ledger, port=0)
    url = server.start(tmp_path)
    assert advertised_endpoint(tmp_path) == url
    server.stop()
    assert not (tmp_path / ENDPOINT_FILE).exists()
    assert advertised_endpoint(tmp_path) is None


def test_open_ledger_uses_another_owners_endpoint(tmp_path: Path) -> None:
    """A process that finds the ledger owned (endpoint advertised by a live pid) reads it
    through HTTP. Simulated in one process by advertising the endpoint under the parent's
    pid, which is alive and is not us."""
    import os

    from ledger import open_ledger
    from runtime.settings import Settings

    settings = Settings(state_dir=tmp_path)
    owner = EmbeddedLedger(settings.ledger_path)
    try:
        owner.migrate()
        owner.write([PortEvent(id="e1", ts=history_start(), fabric="f", source="sim",
                               device="leaf-su01-r1", port=3, state="down")])
        with LedgerHTTPServer(owner, port=0) as server:
            url = server.start(tmp_path)
            info = json.loads((tmp_path / ENDPOINT_FILE).read_text())
            assert info["pid"] == os.getpid()
            # Our own endpoint: open_ledger would open the folder directly (same process).
            assert advertised_endpoint(tmp_path, other_process=True) is None
            info["pid"] = os.getppid()
            (tmp_path / ENDPOINT_FILE).write_text(json.dumps(info))
            reader = open_ledger(settings)
            try:
                assert isinstance(reader, ServerLedger)
                assert reader.query("SELECT count() AS n FROM port_events FINAL") == [{"n": 1}]
            finally:
                reader.close()
            assert url
    finally:
        owner.close()


@pytest.mark.parametrize("revision", [0, 54460])
def test_an_empty_native_result_still_names_its_columns(endpoint: str, revision: int) -> None:
    # a server answers no rows with a header block (names, types, zero rows); the embedded
    # engine sends nothing, and drivers then report no columns at all
    query = urllib.parse.quote("SELECT toUInt32(1) AS a, 'x' AS s WHERE 0")
    status, _, body = _http(f"{endpoint}/?default_format=Native&client_protocol_version="
                            f"{revision}&query={query}")
    assert status == 200
    block_info = b"\x01\x00\x02\xff\xff\xff\xff\x00" if revision else b""
    marker = b"\x00" if revision >= 54454 else b""
    assert body == (block_info + b"\x02\x00" + b"\x01a\x06UInt32" + marker
                    + b"\x01s\x06String" + marker)
    port = int(endpoint.rsplit(":", 1)[1])
    client = clickhouse_connect.get_client(host="127.0.0.1", port=port)
    try:
        result = client.query("SELECT toUInt32(1) AS a, 'x' AS s WHERE 0")
        assert result.column_names == ("a", "s") and result.result_rows == []
    finally:
        client.close()
