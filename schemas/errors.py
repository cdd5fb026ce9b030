"""The one exception every contract check raises: where in the message, and why."""

from __future__ import annotations


class ContractError(ValueError):
    """A message or file that does not satisfy the contract.

    ``path`` names the offending field (``ports.3.symbol_errors``; empty for the whole
    message) and ``reason`` says what is wrong in words an operator can act on.
    """

    def __init__(self, reason: str, path: str = "") -> None:
        self.reason = reason
        self.path = path
        super().__init__(f"{path}: {reason}" if path else reason)
