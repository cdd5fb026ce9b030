"""Flap dampening: trailing-window count of link downs per port."""
