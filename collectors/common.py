"""Helpers every parser shares: line splitting with limits, deterministic ids, number parsing."""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from pydantic import ValidationError

from collectors.errors import ParseError
from schemas import Counters, PortSample
from schemas.codec import contract_error

P = ParamSpec("P")
R = TypeVar("R")

# No tool this package reads writes lines anywhere near this long; a longer one is garbage
# (or a file that is not the tool's output), and refusing it early keeps the regexes fast.
MAX_LINE_CHARS = 64 * 1024
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_WS = re.compile(r"\s+")


def lines(text: str, *, max_chars: int = MAX_LINE_CHARS) -> Iterator[tuple[int, str]]:
    """(1-based number, line without its end) for each line; refuses garbage early.

    A NUL or other control character (apart from tab, CR and LF) means binary data; a line
    longer than ``max_chars`` is refused. Both raise ``ParseError`` naming the line.
    """
    for number, line in enumerate(text.splitlines(), start=1):
        if len(line) > max_chars:
            raise ParseError(None, number, f"line is {len(line)} characters long, more than "
                                           f"the {max_chars} this format ever writes")
        bad = _CONTROL.search(line)
        if bad is not None:
            raise ParseError(None, number, f"control character {bad.group()!r} at column "
                                           f"{bad.start() + 1}: binary data, not tool output")
        yield number, line


def collapse(text: str) -> str:
    """Whitespace runs to one space, ends stripped."""
    return _WS.sub(" ", text).strip()


def stable_id(*parts: object) -> str:
    """A deterministic event id from its parts, so a replay of the same input dedupes."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()
    return digest[:32]


def to_int(value: str, line: int | None, what: str) -> int:
    """A non-negative decimal or 0x-hex integer, or ParseError naming ``what``."""
    text = value.strip().replace(",", "")
    try:
        number = int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        raise ParseError(None, line, f"{what} {value[:40]!r} is not an integer") from None
    if number < 0:  # every caller reads a counter, LID, rate or time: none is negative
        raise ParseError(None, line, f"{what} {value[:40]!r} is negative")
    return number


_LAST_INT = re.compile(r"(\d+)(?!.*\d)")


def port_number(interface: str, line: int | None = None) -> int:
    """The contract port number of an Ethernet interface name: its last integer."""
    match = _LAST_INT.search(interface)
    if match is None:
        raise ParseError(None, line, f"interface {interface[:60]!r} has no number to use as "
                                     "the port")
    return int(match.group(1))


def guid_str(value: str | int) -> str:
    """A GUID as ``0x`` + 16 lower-case hex digits."""
    number = int(value, 16) if isinstance(value, str) else value
    return f"0x{number:016x}"


@dataclass
class PortValues:
    port: int
    values: dict[str, Any] = field(default_factory=dict)
    bits: dict[str, int] = field(default_factory=dict)


@dataclass
class DeviceSamples:
    name: str
    samples: dict[int, PortValues] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    ts: int | None = None  # this device's reading time, where it differs per device

    def sample(self, port: int) -> PortValues:
        return self.samples.setdefault(port, PortValues(port))


def counters_events(devices: Mapping[Any, DeviceSamples], *, fabric: str, ts: int,
                    source: str, kind: str) -> list[Counters]:
    """One Counters event per device, samples sorted by port, with a content-hash id."""
    events = []
    for dev in devices.values():
        ports = []
        for port in sorted(dev.samples):
            sample = dev.samples[port]
            ports.append(PortSample(port=port, **sample.values,
                                    counter_bits=dict(sample.bits) or None))
        when = dev.ts if dev.ts is not None else ts
        ident = stable_id(kind, fabric, source, dev.name, when,
                          *(p.model_dump_json() for p in ports))
        events.append(Counters(id=ident, ts=when, fabric=fabric, source=source,
                               device=dev.name, ports=ports, **dev.extra))
    return events


def guarded(parse: Callable[P, R]) -> Callable[P, R]:
    """Make a parser raise only ParseError: an event the contract refuses becomes one.

    Parsers build contract models from text; a value the text allows but the contract does
    not (a 300-byte device name, a port past 1024) surfaces as pydantic's ValidationError,
    turned here into a ParseError with the field's path.
    """

    @functools.wraps(parse)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return parse(*args, **kwargs)
        except ValidationError as exc:
            error = contract_error(exc)
            where = f" ({error.path})" if error.path else ""
            raise ParseError(None, None, f"the input makes an invalid event{where}: "
                                         f"{error.reason}") from None
        except RecursionError:
            raise ParseError(None, None, "input nested too deeply") from None

    return wrapper
