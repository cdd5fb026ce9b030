"""The production-shaped run on loopback: ``fabricwatch stack up --cluster``.

What the deployment runs, as processes on one machine:

* a 3-node KRaft Kafka cluster (each node broker and controller), every topic replicated three
  times with ``min.insync.replicas=2``; every producer writes with ``acks=all``;
* the Temporal dev server (``fabricwatch.stack.LocalStack``, SQLite file);
* ``ledger serve``: the embedded ledger's owner, serving its ClickHouse HTTP endpoint (writes
  allowed for the ``fabricwatch`` user, whose password is generated into the state folder);
* ``ledger ingest`` through the server backend (clickhouse-connect) against that endpoint;
* two stream workers in one consumer group (RocksDB tables with changelogs replicated three
  times, one standby replica of each table partition);
* two runbook workers (and dispatchers) on one task queue, acting on the simulated controller;
* the simulator publishing a 10k-port fabric (``--preset``) with the given faults.

Layout: ``<state>/cluster/`` holds each broker's folder (``kafka-N/``), the generated
inventory, plan and ledger password; ``<state>/run/cluster/<name>.json`` the pid records;
``<state>/logs/<name>.log`` each component's output. Each component runs in a process group of
its own; ``kill(name)`` sends it a signal (the drills' kill -9) and ``start(name)`` starts it
again, as Kubernetes restarts a pod. ``down()`` stops everything, from any process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from fabricwatch.stack import (
    LocalStack,
    StackError,
    _log_tail,
    _PidRecord,
    _record_alive,
    _run_coro,
    _wait_port,
    ensure_kafka_jars,
    ensure_topics,
    find_java,
    kafka_round_trip,
)
from fabricwatch.stack_config import (
    CLUSTER_HEAP,
    CLUSTER_REPLICATION,
    KAFKA_HOME,
    READINESS_TOPIC,
    ClusterNode,
    StackConfigError,
    cluster_bootstrap,
    cluster_nodes,
    kafka_format_args,
    kafka_server_args,
    new_cluster_id,
    ports_in_use,
    render_cluster_properties,
    topic_partitions,
)
from runtime.procgroups import die_with_parent, group_members, proc_stat, stop_group
from runtime.settings import Settings

LEDGER_USER = "fabricwatch"  # the endpoint's writing user (settings.ledger.http_user's default)
DEFAULT_PRESET = "10k-port"
_STOP_GRACE_S = 20.0


@dataclass(frozen=True)
class ClusterOptions:
    """What the cluster runs besides its services."""

    preset: str = DEFAULT_PRESET
    interval: str = "10s"
    seed: int = 0
    faults: tuple[str, ...] = ()
    stream_workers: int = 2
    runbook_workers: int = 2
    # (broker, controller) port pairs; default: from settings.kafka (see cluster_nodes)
    kafka_ports: list[tuple[int, int]] | None = None
    heap: str = CLUSTER_HEAP
    simulator: bool = True
    sim_args: tuple[str, ...] = ()  # extra `sim run` options (e.g. --probe-every)
    extra_env: dict[str, str] = field(default_factory=dict)


class LocalCluster:
    """Every component of the production-shaped run, in ``settings.state_dir``."""

    def __init__(self, settings: Settings, options: ClusterOptions | None = None, *,
                 detach: bool = False, timeout: float = 240.0) -> None:
        self.settings = settings
        self.opts = options or ClusterOptions()
        self.detach = detach
        self.timeout = timeout
        self.state_dir = settings.state_dir.resolve()
        self.dir = self.state_dir / "cluster"
        self.run_dir = self.state_dir / "run" / "cluster"
        self.logs_dir = self.state_dir / "logs"
        self.nodes: list[ClusterNode] = cluster_nodes(settings.kafka, ports=self.opts.kafka_ports)
        self.bootstrap = cluster_bootstrap(self.nodes)
        # the dev server as the single-node stack runs it, its pid record beside ours
        self.temporal = LocalStack(settings, services=["temporal"], detach=detach,
                                   timeout=timeout)
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self.spawned: list[int] = []  # every process group started (a test checks none is left)
        self._java = "java"

    # ---- names and layout

    @property
    def workers(self) -> list[str]:
        return [f"worker-{i}" for i in range(self.opts.stream_workers)]

    @property
    def runbook_workers(self) -> list[str]:
        return [f"runbooks-{i}" for i in range(self.opts.runbook_workers)]

    def components(self) -> list[str]:
        """Every process in start order (``down`` stops them in reverse)."""
        names = [n.name for n in self.nodes] + ["ledger", "ingest", *self.workers,
                                                *self.runbook_workers]
        return names + (["sim"] if self.opts.simulator else [])

    def log_path(self, name: str) -> Path:
        return self.logs_dir / f"{name}.log"

    @property
    def sim_state(self) -> Path:
        return self.state_dir / "sim"

    @property
    def fabric(self) -> str:
        from sim.topology import resolve_params

        return resolve_params(self.opts.preset).fabric

    @property
    def ledger_url(self) -> str:
        return f"http://{LEDGER_USER}@{self.settings.ledger.http_host}:{self.settings.ledger.http_port}"

    @property
    def password_file(self) -> Path:
        return self.dir / "ledger-password"

    def _record_path(self, name: str) -> Path:
        return self.run_dir / f"{name}.json"

    def _record(self, name: str) -> _PidRecord | None:
        record = _PidRecord.load(self._record_path(name))
        return record if record is not None and _record_alive(record) else None

    def running(self) -> dict[str, bool]:
        """Whether each component's process is alive (no network check)."""
        out = {name: self._record(name) is not None for name in self.components()}
        out["temporal"] = self.temporal.running().get("temporal", False)
        return out

    # ---- the environment every fabricwatch child gets

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "FABRICWATCH_STATE_DIR": str(self.state_dir),
            "FABRICWATCH_KAFKA__BOOTSTRAP": self.bootstrap,
            "FABRICWATCH_TEMPORAL__ADDRESS": self.settings.temporal.target,
            "FABRICWATCH_FABRIC": self.fabric,
            "FABRICWATCH_PLAN_PATH": str(self.dir / "plan.csv"),
            "FABRICWATCH_LEDGER__HTTP_PORT": str(self.settings.ledger.http_port),
            "FABRICWATCH_LEDGER__ALLOW_WRITES_OVER_HTTP": "true",
            "FABRICWATCH_SECRETS__LEDGER_HTTP_PASSWORD_FILE": str(self.password_file),
            # the changelogs and re-keyed topics as replicated as the contract's, and a hot
            # copy of every table partition on the other worker
            "FABRICWATCH_STREAMS__TOPIC_REPLICATION_FACTOR": str(CLUSTER_REPLICATION),
            "FABRICWATCH_STREAMS__STANDBY_REPLICAS": "1",
            "PYTHONUNBUFFERED": "1",
            # the children run in the state folder, whose `ledger` folder would shadow the package
            "PYTHONSAFEPATH": "1",
        })
        env.update(self.opts.extra_env)
        return env

    def _argv(self, name: str) -> tuple[list[str], dict[str, str]]:
        fw = [sys.executable, "-m", "fabricwatch"]
        env = self.env()
        if name.startswith("kafka-"):
            props = self.dir / name / "server.properties"
            return kafka_server_args(self._java, KAFKA_HOME, props, self.opts.heap), env
        if name == "ledger":
            return [*fw, "ledger", "serve"], env
        if name == "ingest":
            # the server backend (clickhouse-connect) against the owner's endpoint
            env["FABRICWATCH_CLICKHOUSE_URL"] = self.ledger_url
            env["FABRICWATCH_SECRETS__CLICKHOUSE_PASSWORD_FILE"] = str(self.password_file)
            return [*fw, "ledger", "ingest"], env
        if name.startswith("worker-"):
            index = name.removeprefix("worker-")
            return [*fw, "worker", "--workers", "1", "--index", index, "--no-ledger"], env
        if name.startswith("runbooks-"):
            return [*fw, "runbook-worker", "--records", "kafka", "--controller", "sim",
                    "--sim-state", str(self.sim_state), "--topology",
                    str(self.dir / "ibnetdiscover.txt"), "--alerts-file",
                    str(self.state_dir / "alerts.jsonl"), "--loglevel", "warning"], env
        if name == "sim":
            faults = [a for spec in self.opts.faults for a in ("--fault", spec)]
            return [*fw, "sim", "run", "--preset", self.opts.preset, "--interval",
                    self.opts.interval, "--seed", str(self.opts.seed), "--state-dir",
                    str(self.sim_state), *self.opts.sim_args, *faults], env
        raise StackConfigError(f"no cluster component named {name!r}")

    # ---- lifecycle

    def up(self) -> dict[str, bool]:
        """Start what is not running and wait until the brokers, Temporal and the ledger answer."""
        started: list[str] = []
        try:
            self._prepare()
            for node in self.nodes:
                if self._record(node.name) is None:
                    self._start_node(node)
                    started.append(node.name)
            _run_coro(self._wait_kafka)
            self.temporal.up()
            if self._record("ledger") is None:
                self.start("ledger")
                started.append("ledger")
            _run_coro(self._wait_ledger)
            for name in self.components():
                if name.startswith("kafka-") or name == "ledger":
                    continue
                if self._record(name) is None:
                    self.start(name)
                    started.append(name)
        except BaseException:
            for name in reversed(started):
                self.stop(name)
            self.temporal.down()
            raise
        return self.running()

    def _prepare(self) -> None:
        """Checks that can fail before anything starts, and the generated files."""
        from sim.topology import generate

        self.dir.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        kafka_server_args("java", KAFKA_HOME, Path("server.properties"), self.opts.heap)
        topic_partitions(self.settings.kafka)
        to_bind = [(n.name, n.host, p) for n in self.nodes if self._record(n.name) is None
                   for p in (n.port, n.controller_port)]
        if self._record("ledger") is None:
            to_bind.append(("ledger.http_port", self.settings.ledger.http_host,
                            self.settings.ledger.http_port))
        taken = ports_in_use(to_bind)
        if taken:
            raise StackError("cannot start the cluster:\n" + "\n".join(
                f"  {t.what} {t.host}:{t.port} is {t.reason}" for t in taken)
                + "\nchoose other ports (FABRICWATCH_KAFKA__PORT, FABRICWATCH_KAFKA__CONTROLLER_PORT, "
                "FABRICWATCH_LEDGER__HTTP_PORT) or stop what holds them")
        self._java = find_java()
        ensure_kafka_jars(KAFKA_HOME, self.logs_dir / "maven.log")
        if not self.password_file.exists():
            self.password_file.touch(mode=0o600)
            self.password_file.write_text(secrets.token_urlsafe(24) + "\n")
        fabric = generate(self.opts.preset)
        for fname, text in (("ibnetdiscover.txt", fabric.to_ibnetdiscover),
                            ("plan.csv", fabric.to_plan_csv)):
            if not (self.dir / fname).exists():
                (self.dir / fname).write_text(text())

    def _start_node(self, node: ClusterNode) -> None:
        ndir = self.dir / node.name
        data = ndir / "data"
        data.mkdir(parents=True, exist_ok=True)
        template = (KAFKA_HOME / "config" / "cluster.properties.in").read_text()
        props = ndir / "server.properties"
        props.write_text(render_cluster_properties(node, self.nodes, data, template))
        if not (data / "meta.properties").exists():
            # one cluster id for every node: they form one quorum
            id_file = self.dir / "cluster.id"
            if not id_file.exists():
                id_file.write_text(new_cluster_id() + "\n")
            log = self.log_path(node.name)
            with open(log, "ab") as out:
                rc = subprocess.run(  # noqa: S603 - argv built from validated settings
                    kafka_format_args(self._java, KAFKA_HOME, props, id_file.read_text().strip()),
                    cwd=ndir, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    timeout=300, check=False).returncode
            if rc != 0:
                raise StackError(f"formatting {node.name}'s storage failed (exit {rc}); {log}:\n"
                                 + _log_tail(log))
        self._spawn(node.name, kafka_server_args(self._java, KAFKA_HOME, props, self.opts.heap),
                    self.env(), ndir)

    def start(self, name: str) -> None:
        """Start one component (again): a broker keeps its data, a worker its state folder."""
        if name == "temporal":
            self.temporal.up()
            return
        if name.startswith("kafka-"):
            self._start_node(next(n for n in self.nodes if n.name == name))
            return
        argv, env = self._argv(name)
        self._spawn(name, argv, env, self.state_dir)

    def _spawn(self, name: str, args: list[str], env: dict[str, str], cwd: Path) -> None:
        old = self._procs.pop(name, None)
        if old is not None:  # it exited on its own: reap it before its successor starts
            with contextlib.suppress(subprocess.TimeoutExpired):
                old.wait(timeout=5)
        log = self.log_path(name)
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        with open(log, "ab") as out:
            out.write(f"==== fabricwatch: starting {name} at {stamp}: {' '.join(args)}\n".encode())
            out.flush()
            die_with_owner = (not self.detach and sys.platform == "linux"
                              and threading.current_thread() is threading.main_thread())
            proc = subprocess.Popen(  # noqa: S603 - our own argv, no shell
                args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=die_with_parent if die_with_owner else None)
        stat = proc_stat(proc.pid)
        _PidRecord(service=name, pid=proc.pid, start_ticks=stat[2] if stat else 0,
                   address="", started_at=stamp, detached=self.detach
                   ).save(self._record_path(name))
        self._procs[name] = proc
        self.spawned.append(proc.pid)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> bool:
        """Signal one component's whole process group (SIGKILL: the drills' kill -9)."""
        if name == "temporal":
            raise StackConfigError("restart Temporal with restart_temporal()")
        record = self._record(name)
        if record is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.pid, sig)
        if sig == signal.SIGKILL:
            self._reap(name, record.pid)
        return True

    def _reap(self, name: str, pgid: int, wait_s: float = 10.0) -> None:
        proc = self._procs.pop(name, None)
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            if proc is not None:
                proc.poll()
            if not group_members(pgid):
                break
            time.sleep(0.05)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)
        self._record_path(name).unlink(missing_ok=True)

    def restart_temporal(self) -> None:
        """Stop the Temporal server (SIGTERM) and start it on the same database file."""
        self.temporal.down()
        self.temporal.up()

    def stop(self, name: str, grace_s: float = _STOP_GRACE_S) -> bool:
        """SIGTERM one component's group, SIGKILL after ``grace_s``; True if it was running."""
        record = _PidRecord.load(self._record_path(name))
        proc = self._procs.pop(name, None)
        if record is None and proc is None:
            return False
        alive = proc is not None and proc.poll() is None or (
            record is not None and _record_alive(record))
        pgid = proc.pid if proc is not None else record.pid if record is not None else 0
        if alive or (record is not None and group_members(pgid)):
            stop_group(pgid, proc, grace_s=grace_s)
        if proc is not None:  # the group can look empty (a zombie leader) before poll() saw it
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._record_path(name).unlink(missing_ok=True)
        return alive

    def down(self) -> list[str]:
        """Stop every component (the simulator first, the brokers last) and Temporal."""
        stopped = []
        names = self.components()
        for name in reversed(names):
            if name.startswith("kafka-"):
                continue
            if self.stop(name):
                stopped.append(name)
        stopped += self.temporal.down()
        for name in reversed(names):
            if name.startswith("kafka-") and self.stop(name, grace_s=30.0):
                stopped.append(name)
        return stopped

    def __enter__(self) -> LocalCluster:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # ---- readiness

    def _check_alive(self, names: list[str]) -> None:
        for name in names:
            if self._record(name) is None:
                log = self.log_path(name)
                raise StackError(f"{name} exited while starting; last lines of {log}:\n"
                                 + _log_tail(log))

    async def _wait_kafka(self) -> None:
        """Every broker answers, the topics exist with three replicas, a write is acked by all."""
        wanted = topic_partitions(self.settings.kafka)
        wanted[READINESS_TOPIC] = 1
        deadline = time.monotonic() + self.timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            self._check_alive([n.name for n in self.nodes])
            try:
                for node in self.nodes:
                    await asyncio.wait_for(_wait_port(node.host, node.port), 2)
                await asyncio.wait_for(ensure_topics(self.bootstrap, wanted,
                                                     replication=CLUSTER_REPLICATION), 30)
                await kafka_round_trip(self.bootstrap)
                return
            except StackError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure before the deadline is "not yet"
                last = exc
                await asyncio.sleep(1.0)
        raise StackError(f"the Kafka cluster at {self.bootstrap} did not answer within "
                         f"{self.timeout:.0f} s (last error: {last!r}); see "
                         f"{self.log_path('kafka-1')}")

    async def _wait_ledger(self) -> None:
        cfg = self.settings.ledger
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            self._check_alive(["ledger"])
            with contextlib.suppress(OSError, asyncio.TimeoutError):
                await asyncio.wait_for(_wait_port(cfg.http_host, cfg.http_port), 2)
                return
            await asyncio.sleep(0.5)
        raise StackError(f"the ledger endpoint did not answer within {self.timeout:.0f} s; "
                         f"see {self.log_path('ledger')}:\n" + _log_tail(self.log_path("ledger")))

    @contextlib.contextmanager
    def ledger_client(self) -> Iterator[object]:
        """A clickhouse-connect client on the ledger endpoint (the counts of the drills)."""
        import clickhouse_connect

        cfg = self.settings.ledger
        client = clickhouse_connect.get_client(
            host=cfg.http_host, port=cfg.http_port, username=LEDGER_USER,
            password=self.password_file.read_text().strip(), compress=False)
        try:
            yield client
        finally:
            client.close()

    def has_records(self) -> bool:
        """Whether a cluster was started from this state folder (its pid records exist)."""
        return self.run_dir.is_dir() and any(self.run_dir.glob("*.json"))
