"""Reading audited files, and the one error the audit raises for input it cannot use.

Every parser raises :class:`AuditInputError` (and nothing else) for text that is not the kind of
file its flag says; the CLI turns it into exit status 2 with the message.
"""

from __future__ import annotations

from pathlib import Path

# Configuration files are small; a larger file is almost certainly the wrong file.
MAX_INPUT_BYTES = 16 * 1024 * 1024


class AuditInputError(Exception):
    """The input is not what the flag says (or cannot be read)."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None) -> None:
        where = path or ""
        if path and line:
            where = f"{path}:{line}"
        super().__init__(f"{where}: {message}" if where else message)
        self.path = path
        self.line = line
        self.reason = message


def read_text(path: Path) -> str:
    """The file's text (UTF-8); a binary, huge or unreadable file is an input error."""
    try:
        size = path.stat().st_size
        if size > MAX_INPUT_BYTES:
            raise AuditInputError(f"file is {size} bytes, larger than a configuration file "
                                  f"({MAX_INPUT_BYTES} bytes)", str(path))
        data = path.read_bytes()
    except OSError as exc:
        raise AuditInputError(f"cannot read: {exc.strerror or exc}", str(path)) from None
    return decode_text(data, str(path))


def decode_text(data: bytes, path: str) -> str:
    if b"\x00" in data:
        raise AuditInputError("binary data (NUL bytes), not a text configuration file", path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AuditInputError(f"not UTF-8 text (byte {exc.start})", path) from None
    return text.removeprefix("\ufeff")
