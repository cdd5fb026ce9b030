"""One frozen settings tree for every fabricwatch process, built at the entry point and passed down.

Environment variables use the prefix ``FABRICWATCH_``; nested fields use ``__``
(``FABRICWATCH_KAFKA__PORT=29092``). A few common ones have flat aliases documented in the README:
``FABRICWATCH_STATE_DIR`` and ``FABRICWATCH_CLICKHOUSE_URL``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KafkaSettings(_Frozen):
    """The Kafka broker. The local stack runs it on ``host:port`` (controller on ``controller_port``)."""

    host: str = "127.0.0.1"
    port: int = 19092
    controller_port: int = 19093
    # Heap for a 2-core, 24 GiB machine: the broker is I/O bound and small here.
    heap: str = "-Xms512m -Xmx1g"
    # Partition counts per contract topic; keys are topic names, unlisted topics use the registry default.
    partitions: dict[str, int] = Field(default_factory=dict)
    bootstrap: str | None = None  # an external cluster; overrides host:port
    # Collectors send counters as counter_columns messages (one list per field: a fifth of
    # the bytes and far cheaper for every consumer to decode) instead of one object per port.
    columnar_counters: bool = False

    @property
    def bootstrap_servers(self) -> str:
        return self.bootstrap or f"{self.host}:{self.port}"


class TemporalSettings(_Frozen):
    """The Temporal frontend. The local stack runs ``temporal server start-dev`` on ``host:port``."""

    host: str = "127.0.0.1"
    port: int = 17233
    ui_port: int = 18233
    namespace: str = "default"
    task_queue: str = "fabricwatch-runbooks"
    # Where the runbooks' evidence activity runs: the fabric agent's evidence worker, on the
    # host with umad, infiniband-diags and MFT (`fabricwatch evidence-worker`). None: on the
    # runbook workers' own queue, as on one host.
    evidence_task_queue: str | None = None
    address: str | None = None  # an external cluster; overrides host:port

    @property
    def target(self) -> str:
        return self.address or f"{self.host}:{self.port}"


class LedgerSettings(_Frozen):
    """The ClickHouse ledger: embedded chdb in the state folder unless ``clickhouse_url`` is set."""

    http_host: str = "127.0.0.1"
    http_port: int = 18123  # the embedded engine's ClickHouse HTTP interface for other processes
    allow_writes_over_http: bool = False
    # The endpoint's users (ledger.http): each is enabled by its password in the secrets
    # (ledger_http_password / ledger_http_readonly_password, or their _file). A bind address
    # other than loopback needs at least one. The read-only user is the dashboards' one.
    http_user: str = "fabricwatch"
    http_readonly_user: str = "grafana"
    retention_days: int = 400
    raw_counter_retention_days: int = 35
    # The ingest holds a counter sample (uncommitted in Kafka) until this long after its ts
    # and writes what it releases in event-time order: a sample this late or out of order
    # takes its place in the port's delta chain; a later one is kept in counter_late (012).
    counter_lateness_s: float = Field(default=30.0, ge=0.0, le=600.0)


class SecretsSettings(_Frozen):
    """Credentials and fabric keys. Read from the environment or ``*_file`` paths; never logged."""

    ufm_username: str | None = None
    ufm_password: SecretStr | None = None
    ufm_password_file: Path | None = None
    m_key: SecretStr | None = None
    m_key_file: Path | None = None
    sm_key: SecretStr | None = None
    sm_key_file: Path | None = None
    # runbook adapters (workflows/adapters): SONiC RESTCONF and the ticket webhook's bearer token
    sonic_username: str | None = None
    sonic_password: SecretStr | None = None
    sonic_password_file: Path | None = None
    ticket_token: SecretStr | None = None
    # alert receivers (workflows/adapters/notify): the PagerDuty Events API v2 routing key
    # and the Slack incoming webhook's URL (the URL itself is the secret)
    pagerduty_routing_key: SecretStr | None = None
    pagerduty_routing_key_file: Path | None = None
    slack_webhook_url: SecretStr | None = None
    slack_webhook_url_file: Path | None = None
    # the ClickHouse server's password, instead of writing it into clickhouse_url
    clickhouse_password: SecretStr | None = None
    clickhouse_password_file: Path | None = None
    # the embedded ledger endpoint's users (ledger.http_user, ledger.http_readonly_user)
    ledger_http_password: SecretStr | None = None
    ledger_http_password_file: Path | None = None
    ledger_http_readonly_password: SecretStr | None = None
    ledger_http_readonly_password_file: Path | None = None


class StreamsSettings(_Frozen):
    """The stream processors' Faust options that differ between one machine and a cluster."""

    # Hot copies of each table partition on other workers (fast failover); 0 on one machine.
    standby_replicas: int = 0
    # Replication factor of the internal topics (changelogs, re-keyed topics) Faust creates.
    topic_replication_factor: int = 1
    # Fast takeover after a crash: the broker declares a silent worker dead after this
    # (Faust's default is 60 s: detection stopped for a minute after a kill -9) ...
    session_timeout_s: float = 10.0
    heartbeat_interval_s: float = 3.0
    # ... and static membership (KIP-345): a worker restarted under the same instance id gets
    # its partitions back at once, without a rebalance or waiting out the session. Unset: the
    # app id, the host name (a StatefulSet pod's stable name) and the worker index; "" turns
    # static membership off.
    instance_id: str | None = None
    # The counters topic taken in batches by the worker's own consumer (its own group,
    # ``{app id}-counters``, and changelogs; states written once per batch, offsets committed
    # after them: streams/counters/batched.py) instead of Faust's one-event-at-a-time agent.
    counters_batched: bool = False
    # How often that consumer sends the states changed since the last time, awaits every
    # output and commits (Kafka Streams' commit.interval.ms, whose record cache flushes on
    # commit the same way): a host's state written once an interval, not once a message.
    # A crash re-applies at most this much, exactly (streams.engine.once); a rebalance and a
    # stop flush first.
    batched_commit_interval_s: float = Field(default=5.0, gt=0, le=60)


