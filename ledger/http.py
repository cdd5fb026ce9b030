"""ClickHouse's HTTP interface, served from the process that owns the embedded ledger.

chdb lets one process open a data folder, so the owner (the worker, or ``fabricwatch ledger
serve``) serves the engine for everyone else: the CLI and report (through ``ServerLedger``),
clickhouse-connect, Grafana's ClickHouse plugin (clickhouse-go v2 over HTTP), curl. What
ClickHouse's HTTP interface documents, for those clients:

- ``GET /?query=...`` (always read-only, as in ClickHouse), ``GET /ping``; ``POST /`` with the
  query in the body, or in ``?query=`` with the body as insert data. ``FORMAT <name>`` at the
  end of the query, else ``default_format=`` (or the ``X-ClickHouse-Format`` header), chooses
  the output, which the engine produces; default TabSeparated.
- ``client_protocol_version=N``: Native output in revision N's layout (``ledger.native``).
- ``database=`` / ``X-ClickHouse-Database``: the engine has one database, ``default``;
  another name is ClickHouse's UNKNOWN_DATABASE (81).
- ``param_<name>=`` fill ``{name:Type}`` placeholders; any other URL parameter that is not
  part of the transport is a query setting, applied as a SETTINGS clause.
- Compression (``ledger.compression``): ``compress=1`` answers in ClickHouse's compressed
  blocks (``network_compression_method`` LZ4 or ZSTD), ``decompress=1`` reads the body as
  such blocks (checksums verified); ``enable_http_compression=1`` with ``Accept-Encoding``
  compresses the response (zstd, lz4, gzip, deflate); request ``Content-Encoding`` gzip,
  deflate, zstd or lz4 (clickhouse-connect's frame-per-block inserts).
- Errors: ClickHouse's HTTP status for the code, ``X-ClickHouse-Exception-Code`` and the
  ``Code: N. DB::Exception: ...`` text; successes carry ``X-ClickHouse-Summary``,
  ``-Query-Id``, ``-Format``, ``-Timezone`` and ``-Server-Display-Name``.
- Users: ``X-ClickHouse-User`` / ``X-ClickHouse-Key`` headers, HTTP basic auth, or
  ``user=`` / ``password=`` parameters. With users configured every query must name one with
  its password (else ClickHouse's AUTHENTICATION_FAILED, 516); the read-only user never
  writes. Without users (loopback only) authentication is off. A bind address other than
  loopback refuses to start without users.

Read-only unless ``allow_writes`` (and then only for the writing user, over POST): only
SELECT / WITH / SHOW / DESCRIBE / EXPLAIN / EXISTS statements run, one statement per request,
each with ``readonly=1`` appended last (the engine then refuses writes and file/url table
functions itself).
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
import json
import os
import re
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlsplit

from pydantic import SecretStr

from ledger.base import LedgerError
from ledger.compression import (
    METHOD_ZSTD,
    CompressionError,
    choose_encoding,
    compress_blocks,
    decode_body,
    decompress_blocks,
    encode_body,
    method_byte,
)
from ledger.migrations import strip_comments
from ledger.native import NativeError, engine_settings, header_block, relayout

if TYPE_CHECKING:
    # not at run time: it loads the ClickHouse engine (~0.6 s of CPU), which a process that
    # only finds or calls an endpoint (the runbook worker, the CLI) never needs
    from ledger.embedded import EmbeddedLedger
    from ledger.server import ServerLedger
    from runtime.settings import Settings

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
    "network_compression_method", "network_zstd_compression_level",
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
# ClickHouse's exceptionCodeToHTTPStatus (src/Server/HTTP); anything else is 500.
_STATUS = {
    **dict.fromkeys((194,), 401),  # REQUIRED_PASSWORD
    # UNKNOWN_USER, WRONG_PASSWORD, ACCESS_DENIED, AUTHENTICATION_FAILED (READONLY, 164, is
    # not among them: ClickHouse answers it with 500)
    **dict.fromkeys((192, 193, 497, 516), 403),
    # BAD_ARGUMENTS, CANNOT_PARSE_*, DUPLICATE_COLUMN, ILLEGAL_COLUMN, THERE_IS_NO_COLUMN,
    # UNKNOWN_ELEMENT_IN_AST, UNKNOWN_TYPE_OF_AST_NODE, TOO_DEEP_AST, TOO_BIG_AST,
    # UNEXPECTED_AST_STRUCTURE, SYNTAX_ERROR, INCORRECT_DATA, TYPE_MISMATCH, out-of-range
    **dict.fromkeys((36, 427, 6, 25, 26, 38, 41, 72, 441, 27, 376, 15, 44, 37, 123, 8, 167,
                     168, 223, 62, 117, 53, 321), 400),
    # UNKNOWN_TABLE, _FUNCTION, _IDENTIFIER, _TYPE, _STORAGE, _DATABASE, _SETTING,
    # _DIRECTION_OF_SORTING, _AGGREGATE_FUNCTION, _FORMAT, _DATABASE_ENGINE, _TYPE_OF_QUERY
    **dict.fromkeys((60, 46, 47, 50, 56, 81, 115, 152, 63, 73, 336, 78), 404),
    229: 413, 48: 501, 209: 503, 76: 503, 381: 411, 159: 408, 439: 503,
}
_LOOPBACK_NAMES = frozenset({"localhost"})


def http_status(code: int) -> int:
    return _STATUS.get(code, 500)


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


_READONLY = ("Code: 164. DB::Exception: the fabricwatch ledger endpoint is read-only for "
             "this request (ledger.allow_writes_over_http, a writing user, POST). (READONLY)")


@dataclass(frozen=True)
class User:
    """One user of the endpoint: its password and whether it may write."""

    name: str
    password: SecretStr
    writable: bool

    def __post_init__(self) -> None:
        if not self.name or not self.password.get_secret_value():
            raise ValueError("a ledger endpoint user needs a name and a non-empty password")


@dataclass
class Outcome:
    body: bytes
    fmt: str
    summary: dict[str, str]
    headers: dict[str, str] = field(default_factory=dict)


def _auth_failed(user: str) -> RequestError:
    return RequestError(403, 516, f"Code: 516. DB::Exception: {user}: Authentication failed: "
                        "password is incorrect, or there is no user with such name. "
                        "(AUTHENTICATION_FAILED)")


def credentials(args: dict[str, str], headers: dict[str, str]) -> tuple[str, str] | None:
    """The (user, password) a request names, as ClickHouse reads them; None: none given.

    One way per request: X-ClickHouse-User/-Key headers, basic auth, or user/password
    parameters (ClickHouse refuses a mix of them)."""
    ways: list[tuple[str, str]] = []
    if "x-clickhouse-user" in headers or "x-clickhouse-key" in headers:
        ways.append((headers.get("x-clickhouse-user") or "default",
                     headers.get("x-clickhouse-key", "")))
    auth = headers.get("authorization", "")
    if auth[:6].lower() == "basic ":
        try:
            user, _, password = base64.b64decode(auth[6:].strip(), validate=True).decode(
                "utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            raise RequestError(403, 516, "Code: 516. DB::Exception: malformed basic "
                               "authorization header. (AUTHENTICATION_FAILED)") from None
        ways.append((user or "default", password))
    elif auth:
        raise RequestError(403, 516, "Code: 516. DB::Exception: only basic authorization "
                           "is served here. (AUTHENTICATION_FAILED)")
    if "user" in args or "password" in args:
        ways.append((args.get("user") or "default", args.get("password", "")))
    if len(ways) > 1:
        raise RequestError(403, 516, "Code: 516. DB::Exception: Invalid authentication: it "
                           "is not allowed to use more than one authentication method (headers, "
                           "basic auth, URL parameters) at once. (AUTHENTICATION_FAILED)")
    return ways[0] if ways else None


class LedgerEndpoint:
    """The protocol logic, independent of the HTTP server machinery (testable directly)."""

    def __init__(self, ledger: EmbeddedLedger, *, allow_writes: bool = False,
                 users: list[User] | None = None) -> None:
        self.ledger = ledger
        self.allow_writes = allow_writes
        self.users = {u.name: u for u in users or []}

    def authenticate(self, args: dict[str, str], headers: dict[str, str]) -> User | None:
        """The request's user (None: authentication is off); refuses wrong credentials."""
        given = credentials(args, headers)
        if not self.users:
            return None
        name, password = given or ("default", "")
        user = self.users.get(name)
        # compare_digest on both branches: a missing user costs what a wrong password does.
        expected = user.password.get_secret_value() if user else "\0not a password"
        if not hmac.compare_digest(password.encode(), expected.encode()) or user is None:
            raise _auth_failed(name)
        return user

    def handle(self, method: str, target: str, body: bytes,
               headers: dict[str, str]) -> Outcome:
        url = urlsplit(target)
        args = dict(parse_qsl(url.query, keep_blank_values=True))
        if url.path.rstrip("/") in ("/ping", "/replicas_status"):
            return Outcome(b"Ok.\n", "TabSeparated", {})
        if url.path not in ("", "/"):
            raise RequestError(404, 0, f"there is no handler for {url.path}")
        user = self.authenticate(args, headers)
        database = args.get("database") or headers.get("x-clickhouse-database") or "default"
        if database != "default":
            raise RequestError(404, 81, f"Code: 81. DB::Exception: Database {database} does "
                               "not exist: the embedded ledger has one database, default. "
                               "(UNKNOWN_DATABASE)")
        data = decode_body(body, headers.get("content-encoding")) if body else b""
        if data and args.get("decompress") == "1":
            data = decompress_blocks(data)
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
        revision = _revision(args.get("client_protocol_version"))
        writable = (self.allow_writes and method == "POST"
                    and (user is None or user.writable))
        verb = first_verb(query)
        if not single_statement(query):
            raise RequestError(400, 62, "one statement per request")
        if verb == "INSERT":
            return self._insert(query, data, writable)
        if data:
            raise RequestError(400, 62, "request data is only accepted for INSERT")
        if verb not in _READ_VERBS and not writable:
            raise RequestError(http_status(164), 164, _READONLY)
        fmt = (args.get("default_format") or headers.get("x-clickhouse-format")
               or "TabSeparated")
        sql = query.rstrip().rstrip(";")
        match = _FORMAT_TAIL.search(sql)
        if match:
            fmt = match.group(1)
            sql = sql[:match.start()]
        native = fmt == "Native"
        if verb in _READ_VERBS and verb not in ("SHOW", "DESCRIBE", "DESC", "EXISTS"):
            if native:
                settings.update(engine_settings(revision))
            if not writable:
                # Last in the clause, after the client's settings: readonly=1 also refuses
                # file() / url() table functions (readonly=2 would allow them).
                settings["readonly"] = "1"
            sql = with_settings(sql, settings)
        result = self.ledger.raw_result(sql, fmt, params or None)
        out = result.body
        described: list[tuple[str, str]] | None = None

        def describe() -> list[tuple[str, str]]:
            nonlocal described
            if described is None:
                try:
                    rows = self.ledger.query(f"DESCRIBE ({sql})", params or None)
                except LedgerError:  # then plain DateTime: the same instants (UTC server)
                    rows = []
                described = [(str(row["name"]), str(row["type"])) for row in rows]
            return described

        if native and not out and verb in ("SELECT", "WITH") and describe():
            # the engine sends nothing for no rows; a server sends the columns' header
            out = header_block(describe())
        if native and revision > 0:
            def header() -> list[str]:
                return [type_text for _, type_text in describe()]

            try:
                out = relayout(out, revision, header)
            except NativeError as exc:
                raise RequestError(500, 48, f"Code: 48. DB::Exception: {exc}. "
                                   "(NOT_IMPLEMENTED)") from None
        return self._encoded(Outcome(out, fmt, result.summary()), args, headers)

    @staticmethod
    def _encoded(outcome: Outcome, args: dict[str, str], headers: dict[str, str]) -> Outcome:
        """The response body in the compressions the request asked for."""
        if args.get("compress") == "1":
            method = method_byte(args.get("network_compression_method"))
            text = args.get("network_zstd_compression_level") or "1"
            level = int(text) if text.isdigit() else 0
            if method == METHOD_ZSTD and not 1 <= level <= 22:
                raise RequestError(400, 36, "network_zstd_compression_level must be 1..22")
            outcome.body = compress_blocks(outcome.body, method, level)
        if args.get("enable_http_compression") == "1":
            encoding = choose_encoding(headers.get("accept-encoding"))
            if encoding is not None:
                zlevel = args.get("http_zlib_compression_level")
                lvl = (int(zlevel) if zlevel and zlevel.isdigit()
                       and encoding in ("gzip", "deflate") else None)
                outcome.body = encode_body(outcome.body, encoding, lvl)
                outcome.headers["Content-Encoding"] = encoding
        return outcome

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
            raise RequestError(http_status(164), 164, _READONLY)
        match = _INSERT_FORMAT.match(query + "\n")
        if match is None:
            if data:
                raise RequestError(400, 62, "INSERT with data needs a FORMAT clause")
            result = self.ledger.raw_result(query.rstrip().rstrip(";"), "TabSeparated")
            return Outcome(b"", "TabSeparated", result.summary())
        rows = self.ledger.insert_format(match.group(1), match.group(2), [data])
        return Outcome(b"", "TabSeparated", {"written_rows": str(rows),
                                             "written_bytes": str(len(data))})


