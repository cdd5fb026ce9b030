"""Degraded link: a port trained below the width or speed the plan or policy expects."""
