"""The real clients the endpoint tests drive: the Go test client (clickhouse-go v2, built here
from tests/clients/chgo with the machine's ``go`` and the Go module proxy) and curl; and the
queries they run: the cookbook's and the Grafana dashboard's, macros substituted as the
Grafana ClickHouse plugin substitutes them."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ledger.embedded import param_text
from ledger.queries import cookbook, params_for

ROOT = Path(__file__).resolve().parents[3]
CHGO_SRC = ROOT / "tests" / "clients" / "chgo"
CACHE = ROOT / ".gocache"  # ignored by git: the module and build caches and the binary
DASHBOARD = ROOT / "deploy" / "monitoring" / "fabricwatch-dashboard.json"
BUILD_TIMEOUT_S = 900  # first build on a loaded 2-core machine: modules + compile


def unavailable(reason: str) -> None:
    """A client that cannot be had: a failure in CI (the check must not pass unseen), a skip
    on a developer's machine without it."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI=true: this check must run)")
    pytest.skip(reason)


def build_chgo() -> Path:
    """The Go test client's binary, built once per source version into .gocache/bin."""
    go = shutil.which("go") or ("/usr/local/go/bin/go"
                                if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        unavailable("the Go toolchain (go) is not installed")
        raise AssertionError("unreachable")
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((CHGO_SRC / name).read_bytes())
    binary = CACHE / "bin" / f"chgo-{digest.hexdigest()[:16]}"
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOMODCACHE": str(CACHE / "mod"), "GOCACHE": str(CACHE / "build"),
           "GOPATH": str(CACHE / "gopath"), "GOFLAGS": "-modcacherw -mod=readonly",
           "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
    tmp = binary.with_suffix(".tmp")
    try:
        proc = subprocess.run([go, "build", "-o", str(tmp), "."], cwd=CHGO_SRC, env=env,
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        unavailable(f"building the Go test client took over {BUILD_TIMEOUT_S} s")
        raise AssertionError("unreachable") from None
    if proc.returncode != 0:
        unavailable("cannot build the Go test client (toolchain or module proxy): "
                    + proc.stderr.strip()[-2000:])
    tmp.replace(binary)
    return binary


def run_chgo(binary: Path, addr: str, jobs: list[dict[str, Any]], *, compress: str = "none",
             user: str = "", password: str = "") -> dict[str, dict[str, Any]]:
    """Run ``jobs`` through clickhouse-go; the results by job name (plus ``version``).
    The password travels in the environment, not in argv."""
    proc = subprocess.run([str(binary), "-addr", addr, "-compress", compress, "-user", user],
                          input=json.dumps(jobs), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CHGO_PASSWORD": password}, check=False)
    results = {}
    for line in proc.stdout.splitlines():
        item = json.loads(line)
        results[item["name"]] = item
    if not results:
        raise AssertionError(f"chgo printed nothing (exit {proc.returncode}): {proc.stderr}")
    return results


def curl(url: str, *args: str, data: bytes | None = None,
         netrc: Path | None = None) -> tuple[int, dict[str, str], bytes]:
    """curl as a person runs it: status, headers (lower-cased names), body."""
    exe = shutil.which("curl")
    if exe is None:
        unavailable("curl is not installed")
        raise AssertionError("unreachable")
    argv = [exe, "-sS", "-D", "-", "--max-time", "120", *args]
    if netrc is not None:
        argv += ["--netrc-file", str(netrc)]
    if data is not None:
        argv += ["--data-binary", "@-"]
    argv.append(url)
    proc = subprocess.run(argv, input=data, capture_output=True, timeout=180, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"curl failed ({proc.returncode}): {proc.stderr.decode()}")
    head, _, body = proc.stdout.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


@dataclass(frozen=True)
class Job:
    """One query: its SQL, typed parameters (Python values) and their text forms."""

    name: str
    sql: str
    params: dict[str, Any]

    @property
    def text_params(self) -> dict[str, str]:
        return {k: param_text(v) for k, v in self.params.items()}

    def for_go(self) -> dict[str, Any]:
        return {"name": self.name, "sql": self.sql, "params": self.text_params}


def cookbook_jobs(fabric: str, device: str, port: int) -> list[Job]:
    now = dt.datetime.now(dt.UTC)
    jobs = []
    for name, query in cookbook().items():
        # A job name for the job queries: none is placed in the demo data, so they answer empty.
        given: dict[str, object] = {"device": device, "port": port, "job": "demo-job"}
        params = params_for(query, {k: v for k, v in given.items() if k in query.params},
                            fabric, now)
        jobs.append(Job(f"cookbook:{name}", query.sql, params))
    return jobs


def grafana_macros(sql: str, start: dt.datetime, end: dt.datetime, interval_s: int,
                   variables: dict[str, str]) -> str:
    """The Grafana ClickHouse plugin's macros (pkg/macros), and ``${var}`` template
    variables, substituted as the plugin and Grafana do before the query is sent."""
    def dt_(t: dt.datetime) -> str:
        return f"toDateTime({int(t.timestamp())})"

    out = re.sub(r"\$__timeFilter\(([^()]+)\)",
                 lambda m: f"{m[1]} >= {dt_(start)} AND {m[1]} <= {dt_(end)}", sql)
    out = re.sub(r"\$__timeInterval\(([^()]+)\)",
                 lambda m: f"toStartOfInterval(toDateTime({m[1]}), INTERVAL "
                           f"{max(interval_s, 1)} second)", out)
    out = out.replace("$__fromTime", dt_(start)).replace("$__toTime", dt_(end))
    for name, value in variables.items():
        out = out.replace("${" + name + "}", value)
    left = re.search(r"\$(?:__\w+|\{\w+\})", out)
    if left:
        raise AssertionError(f"a macro is left unsubstituted: {left.group(0)}")
    return out


def dashboard_jobs(fabric: str, start: dt.datetime, end: dt.datetime) -> list[Job]:
    board = json.loads(DASHBOARD.read_text())
    jobs = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            if target.get("datasource", {}).get("type") != "grafana-clickhouse-datasource":
                continue
            sql = grafana_macros(target["rawSql"], start, end, 60, {"fabric": fabric})
            jobs.append(Job(f"panel:{panel['title']}:{target['refId']}", sql, {}))
    return jobs


def _epoch_ms(value: Any) -> float:
    if isinstance(value, dt.datetime):
        when = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return round(when.timestamp() * 1000, 3)
    if isinstance(value, dt.date):
        return float((value - dt.date(1970, 1, 1)).days * 86_400_000)
    text = str(value).replace("Z", "+00:00")
    if "T" not in text and " " in text:
        text = text.replace(" ", "T")
    parsed = dt.datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return round(parsed.timestamp() * 1000, 3)


def normalize(value: Any, ch_type: str) -> Any:
    """One value, from any client, in a form the clients' answers compare by."""
    if value is None:
        return None
    base = ch_type
    while True:  # the value's own type, inside Nullable / LowCardinality / SimpleAggregate
        inner = re.sub(r"^(?:Nullable|LowCardinality|SimpleAggregateFunction\(\w+,)\s*\(?(.*)\)$",
                       r"\1", base)
        if inner == base:
            break
        base = inner
    if base.startswith(("DateTime", "Date")):
        return _epoch_ms(value)
    if re.match(r"^(U?Int|Float|Decimal|Bool)", base):
        return round(float(value), 6)
    return str(value)


# Columns computed from now(): they move between the engine's answer and a client's.
NOW_DEPENDENT = re.compile(r"^hours_(isolated|open)$")


def normalized_rows(rows: list[list[Any]] | list[tuple[Any, ...]], types: list[str],
                    names: list[str]) -> list[tuple[Any, ...]]:
    def cell(value: Any, ch_type: str, name: str) -> Any:
        out = normalize(value, ch_type)
        if NOW_DEPENDENT.match(name) and isinstance(out, float) and out >= 0:
            return "hours >= 0"
        return out

    return sorted((tuple(cell(v, t, n) for v, t, n in zip(row, types, names, strict=True))
                   for row in rows), key=repr)
