"""The loopback cluster's broker configuration: three voters, replication 3, min ISR 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fabricwatch.stack_config import (
    KAFKA_HOME,
    StackConfigError,
    cluster_bootstrap,
    cluster_nodes,
    render_cluster_properties,
)
from runtime.settings import KafkaSettings

TEMPLATE = (KAFKA_HOME / "config" / "cluster.properties.in").read_text()


def _props(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def test_each_node_names_every_voter_and_its_own_listeners() -> None:
    nodes = cluster_nodes(KafkaSettings(port=29092, controller_port=29093))
    assert [(n.port, n.controller_port) for n in nodes] == [(29092, 29093), (29094, 29095),
                                                            (29096, 29097)]
    assert cluster_bootstrap(nodes) == "127.0.0.1:29092,127.0.0.1:29094,127.0.0.1:29096"
    second = _props(render_cluster_properties(nodes[1], nodes, Path("/s/kafka-2/data"), TEMPLATE))
    assert second["node.id"] == "2"
    assert second["controller.quorum.voters"] == ("1@127.0.0.1:29093,2@127.0.0.1:29095,"
                                                  "3@127.0.0.1:29097")
    assert second["listeners"] == "PLAINTEXT://127.0.0.1:29094,CONTROLLER://127.0.0.1:29095"
    assert second["log.dirs"] == "/s/kafka-2/data"
    # what production runs: three copies, an acks=all write needs two of them
    assert second["default.replication.factor"] == "3"
    assert second["offsets.topic.replication.factor"] == "3"
    assert second["min.insync.replicas"] == "2"
    assert second["unclean.leader.election.enable"] == "false"


def test_explicit_ports_and_their_checks() -> None:
    nodes = cluster_nodes(KafkaSettings(), ports=[(1001, 1002), (1003, 1004), (1005, 1006)])
    assert [n.name for n in nodes] == ["kafka-1", "kafka-2", "kafka-3"]
    with pytest.raises(StackConfigError, match="must all differ"):
        cluster_nodes(KafkaSettings(), ports=[(1001, 1002), (1002, 1004), (1005, 1006)])
    with pytest.raises(StackConfigError, match="3 port pairs"):
        cluster_nodes(KafkaSettings(), ports=[(1001, 1002)])
    with pytest.raises(StackConfigError, match="1..65535"):
        cluster_nodes(KafkaSettings(port=65534, controller_port=65535))
    with pytest.raises(StackConfigError, match="newline or comma"):
        render_cluster_properties(nodes[0], nodes, Path("/a,b"), TEMPLATE)


@given(st.integers(1, 60000), st.integers(1, 60000))
def test_rendered_ports_are_the_nodes_and_distinct(port: int, cport: int) -> None:
    try:
        nodes = cluster_nodes(KafkaSettings(port=port, controller_port=cport))
    except StackConfigError:
        return  # overlapping ranges are refused, not rendered
    for node in nodes:
        props = _props(render_cluster_properties(node, nodes, Path("/d"), TEMPLATE))
        assert props["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{node.port}"
        assert props["controller.quorum.voters"].count("@") == 3
    every = [p for n in nodes for p in (n.port, n.controller_port)]
    assert len(set(every)) == 6