class NotifySettings(_Frozen):
    """Where alerts go (workflows/adapters/notify). Every receiver configured here gets
    every alert; with none (no Alertmanager URL, PagerDuty or Slack), alerts are appended to
    ``file`` (default: ``STATE_DIR/alerts.jsonl``), never only kept in memory."""

    alertmanager_url: str | None = None  # e.g. http://alertmanager.monitoring:9093
    pagerduty: bool = False  # send to PagerDuty (the routing key from the secrets)
    pagerduty_url: str = "https://events.pagerduty.com/v2/enqueue"
    slack: bool = False  # post to Slack (the webhook URL from the secrets)
    file: Path | None = None  # also (or, with no receiver, only) append alerts here
    generator_url: str = ""  # Alertmanager's back-link (e.g. the Temporal UI)
    # a firing alert's Alertmanager endsAt this far ahead; the incident re-posts at half
    horizon_s: float = 24 * 3600.0


class Settings(BaseSettings):
    """Everything a fabricwatch process is configured with."""

    model_config = SettingsConfigDict(
        env_prefix="FABRICWATCH_",
        env_nested_delimiter="__",
        frozen=True,
        extra="ignore",
    )

    state_dir: Path = Path(".fabricwatch")
    clickhouse_url: str | None = None  # e.g. http://user:pass@clickhouse:8123/fabricwatch
    fabric: str = "lab"
    policy_path: Path | None = None
    plan_path: Path | None = None  # the cable plan CSV the topology diff checks fabric.topology against
    kafka: KafkaSettings = KafkaSettings()
    temporal: TemporalSettings = TemporalSettings()
    ledger: LedgerSettings = LedgerSettings()
    secrets: SecretsSettings = SecretsSettings()
    streams: StreamsSettings = StreamsSettings()
    notify: NotifySettings = NotifySettings()
    # Serve Prometheus metrics on this port (runtime.metrics); unset: no endpoint.
    metrics_port: int | None = None
    # The stream worker's and the ledger ingest's young-generation collector threshold
    # (runtime.collector); 0 keeps CPython's default (700).
    gc_young_threshold: int = Field(default=50_000, ge=0)

    def clickhouse_password(self) -> SecretStr | None:
        """The server ledger's password from the environment or its file (None: the URL's)."""
        return read_secret(self.secrets.clickhouse_password,
                           self.secrets.clickhouse_password_file, "ClickHouse password")

    def ledger_http_passwords(self) -> tuple[SecretStr | None, SecretStr | None]:
        """The ledger endpoint's passwords (user, read-only user) from the env or files."""
        sec = self.secrets
        return (read_secret(sec.ledger_http_password, sec.ledger_http_password_file,
                            "ledger endpoint password"),
                read_secret(sec.ledger_http_readonly_password,
                            sec.ledger_http_readonly_password_file,
                            "ledger endpoint read-only password"))

    def pagerduty_routing_key(self) -> SecretStr | None:
        return read_secret(self.secrets.pagerduty_routing_key,
                           self.secrets.pagerduty_routing_key_file, "PagerDuty routing key")

    def slack_webhook_url(self) -> SecretStr | None:
        return read_secret(self.secrets.slack_webhook_url, self.secrets.slack_webhook_url_file,
                           "Slack webhook URL")

    @property
    def alerts_file(self) -> Path:
        return self.notify.file or self.state_dir / "alerts.jsonl"

    @property
    def ledger_path(self) -> Path:
        return self.state_dir / "ledger"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"


class SecretFileError(ValueError):
    """A configured secret file cannot be read (the message never holds the secret)."""


def read_secret(value: SecretStr | None, path: Path | None, what: str) -> SecretStr | None:
    """A secret given directly, else read from its file (trailing newline dropped), else None."""
    if value is not None:
        return value
    if path is None:
        return None
    try:
        return SecretStr(path.read_text(encoding="utf-8").strip())
    except OSError as exc:
        raise SecretFileError(f"cannot read the {what} file {path}: {exc.strerror}") from None


def load_settings() -> Settings:
    """Build the settings tree from the environment (called once, at the entry point)."""
    return Settings()
