"""The embedded ledger's HTTP endpoint with the clients analysts use, none of them written
here: clickhouse-connect, clickhouse-go v2 over HTTP (Grafana's ClickHouse plugin is built on
it) and curl. Each runs the cookbook and the Grafana dashboard's own queries on a demo-like
ledger, with the endpoint's users on, and must get what the engine itself answers."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import clickhouse_connect
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError
from pydantic import SecretStr

from ledger.embedded import EmbeddedLedger
from ledger.http import LedgerHTTPServer, User

from .clients import (
    Job,
    build_chgo,
    cookbook_jobs,
    curl,
    dashboard_jobs,
    normalized_rows,
    run_chgo,
    unavailable,
)
from .demo_data import FABRIC, demo_events, demo_start_ms

pytestmark = pytest.mark.integration

WRITER, WRITER_PW = "fabricwatch", "w-secret-1"
READER, READER_PW = "grafana", "r-secret-2"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedLedger, int]]:
    ledger = EmbeddedLedger(tmp_path_factory.mktemp("demo") / "ledger")
    try:
        ledger.migrate()
        start = demo_start_ms()
        ledger.write(demo_events(start))
        yield ledger, start
    finally:
        ledger.close()


@pytest.fixture(scope="module")
def url(demo: tuple[EmbeddedLedger, int]) -> Iterator[str]:
    users = [User(WRITER, SecretStr(WRITER_PW), writable=True),
             User(READER, SecretStr(READER_PW), writable=False)]
    with LedgerHTTPServer(demo[0], port=0, allow_writes=True, users=users) as server:
        yield server.start()


@pytest.fixture(scope="module")
def jobs(demo: tuple[EmbeddedLedger, int]) -> list[Job]:
    ledger, start_ms = demo
    flap = ledger.query("SELECT device, port FROM port_events FINAL WHERE state = 'down' "
                        "GROUP BY device, port ORDER BY count() DESC LIMIT 1")[0]
    start = dt.datetime.fromtimestamp(start_ms / 1000, dt.UTC) - dt.timedelta(hours=1)
    end = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    return (cookbook_jobs(FABRIC, flap["device"], flap["port"])
            + dashboard_jobs(FABRIC, start, end))


@pytest.fixture(scope="module")
def expected(demo: tuple[EmbeddedLedger, int],
             jobs: list[Job]) -> dict[str, tuple[list[str], list[tuple[Any, ...]]]]:
    """Each job's answer from the engine itself: column types and normalized rows."""
    ledger = demo[0]
    out = {}
    for job in jobs:
        body = json.loads(ledger.raw(job.sql.rstrip().rstrip(";"), "JSONCompact",
                                     job.params or None))
        types = [m["type"] for m in body["meta"]]
        names = [m["name"] for m in body["meta"]]
        out[job.name] = (types, names, normalized_rows(body["data"], types, names))
    answered = [name for name, (_, _, rows) in out.items() if rows]
    # The demo data must give most queries something to answer, or the comparison is empty.
    assert len(answered) >= len(out) - 2, sorted(set(out) - set(answered))
    assert any(name.startswith("panel:") for name in answered)
    return out


@pytest.fixture(scope="module")
def chgo() -> Path:
    return build_chgo()


