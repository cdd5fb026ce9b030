"""Topology as a contract: the cable plan, the diff against the discovered fabric, its agent."""
