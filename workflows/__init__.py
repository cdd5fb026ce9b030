"""Temporal runbooks: remediation per port, isolation budget per SU, activities, worker."""
