"""Breaker accounting: isolated ports per SU, and breaker_open when a grant would exceed it."""
