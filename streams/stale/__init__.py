"""Silence is a state: devices and ports that stop reporting become ``stale``."""