def _revision(value: str | None) -> int:
    if not value:
        return 0
    if not value.isdigit() or len(value) > 10:
        raise RequestError(400, 36, "Code: 36. DB::Exception: client_protocol_version must "
                           "be a number. (BAD_ARGUMENTS)")
    return int(value)


def error_text(code: int, message: str) -> str:
    """ClickHouse's error body: ``Code: N. DB::Exception: ...``."""
    text = message if message.startswith("Code:") else f"Code: {code}. DB::Exception: {message}"
    return text.rstrip() + "\n"


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
        except CompressionError as exc:
            self._error(http_status(exc.code) if exc.code != 271 else 400, exc.code,
                        str(exc), query_id)
            return
        except LedgerError as exc:
            match = _CODE.search(str(exc))
            code = int(match.group(1)) if match else 1002
            self._error(http_status(code), code, str(exc), query_id)
            return
        except (ValueError, OSError, RuntimeError) as exc:
            self._error(400, 0, f"bad request: {exc}", query_id)
            return
        self.send_response(200)
        self.send_header("Content-Type", _CONTENT_TYPES.get(
            outcome.fmt, "text/tab-separated-values; charset=UTF-8"
            if outcome.fmt.startswith(("TabSeparated", "TSV")) else "application/octet-stream"))
        self.send_header("Content-Length", str(len(outcome.body)))
        for name, value in outcome.headers.items():
            self.send_header(name, value)
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
        body = error_text(code, message).encode()
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