def _addr(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def test_a_client_that_cannot_be_had_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        unavailable("no go")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        unavailable("no go")


# -- clickhouse-connect ------------------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True, "zstd", "gzip"])
def test_clickhouse_connect_runs_every_query(url: str, jobs: list[Job], compress: bool | str,
                                             expected: dict[str, Any]) -> None:
    host, port = _addr(url)
    client = clickhouse_connect.get_client(host=host, port=port, username=READER,
                                           password=READER_PW, compress=compress)
    try:
        assert client.protocol_version == 54405  # it found the revision layout it asked for
        for job in jobs:
            result = client.query(job.sql, parameters=job.params or None)
            types, names, rows = expected[job.name]
            assert result.column_names == tuple(names), job.name
            assert normalized_rows(result.result_rows, types, names) == rows, job.name
        with pytest.raises(DatabaseError, match="164|READONLY|read-only"):
            client.command("CREATE TABLE nope (a UInt8) ENGINE = Memory")
    finally:
        client.close()


@pytest.mark.parametrize("compress", [False, True])
def test_clickhouse_connect_inserts_and_selects(url: str, compress: bool) -> None:
    host, port = _addr(url)
    table = f"cc_{int(compress)}"
    client = clickhouse_connect.get_client(host=host, port=port, username=WRITER,
                                           password=WRITER_PW, compress=compress)
    try:
        client.command(f"CREATE TABLE {table} (a UInt32, s String, t DateTime64(3, 'UTC')) "
                       "ENGINE = MergeTree ORDER BY a")
        now = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
        client.insert(table, [[i, f"s{i}", now] for i in range(150_000)],
                      column_names=["a", "s", "t"])
        assert client.query(f"SELECT count(), sum(a), min(t) FROM {table}"  # noqa: S608
                            ).result_rows == [
            (150_000, sum(range(150_000)), now.replace(tzinfo=None))]  # naive UTC
        rows = client.query(f"SELECT a, s FROM {table} WHERE a < {{n:UInt32}} ORDER BY a",  # noqa: S608
                            parameters={"n": 2}).result_rows
        assert rows == [(0, "s0"), (1, "s1")]
    finally:
        client.command(f"DROP TABLE IF EXISTS {table}")
        client.close()
    reader = clickhouse_connect.get_client(host=host, port=port, username=READER,
                                           password=READER_PW)
    try:
        with pytest.raises(DatabaseError, match="164|READONLY|read-only"):
            reader.insert("port_events", [["x"]], column_names=["id"])
    finally:
        reader.close()


def test_clickhouse_connect_wrong_password_is_refused(url: str) -> None:
    host, port = _addr(url)
    with pytest.raises(DatabaseError, match="516|AUTHENTICATION_FAILED"):
        clickhouse_connect.get_client(host=host, port=port, username=READER, password="nope")


# -- clickhouse-go v2 over HTTP (Grafana's driver) ---------------------------------------


@pytest.mark.timeout(1200)  # the first build of the Go client may take minutes
@pytest.mark.parametrize("compress", ["none", "lz4", "zstd"])
def test_clickhouse_go_runs_every_query(chgo: Path, url: str, jobs: list[Job], compress: str,
                                        expected: dict[str, Any],
                                        demo: tuple[EmbeddedLedger, int]) -> None:
    addr = url.removeprefix("http://")
    results = run_chgo(chgo, addr, [j.for_go() for j in jobs], compress=compress,
                       user=READER, password=READER_PW)
    name, version, revision = results["version"]["rows"][0]
    assert version.startswith("26.") and revision > 54454
    for job in jobs:
        got = results[job.name]
        assert not got.get("error"), (job.name, got.get("error"))
        types, names, rows = expected[job.name]
        assert (got["columns"], got["types"]) == (names, types), job.name
        assert normalized_rows(got["rows"], types, names) == rows, job.name
    # Inserts as the driver sends them (Native blocks; with lz4/zstd ClickHouse's
    # compressed blocks under decompress=1), by the writing user; the read-only user is
    # refused with ClickHouse's READONLY error.
    ledger = demo[0]
    table = f"chgo_{compress}"
    ledger.execute(f"CREATE TABLE {table} (a UInt32, s String, t DateTime64(3, 'UTC')) "
                   "ENGINE = MergeTree ORDER BY a")
    try:
        wrote = run_chgo(chgo, addr, [
            {"name": "insert", "insert_table": table, "insert_rows": 70_000},
            {"name": "back", "sql": f"SELECT count(), sum(a), max(s) FROM {table}"}],  # noqa: S608
            compress=compress, user=WRITER, password=WRITER_PW)
        assert not wrote["insert"].get("error"), wrote["insert"]
        assert wrote["back"]["rows"] == [[70_000, sum(range(70_000)), "s9999"]]
        refused = run_chgo(chgo, addr, [
            {"name": "insert", "insert_table": table, "insert_rows": 10}],
            compress=compress, user=READER, password=READER_PW)
        assert refused["insert"]["code"] == 164, refused["insert"]
        assert ledger.query(f"SELECT count() AS n FROM {table}") == [{"n": 70_000}]  # noqa: S608
    finally:
        ledger.execute(f"DROP TABLE IF EXISTS {table}")


@pytest.mark.timeout(1200)
def test_clickhouse_go_surfaces_errors(chgo: Path, url: str) -> None:
    addr = url.removeprefix("http://")
    bad = run_chgo(chgo, addr, [], user=READER, password="wrong")
    assert bad["ping"]["code"] == 516 and "AUTHENTICATION_FAILED" in bad["ping"]["error"]
    got = run_chgo(chgo, addr, [{"name": "missing", "sql": "SELECT * FROM no_such_table"},
                                {"name": "syntax", "sql": "SELECT (1"}],
                   compress="lz4", user=READER, password=READER_PW)
    assert got["missing"]["code"] == 60 and "UNKNOWN_TABLE" in got["missing"]["error"]
    assert got["syntax"]["code"] == 62


# -- curl ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def netrc(tmp_path_factory: pytest.TempPathFactory, url: str) -> Path:
    """The read-only user's credentials for curl's basic auth, in a file (not argv)."""
    host, _ = _addr(url)
    path = tmp_path_factory.mktemp("curl") / "netrc"
    path.write_text(f"machine {host} login {READER} password {READER_PW}\n")
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("compressed", [False, True])
def test_curl_runs_every_query(url: str, jobs: list[Job], netrc: Path, compressed: bool,
                               expected: dict[str, Any]) -> None:
    from urllib.parse import urlencode

    for job in jobs:
        query = {"default_format": "JSONCompact", "output_format_json_quote_64bit_integers": "0",
                 **{f"param_{k}": v for k, v in job.text_params.items()}}
        args = ["--compressed"] if compressed else []
        if compressed:
            query["enable_http_compression"] = "1"
        status, headers, body = curl(f"{url}/?{urlencode(query)}", *args,
                                     data=job.sql.encode(), netrc=netrc)
        assert status == 200, (job.name, body[:300])
        if compressed:
            assert headers.get("content-encoding") in ("zstd", "gzip", "deflate"), job.name
        types, names, rows = expected[job.name]
        got = json.loads(body)
        assert [(m["name"], m["type"]) for m in got["meta"]] == list(zip(names, types,
                                                                         strict=True))
        assert normalized_rows(got["data"], types, names) == rows, job.name


def test_curl_protocol_details(url: str, netrc: Path) -> None:
    # GET ?query= is read-only; /ping needs no user.
    assert curl(f"{url}/ping")[2] == b"Ok.\n"
    status, _, body = curl(f"{url}/?query=SELECT%20count()%20FROM%20port_events", netrc=netrc)
    assert status == 200 and int(body) > 0
    # The users headers work as basic auth does; a wrong key is AUTHENTICATION_FAILED.
    status, headers, body = curl(f"{url}/?query=SELECT%201", "-H", f"X-ClickHouse-User: {READER}",
                                 "-H", "X-ClickHouse-Key: wrong")
    assert (status, headers["x-clickhouse-exception-code"]) == (403, "516")
    assert body.startswith(b"Code: 516. DB::Exception: grafana: Authentication failed")
    status, headers, _ = curl(f"{url}/?query=SELECT%201")  # no user at all
    assert (status, headers["x-clickhouse-exception-code"]) == (403, "516")
    # Errors as ClickHouse reports them.
    status, headers, body = curl(f"{url}/", data=b"SELECT * FROM no_such_table", netrc=netrc)
    assert (status, headers["x-clickhouse-exception-code"]) == (404, "60")
    assert body.startswith(b"Code: 60. DB::Exception:") and b"UNKNOWN_TABLE" in body
    status, headers, body = curl(f"{url}/?database=fabricwatch", data=b"SELECT 1", netrc=netrc)
    assert (status, headers["x-clickhouse-exception-code"]) == (404, "81")
    status, headers, _ = curl(f"{url}/", data=b"DROP TABLE port_events", netrc=netrc)
    assert (status, headers["x-clickhouse-exception-code"]) == (500, "164")
    # HTTP compression only when asked for with enable_http_compression=1, as in ClickHouse.
    status, headers, body = curl(f"{url}/", "--compressed", data=b"SELECT 1", netrc=netrc)
    assert (status, body, headers.get("content-encoding")) == (200, b"1\n", None)
    status, headers, body = curl(f"{url}/?enable_http_compression=1", "--compressed",
                                 "-H", "Accept-Encoding: gzip", data=b"SELECT 1", netrc=netrc)
    assert (status, body, headers.get("content-encoding")) == (200, b"1\n", "gzip")
    # Settings as URL parameters reach the engine.
    status, _, body = curl(f"{url}/?max_result_rows=1&result_overflow_mode=throw",
                           data=b"SELECT number FROM numbers(5)", netrc=netrc)
    assert status != 200 and b"Code: 396" in body
    # The revision layout: clickhouse-go's revision gets block info and the marker byte.
    status, _, body = curl(f"{url}/?client_protocol_version=54460&default_format=Native",
                           data=b"SELECT 1 AS check", netrc=netrc)
    assert body == b"\x01\x00\x02\xff\xff\xff\xff\x00\x01\x01\x05check\x05UInt8\x00\x01"
    status, _, body = curl(f"{url}/?default_format=Native", data=b"SELECT 1 AS check",
                           netrc=netrc)
    assert body == b"\x01\x01\x05check\x05UInt8\x01"  # revision 0: the engine's own layout
