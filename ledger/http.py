"""ClickHouse's HTTP interface, served from the process that owns the embedded ledger.

chdb lets one process open a data folder, so the owner (the worker) serves the engine on
127.0.0.1 for everyone else: the CLI and report (through ``ServerLedger``), clickhouse-connect,
Grafana's ClickHouse plugin, curl. Enough of the protocol for those clients:

- ``GET /?query=...`` and ``GET /ping``; ``POST /`` with the query in the body, or in
  ``?query=`` with the body as insert data; ``FORMAT <name>`` at the end of the query or
  ``default_format=`` choose the output, which the engine itself produces (Native, JSON,
  TSV, CSV, ...); default TabSeparated.
- ``param_<name>=`` fill ``{name:Type}`` placeholders; any other URL parameter that is not
  part of the transport (``database``, ``query_id``, ``session_id``, ``compress``, ...) is a
  query setting, applied as a SETTINGS clause.
- ``INSERT INTO t [(cols)] FORMAT <fmt>`` with the data in the body, including
  clickhouse-connect's compressed inserts: ``Content-Encoding: lz4`` where each block is its
  own LZ4 frame (every frame is decoded), or gzip / deflate.
- Errors: non-2xx with ``X-ClickHouse-Exception-Code`` and ClickHouse's ``Code: N.
  DB::Exception: ...`` text; successes carry ``X-ClickHouse-Summary``, ``-Query-Id``,
  ``-Format`` and ``-Timezone``.

Read-only unless ``allow_writes``: only SELECT / WITH / SHOW / DESCRIBE / EXPLAIN / EXISTS
statements run, one statement per request, each with ``readonly=1`` appended last (the
engine then refuses writes and file/url table functions itself). GET is always read-only, as in
ClickHouse. There is no authentication: the endpoint binds to loopback only. The database
is the engine's one (``default``); a ``database`` parameter is accepted and ignored.
Response bodies are not compressed (clients accept that).
"""

from __future__ import annotations

import gzip
import importlib
import json
import os
import re
import threading
import uuid
import zlib
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from ledger.base import LedgerBase, LedgerError
from ledger.embedded import EmbeddedLedger
from ledger.migrations import strip_comments

if TYPE_CHECKING:
    from fabricwatch.settings import Settings

# lz4 ships no type information; one untyped handle instead of a mypy override.
_lz4_frame: Any = importlib.import_module("lz4.frame")

ENDPOINT_FILE = "ledger-endpoint.json"
MAX_BODY = 1 << 30  # 1 GiB: a runaway client gets a clear error, not an OOM

