"""``StreamsApp(agents=...)``: the trap path and the rest split the worker's agents, tables
and input topics between them without gap or overlap, and meet on the same internal topics."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.settings import Settings
from schemas import topics as registry
from schemas.policy import Policy
from streams.app import StreamsApp


def app(tmp_path: Path, agents: str) -> StreamsApp:
    return StreamsApp(Settings(state_dir=tmp_path / agents), Policy(), ledger=False,
                      app_id="t-groups", agents=agents)


def inputs(sa: StreamsApp) -> set[str]:
    return {t for agent in sa.app.agents.values() for t in agent.channel.topics}


def test_traps_and_rest_are_all_of_it_once(tmp_path: Path) -> None:
    whole, traps, rest = (app(tmp_path, g) for g in ("all", "traps", "rest"))
    assert set(traps.app.agents) | set(rest.app.agents) == set(whole.app.agents)
    assert not set(traps.app.agents) & set(rest.app.agents)
    assert set(traps.app.tables) | set(rest.app.tables) == set(whole.app.tables)
    assert not set(traps.app.tables) & set(rest.app.tables)
    assert inputs(traps) | inputs(rest) == inputs(whole)
    # a trap never waits behind counters: the two are never one process's inputs
    assert registry.PORT_EVENTS.name in inputs(traps)
    assert registry.COUNTERS.name not in inputs(traps)
    assert registry.PORT_EVENTS.name not in inputs(rest)
    # the counters' downs reach the other process's flap agent, every detection its
    # correlator, the isolating ones its breaker: the internal topics are the app id's
    for name in ("counter_downs", "correlate", "breaker"):
        topic = getattr(traps, name).get_topic_name()
        assert topic == getattr(rest, name).get_topic_name() == getattr(
            whole, name).get_topic_name()
        assert topic.startswith("t-groups.")
    assert "t-groups.counter-downs" in inputs(traps)
    assert "t-groups.correlate" in inputs(traps)


def test_each_group_is_its_own_consumer_group_and_state(tmp_path: Path) -> None:
    whole, traps, rest = (app(tmp_path, g) for g in ("all", "traps", "rest"))
    assert whole.app.conf.id == "t-groups"  # one worker: the consumer group as before
    assert (traps.app.conf.id, rest.app.conf.id) == ("t-groups-traps", "t-groups-rest")
    assert traps.datadir != rest.datadir
    assert traps.flap_table is not None and rest.flap_table is None
    assert rest.counters_table is not None and traps.counters_table is None


def test_an_unknown_group_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="agents 'flap'"):
        app(tmp_path, "flap")


def test_the_worker_cli_refuses_an_unknown_group() -> None:
    from click.testing import CliRunner

    from fabricwatch.commands.worker import worker_command

    res = CliRunner().invoke(worker_command, ["--agents", "flap"])
    assert res.exit_code == 2 and "--agents" in res.output
