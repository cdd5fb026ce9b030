"""The stack's pure parts: broker config, command lines, validation, port checks. Starts nothing."""

from __future__ import annotations

import base64
import re
import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fabricwatch.stack_config import (
    KAFKA_HOME,
    StackConfigError,
    check_host,
    free_ports,
    heap_flags,
    java_major_version,
    kafka_server_args,
    new_cluster_id,
    port_free,
    ports_in_use,
    redact_url,
    render_server_properties,
    stack_ports,
    temporal_server_args,
    topic_partitions,
)
from runtime.settings import KafkaSettings, Settings, TemporalSettings
from schemas.topics import ALL_TOPICS, COUNTERS, DLQ

TEMPLATE = (KAFKA_HOME / "config" / "server.properties.in").read_text()


def _props(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def test_rendered_properties_are_single_node_kraft_on_the_given_ports(tmp_path: Path) -> None:
    kafka = KafkaSettings(host="127.0.0.1", port=29092, controller_port=29093)
    props = _props(render_server_properties(kafka, tmp_path / "data", TEMPLATE))
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == f"{props['node.id']}@127.0.0.1:29093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:29092"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["log.dirs"] == str(tmp_path / "data")
    # One node: every internal topic must have replication factor 1 or the broker never serves.
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "share.coordinator.state.topic.replication.factor", "default.replication.factor"):
        assert props[key] == "1", key
    assert props["num.network.threads"] == "2" and props["num.io.threads"] == "2"
    # Static voters and --standalone do not mix (format throws): the bootstrap-servers form is absent.
    assert "controller.quorum.bootstrap.servers" not in props
    assert "$" not in render_server_properties(kafka, tmp_path, TEMPLATE)


@pytest.mark.parametrize(("change", "message"), [
    ({"port": 29092, "controller_port": 29092}, "must differ"),
    ({"port": 0}, "kafka.port"),
    ({"controller_port": 70000}, "kafka.controller_port"),
    ({"host": "127.0.0.1\nlisteners=evil"}, "not an IP address"),
])
def test_bad_kafka_settings_are_refused(tmp_path: Path, change: dict[str, object], message: str) -> None:
    with pytest.raises(StackConfigError, match=message):
        render_server_properties(KafkaSettings.model_validate(change), tmp_path, TEMPLATE)


def test_a_broken_template_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(StackConfigError, match="template"):
        render_server_properties(KafkaSettings(), tmp_path, "x=${nope}")


def test_data_dir_with_a_comma_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StackConfigError, match="comma"):
        render_server_properties(KafkaSettings(), tmp_path / "a,b", TEMPLATE)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "broker-1.lab"])
def test_hosts_accepted(host: str) -> None:
    assert check_host(host) == host


@pytest.mark.parametrize("host", ["", "a b", "x\n", "-x", "a..b", "host;rm"])
def test_hosts_refused(host: str) -> None:
    with pytest.raises(StackConfigError):
        check_host(host)


def test_heap_flags() -> None:
    assert heap_flags("-Xms512m -Xmx1g") == ["-Xms512m", "-Xmx1g"]
    for bad in ["", "-Xmx1g -jar evil.jar", "-XX:+UseG1GC", "-Xmx1g;x"]:
        with pytest.raises(StackConfigError):
            heap_flags(bad)


def test_broker_command_line() -> None:
    args = kafka_server_args("/usr/bin/java", KAFKA_HOME, Path("/s/server.properties"), "-Xms512m -Xmx1g")
    assert args[:3] == ["/usr/bin/java", "-Xms512m", "-Xmx1g"]
    assert args[-2:] == ["kafka.Kafka", "/s/server.properties"]
    cp = args[args.index("-cp") + 1].split(":")
    assert cp == [str(KAFKA_HOME / "config"), f"{KAFKA_HOME / 'libs'}/*"]


def test_topic_partitions_default_to_the_registry_and_take_overrides() -> None:
    assert topic_partitions(KafkaSettings()) == {t.name: t.partitions for t in ALL_TOPICS}
    counts = topic_partitions(KafkaSettings(partitions={COUNTERS.name: 48}))
    assert counts[COUNTERS.name] == 48 and counts[DLQ.name] == DLQ.partitions
    with pytest.raises(StackConfigError, match="outside the contract"):
        topic_partitions(KafkaSettings(partitions={"fabric.typo": 3}))
    with pytest.raises(StackConfigError, match=">= 1"):
        topic_partitions(KafkaSettings(partitions={DLQ.name: 0}))


@given(st.integers(min_value=0, max_value=200))
def test_cluster_ids_look_like_kafkas(_: int) -> None:
    cid = new_cluster_id()
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cid) and not cid.startswith("-")
    assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_temporal_command_line(tmp_path: Path) -> None:
    t = TemporalSettings(host="127.0.0.1", port=27233, ui_port=28233)
    args = temporal_server_args(Path("/v/bin/temporal"), t, tmp_path / "t.db")
    assert args[:3] == ["/v/bin/temporal", "server", "start-dev"]
    flags = dict(zip(args[3::2], args[4::2], strict=False))
    assert flags["--db-filename"] == str(tmp_path / "t.db")
    assert flags["--ip"] == "127.0.0.1" and flags["--port"] == "27233" and flags["--ui-port"] == "28233"
    assert "--namespace" not in args and "--ui-disable-news-fetch" in args
    other = temporal_server_args(Path("t"), TemporalSettings(namespace="fabric-ops"), tmp_path / "t.db")
    assert other[-2:] == ["--namespace", "fabric-ops"]
    for bad in (TemporalSettings(namespace="a b"), TemporalSettings(port=1, ui_port=1)):
        with pytest.raises(StackConfigError):
            temporal_server_args(Path("t"), bad, tmp_path / "t.db")


@pytest.mark.parametrize(("text", "major"), [
    ('openjdk version "17.0.15" 2025-04-15', 17),
    ('openjdk version "21" 2023-09-19', 21),
    ('java version "1.8.0_292"', 8),
    ("no java here", None),
])
def test_java_major_version(text: str, major: int | None) -> None:
    assert java_major_version(text) == major


def test_port_checks_see_a_listener_and_its_release() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        assert port_free("127.0.0.1", port) == "in use"
        taken = ports_in_use([("kafka.port", "127.0.0.1", port)])
        assert [(t.what, t.port, t.reason) for t in taken] == [("kafka.port", port, "in use")]
    assert port_free("127.0.0.1", port) is None
    assert ports_in_use([("kafka.port", "127.0.0.1", port)]) == []


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(4)
    assert len(set(ports)) == 4
    assert all(port_free("127.0.0.1", p) is None for p in ports)


def test_stack_ports_come_from_settings() -> None:
    s = Settings(kafka=KafkaSettings(port=1001, controller_port=1002),
                 temporal=TemporalSettings(port=1003, ui_port=1004))
    assert stack_ports(s) == {
        "kafka": [("kafka.port", "127.0.0.1", 1001), ("kafka.controller_port", "127.0.0.1", 1002)],
        "temporal": [("temporal.port", "127.0.0.1", 1003), ("temporal.ui_port", "127.0.0.1", 1004)],
    }


def test_redact_url_hides_credentials() -> None:
    assert redact_url("http://u:secret@ch:8123/db") == "http://***@ch:8123/db"
    assert "secret" not in redact_url("https://secret@ch/db")
    assert redact_url("http://ch:8123") == "http://ch:8123"
