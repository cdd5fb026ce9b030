"""Adapters behind the runbook's Protocols: simulator, UFM, SONiC, Kubernetes, ticket webhook, sinks."""