# URL parameters that belong to the HTTP transport, not to query settings.
_TRANSPORT = frozenset({
    "query", "database", "default_format", "query_id", "session_id", "session_timeout",
    "session_check", "compress", "decompress", "user", "password", "quota_key",
    "enable_http_compression", "http_zlib_compression_level", "wait_end_of_query",
    "buffer_size", "role", "client_protocol_version", "add_http_cors_header",
    "http_headers_progress_interval_ms", "send_progress_in_http_headers",
    "cancel_http_readonly_queries_on_client_close", "http_response_buffer_size",
    # Clients may ask for these; the endpoint decides them itself.
    "readonly", "allow_ddl",
})
_READ_VERBS = frozenset({"SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "EXISTS"})
_FORMAT_TAIL = re.compile(r"\bFORMAT\s+([A-Za-z][A-Za-z0-9_]*)\s*;?\s*$", re.IGNORECASE)
_INSERT_FORMAT = re.compile(
    r"^\s*(INSERT\s+INTO\s+.+?)\s+FORMAT\s+([A-Za-z][A-Za-z0-9_]*)[ \t]*(?:\r?\n|$)",
    re.IGNORECASE | re.DOTALL)
_SETTING_ITEM = r"[A-Za-z_]\w*\s*=\s*(?:'(?:[^'\\]|\\.)*'|[\w.+-]+)"
_SETTINGS_TAIL = re.compile(rf"\bSETTINGS\s+{_SETTING_ITEM}(?:\s*,\s*{_SETTING_ITEM})*\s*$",
                            re.IGNORECASE)
_SETTING_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,127}$")
_CODE = re.compile(r"Code:\s*(\d+)")
_CONTENT_TYPES = {
    "JSON": "application/json; charset=UTF-8",
    "JSONCompact": "application/json; charset=UTF-8",
    "JSONEachRow": "application/x-ndjson; charset=UTF-8",
    "CSV": "text/csv; charset=UTF-8; header=absent",
    "CSVWithNames": "text/csv; charset=UTF-8; header=present",
}
# ClickHouse's HTTP statuses for common error codes; anything else is 500.
_STATUS = {62: 400, 27: 400, 36: 400, 47: 400, 60: 404, 81: 404, 164: 403, 497: 403}


class RequestError(Exception):
    """A request the endpoint refuses: HTTP status, ClickHouse error code, message."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def first_verb(sql: str) -> str:
    stripped = strip_comments(sql).lstrip(" \t\r\n(")
    match = re.match(r"[A-Za-z]+", stripped)
    return match.group(0).upper() if match else ""


def single_statement(sql: str) -> bool:
    """True when ``sql`` holds one statement (a ';' only at the very end).

    Conservative: a ';' inside a string literal also counts as a second statement.
    """
    body = strip_comments(sql).strip()
    return ";" not in body.rstrip(";").rstrip()


def with_settings(sql: str, settings: dict[str, str]) -> str:
    """``sql`` with a SETTINGS clause (or more entries on its trailing one)."""
    if not settings:
        return sql
    items = ", ".join(f"{name} = {_setting_literal(value)}" for name, value in settings.items())
    body = sql.rstrip().rstrip(";")
    if _SETTINGS_TAIL.search(strip_comments(body)):
        return f"{body}\n, {items}"
    return f"{body}\nSETTINGS {items}"


def _setting_literal(value: str) -> str:
    if re.fullmatch(r"-?\d+(\.\d+)?", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def decode_body(body: bytes, encoding: str | None) -> bytes:
    """Undo ``Content-Encoding``. lz4 bodies are a sequence of frames, one per block."""
    enc = (encoding or "").strip().lower()
    if not enc or enc == "identity":
        return body
    if enc == "lz4":
        out: list[bytes] = []
        rest = body
        while rest:
            decompressor = _lz4_frame.LZ4FrameDecompressor()
            out.append(decompressor.decompress(rest))
            if not decompressor.eof:
                raise RequestError(400, 27, "truncated lz4 frame in the request body")
            rest = decompressor.unused_data
        return b"".join(out)
    if enc == "gzip":
        return gzip.decompress(body)
    if enc == "deflate":
        return zlib.decompress(body)
    raise RequestError(415, 48, f"Content-Encoding {enc!r} is not supported here "
                                "(use lz4, gzip or deflate, or none)")


@dataclass
class Outcome:
    body: bytes
    fmt: str
    summary: dict[str, str]


class LedgerEndpoint:
    """The protocol logic, independent of the HTTP server machinery (testable directly)."""

    def __init__(self, ledger: EmbeddedLedger, *, allow_writes: bool = False) -> None:
        self.ledger = ledger
        self.allow_writes = allow_writes

    def handle(self, method: str, target: str, body: bytes,
               headers: dict[str, str]) -> Outcome:
        url = urlsplit(target)
        args = dict(parse_qsl(url.query, keep_blank_values=True))
        if url.path.rstrip("/") in ("/ping", "/replicas_status"):
            return Outcome(b"Ok.\n", "TabSeparated", {})
        if url.path not in ("", "/"):
            raise RequestError(404, 0, f"there is no handler for {url.path}")
        data = decode_body(body, headers.get("content-encoding")) if body else b""
        query = args.get("query")
        if query is None:
            if method != "POST" or not data:
                return Outcome(b"Ok.\n", "TabSeparated", {})
            query, data = self._split_body(data)
        elif method == "GET" and data:
            raise RequestError(400, 0, "a GET request carries no body")
        params = {k[6:]: v for k, v in args.items() if k.startswith("param_")}
        settings = {k: v for k, v in args.items()
                    if k not in _TRANSPORT and not k.startswith("param_")}
        for name in settings:
            if not _SETTING_NAME.match(name):
                raise RequestError(400, 115, f"unknown setting {name[:64]!r}")
        writable = self.allow_writes and method == "POST"
        verb = first_verb(query)
        if not single_statement(query):
            raise RequestError(400, 62, "one statement per request")
        if verb == "INSERT":
            return self._insert(query, data, writable)
        if data:
            raise RequestError(400, 62, "request data is only accepted for INSERT")
        if verb not in _READ_VERBS and not writable:
            raise RequestError(403, 164, "Code: 164. DB::Exception: the fabricwatch ledger "
                               "endpoint is read-only (ledger.allow_writes_over_http). "
                               "(READONLY)")
        fmt = args.get("default_format") or "TabSeparated"
        sql = query.rstrip().rstrip(";")
        match = _FORMAT_TAIL.search(sql)
        if match:
            fmt = match.group(1)
            sql = sql[:match.start()]
        if verb in _READ_VERBS and verb not in ("SHOW", "DESCRIBE", "DESC", "EXISTS"):
            if not writable:
                # Last in the clause, after the client's settings: readonly=1 also refuses
                # file() / url() table functions (readonly=2 would allow them).
                settings["readonly"] = "1"
            sql = with_settings(sql, settings)
        result = self.ledger.raw_result(sql, fmt, params or None)
        return Outcome(result.body, fmt, result.summary())

    @staticmethod
    def _split_body(data: bytes) -> tuple[str, bytes]:
        """Query and data from a body like ``INSERT INTO t FORMAT CSV\\n1,2``."""
        head = data[:65536].decode("utf-8", errors="replace")
        match = _INSERT_FORMAT.match(head)
        if match:
            cut = len(match.group(0).encode("utf-8"))
            return f"{match.group(1)} FORMAT {match.group(2)}", data[cut:]
        try:
            return data.decode("utf-8"), b""
        except UnicodeDecodeError:
            raise RequestError(400, 27, "the query is not UTF-8") from None

    def _insert(self, query: str, data: bytes, writable: bool) -> Outcome:
        if not writable:
            raise RequestError(403, 164, "Code: 164. DB::Exception: the fabricwatch ledger "
                               "endpoint is read-only (ledger.allow_writes_over_http). "
                               "(READONLY)")
        match = _INSERT_FORMAT.match(query + "\n")
        if match is None:
            if data:
                raise RequestError(400, 62, "INSERT with data needs a FORMAT clause")
            result = self.ledger.raw_result(query.rstrip().rstrip(";"), "TabSeparated")
            return Outcome(b"", "TabSeparated", result.summary())
        rows = self.ledger.insert_format(match.group(1), match.group(2), [data])
        return Outcome(b"", "TabSeparated", {"written_rows": str(rows),
                                             "written_bytes": str(len(data))})


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def _serve(self, method: str) -> None:
        query_id = str(uuid.uuid4())
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                raise RequestError(413, 0, "request body too large")
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                body = self._read_chunked()
            else:
                body = self.rfile.read(length) if length else b""
            qid = dict(parse_qsl(urlsplit(self.path).query)).get("query_id")
            query_id = qid or query_id
            outcome = self.server.endpoint.handle(
                method, self.path, body, {k.lower(): v for k, v in self.headers.items()})
        except RequestError as exc:
            self._error(exc.status, exc.code, str(exc), query_id)
            return
        except LedgerError as exc:
            match = _CODE.search(str(exc))
            code = int(match.group(1)) if match else 1002
            self._error(_STATUS.get(code, 500), code, str(exc), query_id)
            return
        except (ValueError, OSError, RuntimeError) as exc:
            self._error(400, 0, f"bad request: {exc}", query_id)
            return
        self.send_response(200)
        self.send_header("Content-Type", _CONTENT_TYPES.get(
            outcome.fmt, "text/tab-separated-values; charset=UTF-8"
            if outcome.fmt.startswith(("TabSeparated", "TSV")) else "application/octet-stream"))
        self.send_header("Content-Length", str(len(outcome.body)))
        self.send_header("X-ClickHouse-Query-Id", query_id)
        self.send_header("X-ClickHouse-Format", outcome.fmt)
        self.send_header("X-ClickHouse-Timezone", "UTC")
        self.send_header("X-ClickHouse-Server-Display-Name", "fabricwatch-ledger")
        self.send_header("X-ClickHouse-Summary", json.dumps(outcome.summary))
        self.end_headers()
        self.wfile.write(outcome.body)

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                self.rfile.readline()
                return b"".join(parts)
            total += size
            if total > MAX_BODY:
                raise RequestError(413, 0, "request body too large")
            parts.append(self.rfile.read(size))
            self.rfile.readline()

    def _error(self, status: int, code: int, message: str, query_id: str) -> None:
        text = message if message.startswith("Code:") else f"Code: {code}. DB::Exception: {message}"
        body = (text.rstrip() + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-ClickHouse-Exception-Code", str(code))
        self.send_header("X-ClickHouse-Query-Id", query_id)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        """Requests are not logged (queries may carry parameters an operator typed)."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    endpoint: LedgerEndpoint


class LedgerHTTPServer:
    """Serve ``ledger`` on ``host:port`` in a background thread; ``port=0`` picks one."""

    def __init__(self, ledger: EmbeddedLedger, *, host: str = "127.0.0.1", port: int = 18123,
                 allow_writes: bool = False) -> None:
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise ValueError("the embedded ledger endpoint binds to loopback only")
        self._server = _Server((host, port), _Handler)
        self._server.endpoint = LedgerEndpoint(ledger, allow_writes=allow_writes)
        self._thread: threading.Thread | None = None
        self._endpoint_file: Path | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self, state_dir: Path | None = None) -> str:
        """Start serving; with ``state_dir``, advertise the endpoint there for the CLI."""
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="ledger-http", daemon=True)
        self._thread.start()
        if state_dir is not None:
            state_dir.mkdir(parents=True, exist_ok=True)
            path = state_dir / ENDPOINT_FILE
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"pid": os.getpid(), "url": self.url,
                                       "writable": self._server.endpoint.allow_writes}))
            tmp.replace(path)
            self._endpoint_file = path
        return self.url

    def stop(self) -> None:
        if self._endpoint_file is not None:
            self._endpoint_file.unlink(missing_ok=True)
            self._endpoint_file = None
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> LedgerHTTPServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def advertised_endpoint(state_dir: Path, *, other_process: bool = False) -> str | None:
    """The URL of a live ledger endpoint advertised in ``state_dir``, if its owner runs
    (and, with ``other_process``, is not this process: it can open the folder itself)."""
    path = state_dir / ENDPOINT_FILE
    try:
        info = json.loads(path.read_text())
        pid = int(info["pid"])
        url = str(info["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if other_process and pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, owned by someone else
    return url


def serve_embedded(ledger: LedgerBase, settings: Settings) -> LedgerHTTPServer | None:
    """In the process that owns an embedded ledger: serve it on ``settings.ledger``'s
    loopback port and advertise it in the state folder (the CLI finds it there). Returns
    None for a server ledger, which needs no endpoint. Call ``stop()`` at shutdown."""
    if not isinstance(ledger, EmbeddedLedger):
        return None
    cfg = settings.ledger
    server = LedgerHTTPServer(ledger, host=cfg.http_host, port=cfg.http_port,
                              allow_writes=cfg.allow_writes_over_http)
    server.start(settings.state_dir)
    return server
