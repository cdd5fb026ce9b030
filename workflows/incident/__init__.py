"""The incident runbook: one per incident, not per port."""
