"""Loopback stand-ins for products that cannot run here (UFM, SONiC RESTCONF, the Kubernetes
API server). Each follows its product's documented API and enforces the rules the adapters
depend on, so a wrong request fails a test instead of passing silently."""
