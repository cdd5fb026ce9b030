"""Active probes: slow-not-dead bandwidth and the link several slow probes share."""
