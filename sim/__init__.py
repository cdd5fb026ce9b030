"""The fabric simulator: topology, telemetry, fault catalogue, simulated controller.

- ``sim.topology.generate(preset | Params) -> Fabric``: a rail-optimized fat tree
  (``to_ibnetdiscover``, ``to_plan_csv``, ``discovered(faults)``, ``to_topology``).
- ``sim.controller.SimController(state_dir)``: isolate / unisolate / reset_counters /
  repair_step / is_isolated / is_healthy, state in ``state_dir/sim-controller.json``.
- ``sim.faults``: ``Fault``, ``parse_spec``, ``load_file``, ``KINDS``.
- ``sim.telemetry.Simulator(fabric, faults=..., controller=...)``: ``step()`` -> encoded
  contract messages; ``probe(...)``, ``path_ports(...)``.
- ``sim.run``: the paced run loop and its sinks (Kafka through the shared Publisher).

Submodules are imported on use; this package imports nothing at import time.
"""
