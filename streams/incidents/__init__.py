"""Incident correlation: one root cause, one incident (``logic``), and its agent."""