def is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class LedgerHTTPServer:
    """Serve ``ledger`` on ``host:port`` in a background thread; ``port=0`` picks one.

    Loopback by default; any other address needs ``users`` (refused otherwise)."""

    def __init__(self, ledger: EmbeddedLedger, *, host: str = "127.0.0.1", port: int = 18123,
                 allow_writes: bool = False, users: list[User] | None = None) -> None:
        if not is_loopback(host) and not users:
            raise ValueError(
                f"the ledger endpoint binds to {host}, not loopback: that needs a user and "
                "password (secrets ledger_http_password / ledger_http_readonly_password or "
                "their _file)")
        self._server = _Server((host, port), _Handler)
        self._server.endpoint = LedgerEndpoint(ledger, allow_writes=allow_writes, users=users)
        self._thread: threading.Thread | None = None
        self._endpoint_file: Path | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        host = str(host)
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

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
                                       "writable": self._server.endpoint.allow_writes,
                                       "auth": bool(self._server.endpoint.users)}))
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


def users_from(settings: Settings) -> list[User]:
    """The endpoint's users: each configured user whose password the secrets hold."""
    cfg = settings.ledger
    writer, reader = settings.ledger_http_passwords()
    users = []
    if writer is not None:
        users.append(User(cfg.http_user, writer, writable=True))
    if reader is not None:
        users.append(User(cfg.http_readonly_user, reader, writable=False))
    if len({u.name for u in users}) != len(users):
        raise ValueError("ledger.http_user and ledger.http_readonly_user must differ")
    return users


def server_for(ledger: EmbeddedLedger, settings: Settings,
               port: int | None = None) -> LedgerHTTPServer:
    """The endpoint ``settings.ledger`` describes (bind address, users, writes)."""
    cfg = settings.ledger
    return LedgerHTTPServer(ledger, host=cfg.http_host,
                            port=cfg.http_port if port is None else port,
                            allow_writes=cfg.allow_writes_over_http, users=users_from(settings))


def endpoint_client(url: str, settings: Settings, **kwargs: Any) -> ServerLedger:
    """A ``ServerLedger`` over an advertised endpoint, as the settings' user (the writing
    user if its password is configured, else the read-only one, else none)."""
    from ledger.server import ServerLedger

    cfg = settings.ledger
    writer, reader = settings.ledger_http_passwords()
    user, password = ((cfg.http_user, writer) if writer is not None
                      else (cfg.http_readonly_user, reader) if reader is not None
                      else (None, None))
    if user is not None:
        scheme, _, rest = url.partition("://")
        url = f"{scheme}://{quote(user, safe='')}@{rest}"
    return ServerLedger(url, password=password, compress=False, **kwargs)


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
