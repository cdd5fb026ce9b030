"""Stream processing: pure detectors and the Faust agents that wire them to topics.

Exported API (pure, no Faust/Kafka/clock import):

* ``streams.flap.logic.step(state: FlapState, event: PortEvent | CounterDowns, policy)``
  -> ``(FlapState, list[Detection])``; ``FlapState.to_json``/``from_json``.
* ``streams.counters.logic.CountersDetector(policy, expectation=None, media=None)
  .step(state, Counters)`` -> ``(state, list[Detection], list[CounterDowns])``; its BER and
  drop-rate rules in ``streams.counters.ber`` (NVIDIA's field BER table by link type).
* ``streams.degraded_link.logic.check_link(...)``, ``step_topology(state, Topology, policy)``.
* ``streams.probes.logic.step(state, Probe, policy, paths=None, pinned=None)``; routes from a
  topology: ``streams.probes.paths.ProbeRoutes`` / ``RouteBook``.
* ``streams.breaker.logic.step(state, Detection | ActionRecord, policy, su=..., ports_in_su=...)``.
* ``streams.stale.logic.StaleDetector(policy).step(state, Counters, lane=0)``
  -> ``(state, list[Detection])``: silence is a state (``stale`` / ``stale_end``).
* ``streams.engine.Engine(policy, Context(...)).feed(event) -> list[Detection]``: all of the
  above over per-key state, exactly as the worker keys its tables.
* ``streams.replay.replay(lines: Iterable[bytes], policy) -> Iterator[Detection]``.

Runtime: ``streams.app.StreamsApp`` (``fabricwatch worker``), agents in
``streams/<detector>/agent.py``, the ledger sink in ``streams.sink``. ``streams/topology``
(the plan-versus-discovered diff) is its own area.
"""
