"""Parsers from real fabric tool output to contract events, and the publisher."""
