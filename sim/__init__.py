"""The fabric simulator: topology, telemetry, fault catalogue, simulated controller."""
