"""The one exception every collector parser raises: which file, which line, and why."""

from __future__ import annotations

from schemas import ContractError


class ParseError(ContractError):
    """Tool output that a parser cannot turn into contract events.

    ``file`` is the input's name (``None`` while the parser does not know it; the caller
    fills it in with ``in_file``), ``line`` the 1-based line number (``None`` for the input
    as a whole) and ``reason`` what is wrong, in words an operator can act on. A subclass
    of ``schemas.ContractError`` so that one ``except`` covers both.
    """

    def __init__(self, file: str | None, line: int | None, reason: str) -> None:
        self.file = file
        self.line = line
        where = file or "<input>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(reason, where)

    def in_file(self, file: str) -> ParseError:
        """The same error, naming ``file``."""
        return ParseError(file, self.line, self.reason)

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"

    def __reduce__(self) -> tuple[type[ParseError], tuple[str | None, int | None, str]]:
        return (ParseError, (self.file, self.line, self.reason))
