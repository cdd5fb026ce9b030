"""The Strimzi topics match the contract's registry and what the workers are configured with.

For each worker overlay, the Settings its environment produces (the generated ConfigMap
plus the stream StatefulSet's own env) must give every contract topic the partition count
of the KafkaTopic it runs against, and the stream processors' internal topics (changelogs,
re-keyed topics, the leader topic), taken from a real ``StreamsApp`` built with those
settings, must be declared with the same partition counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.settings import Settings
from schemas import topics as registry
from schemas.acceptance import TIMESTAMP_CONFIG
from schemas.policy import Policy

from .manifests import OVERLAY_KAFKA, build, container_env, env_configmap, find, one


def kafka_topics(name: str) -> dict[str, dict[str, object]]:
    return {d["spec"]["topicName"]: d["spec"] for d in find(build(name), "KafkaTopic")}


def overlay_settings(overlay: str, state_dir: Path) -> Settings:
    docs = build(f"k8s/overlays/{overlay}")
    sts = one(docs, "StatefulSet", "fabricwatch-streams")
    env = {**env_configmap(docs), **container_env(sts["spec"]["template"]["spec"]["containers"][0])}
    env["FABRICWATCH_STATE_DIR"] = str(state_dir)  # the pod's volume path is not ours here
    if "FABRICWATCH_PLAN_PATH" in env:  # the pod's ConfigMap file: a one-cable plan here
        plan = state_dir / "plan.csv"
        plan.write_text("a_device,a_port,b_device,b_port\nleaf-su01-r1,1,spine-01,1\n")
        env["FABRICWATCH_PLAN_PATH"] = str(plan)
    fields = {k: v for k, v in env.items() if k.startswith("FABRICWATCH_")}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in fields.items():
            mp.setenv(key, value)
        return Settings()


def test_every_contract_topic_is_declared_with_the_registry_defaults_at_100k() -> None:
    declared = kafka_topics("strimzi/base")
    for topic in registry.ALL_TOPICS:
        spec = declared[topic.name]
        assert spec["partitions"] == topic.partitions, topic.name
        assert spec["replicas"] == 3
        config = spec["config"]
        assert isinstance(config, dict) and config["min.insync.replicas"] == 2
        # the broker's receive time is the clock event time is bounded by (schemas.acceptance)
        for key, value in TIMESTAMP_CONFIG.items():
            assert config[key] == value, topic.name


def test_no_kafka_topic_outside_the_contract_and_the_streams_app() -> None:
    for name in ("strimzi/base", "strimzi/1m"):
        for topic in kafka_topics(name):
            assert topic in registry.BY_NAME or topic.startswith("fabricwatch-streams"), topic


@pytest.mark.parametrize("overlay", sorted(OVERLAY_KAFKA))
def test_workers_and_topics_agree_on_partitions(overlay: str, tmp_path: Path) -> None:
    from streams.app import StreamsApp, partitions_of

    settings = overlay_settings(overlay, tmp_path)
    declared = kafka_topics(OVERLAY_KAFKA[overlay])
    for topic in registry.ALL_TOPICS:
        assert declared[topic.name]["partitions"] == partitions_of(settings, topic), \
            (overlay, topic.name)
    # the flap table joins port events with counter-downs: both need the same count
    assert partitions_of(settings, registry.PORT_EVENTS) == partitions_of(settings,
                                                                          registry.COUNTERS)
    # the workloads' two apps, as the StatefulSets run them (the trap path apart)
    workloads = build(f"k8s/overlays/{overlay}")
    internal: dict[str, int] = {}
    for name in ("fabricwatch-streams", "fabricwatch-streams-traps"):
        sts = one(workloads, "StatefulSet", name)
        [worker] = sts["spec"]["template"]["spec"]["containers"]
        agents = worker["args"][worker["args"].index("--agents") + 1]
        sa = StreamsApp(settings, Policy(), ledger=False, agents=agents)
        internal.update({sa.counter_downs.get_topic_name(): sa.n_port,
                         sa.breaker.get_topic_name(): 1, sa.correlate.get_topic_name(): 1,
                         f"{sa.app.conf.id}-__assignor-__leader": 1})
        for table in sa.app.tables.values():
            internal[table.changelog_topic.get_topic_name()] = table.partitions
        # workers beyond the input partition count would idle
        assert sts["spec"]["replicas"] <= partitions_of(settings, registry.PORT_EVENTS)
    declared_internal = {k: v["partitions"] for k, v in declared.items()
                         if k.startswith("fabricwatch-streams")}
    assert declared_internal == internal
    assert settings.streams.standby_replicas == 1
    assert settings.streams.topic_replication_factor == 3


def test_changelogs_are_compacted_and_counters_kept_a_day() -> None:
    declared = kafka_topics("strimzi/base")
    for name, spec in declared.items():
        config = spec["config"]
        assert isinstance(config, dict)
        if name.endswith("-changelog") or name == registry.TOPOLOGY.name:
            assert config["cleanup.policy"] == "compact", name
    counters = declared[registry.COUNTERS.name]["config"]
    assert isinstance(counters, dict) and counters["retention.ms"] == 24 * 3600 * 1000
