"""The cable plan: which port is meant to be cabled to which, loaded from the operators' CSV.

The CSV has a header naming at least ``a_device,a_port,b_device,b_port`` (any order, any
case) and optionally ``cable_id``, ``width`` (``4X``), ``speed`` (``NDR``) and ``media``
(``dac``, ``acc``, ``active``, ``active_did``, ``copper``, ``optic``: the cable type the BER
table is keyed by, ``schemas.ber_table``); further
columns are ignored so that a plan exported from a DCIM tool loads as it is. Blank lines
and lines starting with ``#`` are skipped. A link is unordered: ``a<->b`` equals ``b<->a``.

Devices are named as the fabric knows them (the collectors' naming rule) or by node GUID
(``0x`` + hex); GUIDs are normalised to ``0x`` + 16 lowercase hex digits here and mapped to
names at diff time, when the discovered topology says which GUID is which device.

Every problem raises ``PlanError`` (a ``ContractError``) naming the line.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from schemas import ContractError, Topology
from schemas.ber_table import MEDIA_GROUPS, media_group
from schemas.policy import SPEED_RANK, WIDTH_RANK

REQUIRED_COLUMNS = ("a_device", "a_port", "b_device", "b_port")
OPTIONAL_COLUMNS = ("cable_id", "width", "speed", "media")
MAX_PORT = 1024  # the contract's Ethernet port limit; InfiniBand ports stay far below it
MAX_DEVICE_BYTES = 256

_MF0 = re.compile(r"^MF0;([^:]+):([^/]+)/U\d+$")  # a switch's description (collectors' rule)
_SPACE = re.compile(r"\s")
_GUID = re.compile(r"^(?:0x([0-9a-fA-F]{1,16})|([0-9a-fA-F]{16}))$")
# "4xNDR" / "4X NDR" in one column, as ibnetdiscover prints a link.
_WIDTH_SPEED = re.compile(r"^\s*(\d+)[xX]\s*([A-Za-z0-9]+)\s*$")

End = tuple[str, int]


class PlanError(ContractError):
    """A cable plan that cannot be used; ``line`` is its 1-based line in the file (0: whole)."""

    def __init__(self, reason: str, line: int = 0) -> None:
        self.line = line
        super().__init__(reason, f"plan line {line}" if line else "plan")


def normalize_guid(text: str) -> str | None:
    """``0x`` + 16 lowercase hex digits when ``text`` is a GUID (``0x...`` or 16 hex), else None."""
    m = _GUID.match(text)
    if m is None:
        return None
    digits = m.group(1) or m.group(2)
    return "0x" + digits.lower().rjust(16, "0")


def canonical_device(name: str) -> str:
    """A device name as the diff compares it.

    GUIDs in one spelling (``0x`` + 16 lowercase hex). A name written as a node description
    gets the collectors' naming rule, so a plan exported with descriptions still matches:
    ``MF0;NAME:MODEL/U1`` is ``NAME``, two words ``HOST HCA`` are ``HOST/HCA``, other
    whitespace collapses. Names as the fabric knows them pass unchanged.
    """
    guid = normalize_guid(name)
    if guid is not None:
        return guid
    if name.startswith("MF0;") and (m := _MF0.match(name)) is not None:
        return m.group(1).strip()
    if _SPACE.search(name):
        words = name.split()
        return "/".join(words) if len(words) == 2 else " ".join(words)
    return name


def normalize_width(value: str) -> str | None:
    """``4X`` from ``4x``/``4X``; None when not a known width."""
    text = value.strip().upper()
    return text if text in WIDTH_RANK else None


def normalize_speed(value: str) -> str | None:
    """``NDR`` from ``ndr``/``NDR``; None when not a known speed."""
    text = value.strip().upper()
    if text == "FDR10":
        return "FDR10"
    return text if text in SPEED_RANK else None


@dataclass(frozen=True, slots=True)
class PlanLink:
    """One planned cable. ``line`` is where it stands in the plan file (0: built in code)."""

    a_device: str
    a_port: int
    b_device: str
    b_port: int
    cable_id: str | None = None
    width: str | None = None
    speed: str | None = None
    line: int = 0
    media: str | None = None

    @property
    def a(self) -> End:
        return (self.a_device, self.a_port)

    @property
    def b(self) -> End:
        return (self.b_device, self.b_port)

    def label(self) -> str:
        """How a technician finds this cable: its id where the plan gives one, else its ends."""
        ends = f"{self.a_device}:{self.a_port}<->{self.b_device}:{self.b_port}"
        return f"cable {self.cable_id} ({ends})" if self.cable_id else ends


@dataclass(frozen=True, slots=True)
class Plan:
    """The planned links, in file order. Ends are unique: a port has at most one cable."""

    links: tuple[PlanLink, ...]
    columns: tuple[str, ...] = field(default=REQUIRED_COLUMNS)

    def __post_init__(self) -> None:
        # Built in code (tests, the simulator) rather than by load_plan: same checks.
        _check_unique_ends(self.links)

    def __len__(self) -> int:
        return len(self.links)

    def __iter__(self) -> Iterator[PlanLink]:
        return iter(self.links)

    def to_csv(self) -> str:
        """The plan as CSV with every column, so that a plan round-trips through a file."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)
        for link in self.links:
            writer.writerow([link.a_device, link.a_port, link.b_device, link.b_port,
                             link.cable_id or "", link.width or "", link.speed or "",
                             link.media or ""])
        return out.getvalue()


def _check_unique_ends(links: tuple[PlanLink, ...]) -> None:
    seen: dict[End, int] = {}
    for index, link in enumerate(links):
        where = link.line or index + 1
        if link.a == link.b:
            raise PlanError(f"{link.a_device}:{link.a_port} is cabled to itself", link.line)
        for end in (link.a, link.b):
            first = seen.get(end)
            if first is not None:
                raise PlanError(f"port {end[0]}:{end[1]} is planned twice (first on "
                                f"{'line ' if link.line else 'link '}{first})", link.line)
            seen[end] = where


def _device(raw: str, column: str, line: int) -> str:
    name = raw.strip()
    if not name:
        raise PlanError(f"{column} is empty", line)
    if len(name.encode("utf-8")) > MAX_DEVICE_BYTES:
        raise PlanError(f"{column} is longer than {MAX_DEVICE_BYTES} bytes", line)
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise PlanError(f"{column} contains a control character", line)
    return canonical_device(name)


def _port(raw: str, column: str, line: int) -> int:
    text = raw.strip()
    if not text.isdigit() or len(text) > 5:
        raise PlanError(f"{column} {text[:32]!r} is not a port number", line)
    port = int(text)
    if port > MAX_PORT:
        raise PlanError(f"{column} {port} is outside 0..{MAX_PORT}", line)
    return port


def _width_speed(raw_width: str, raw_speed: str, line: int) -> tuple[str | None, str | None]:
    width: str | None = None
    speed: str | None = None
    w, s = raw_width.strip(), raw_speed.strip()
    if w and not s and (m := _WIDTH_SPEED.match(w)):
        # "4xNDR" in the width column: the form ibnetdiscover prints.
        w, s = m.group(1) + "X", m.group(2)
    if w:
        width = normalize_width(w)
        if width is None:
            raise PlanError(f"width {w[:32]!r} is not one of {', '.join(WIDTH_RANK)}", line)
    if s:
        speed = normalize_speed(s)
        if speed is None:
            raise PlanError(f"speed {s[:32]!r} is not one of {', '.join(SPEED_RANK)}", line)
    return width, speed


def load_plan(text: str) -> Plan:
    """The plan in CSV ``text``. Raises ``PlanError`` naming the line of the first problem."""
    if "\x00" in text:
        raise PlanError("the plan is binary, not CSV text")
    text = text.removeprefix("\ufeff")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    index: dict[str, int] = {}
    links: list[PlanLink] = []
    seen: dict[End, int] = {}
    try:
        for row in reader:
            line = reader.line_num
            if not row or all(not cell.strip() for cell in row):
                continue
            if row[0].lstrip().startswith("#"):
                continue
            if header is None:
                header = [cell.strip().lower() for cell in row]
                missing = [c for c in REQUIRED_COLUMNS if c not in header]
                if missing:
                    raise PlanError(f"the header lacks column(s) {', '.join(missing)} (it "
                                    f"needs {','.join(REQUIRED_COLUMNS)})", line)
                dupes = sorted({c for c in header if c and header.count(c) > 1})
                if dupes:
                    raise PlanError(f"column(s) {', '.join(dupes)} appear twice", line)
                index = {name: i for i, name in enumerate(header)}
                continue

            def cell(name: str, row: list[str] = row, index: dict[str, int] = index) -> str:
                i = index.get(name)
                return row[i] if i is not None and i < len(row) else ""

            if len(row) < len(header) and any(not cell(c).strip() for c in REQUIRED_COLUMNS):
                raise PlanError(f"{len(row)} field(s) where the header has {len(header)}", line)
            a = (_device(cell("a_device"), "a_device", line), _port(cell("a_port"), "a_port", line))
            b = (_device(cell("b_device"), "b_device", line), _port(cell("b_port"), "b_port", line))
            if a == b:
                raise PlanError(f"{a[0]}:{a[1]} is cabled to itself", line)
            for end in (a, b):
                first = seen.get(end)
                if first is not None:
                    raise PlanError(f"port {end[0]}:{end[1]} is planned twice (first on line "
                                    f"{first})", line)
                seen[end] = line
            width, speed = _width_speed(cell("width"), cell("speed"), line)
            cable = cell("cable_id").strip() or None
            media = cell("media").strip().lower() or None
            if media is not None and media_group(media) is None:
                raise PlanError(f"media {media[:32]!r} is not one of "
                                f"{', '.join(MEDIA_GROUPS)}", line)
            links.append(PlanLink(a[0], a[1], b[0], b[1], cable, width, speed, line, media))
    except csv.Error as exc:
        raise PlanError(f"not valid CSV: {exc}", reader.line_num) from None
    if header is None:
        raise PlanError("the plan is empty (no header line)")
    columns = tuple(c for c in REQUIRED_COLUMNS + OPTIONAL_COLUMNS if c in index)
    return Plan(tuple(links), columns)



def plan_from_topology(topology: Topology, *, cable_prefix: str | None = None) -> Plan:
    """A plan that says the fabric is exactly as ``topology`` found it.

    How an operator bootstraps a plan from a fabric known to be right (and how the tests
    write "a plan from itself"). With ``cable_prefix`` each link gets a cable id
    ``{prefix}{n}`` in link order. A port that the topology reports twice keeps its first link.
    """
    links: list[PlanLink] = []
    seen: set[End] = set()
    for tl in topology.links:
        a = (canonical_device(tl.a_device), tl.a_port)
        b = (canonical_device(tl.b_device), tl.b_port)
        if a in seen or b in seen or a == b:
            continue
        seen.update((a, b))
        width = normalize_width(tl.width) if tl.width else None
        speed = normalize_speed(tl.speed) if tl.speed else None
        cable = f"{cable_prefix}{len(links) + 1}" if cable_prefix is not None else None
        links.append(PlanLink(a[0], a[1], b[0], b[1], cable, width, speed))
    return Plan(tuple(links), REQUIRED_COLUMNS + OPTIONAL_COLUMNS)


Expectation = tuple[str | None, str | None]


def media_from_plan(plan: Plan, guid_names: dict[str, str] | None = None
                    ) -> Callable[[str, int], str | None]:
    """``(device, port) -> media`` the plan gives for that port's cable, or None: the BER
    table's media for a link whose samples do not say (``streams.counters``)."""
    names = {normalize_guid(g) or g: n for g, n in (guid_names or {}).items()}
    table: dict[End, str] = {}
    for link in plan.links:
        if link.media is not None:
            for device, port in (link.a, link.b):
                table[(names.get(device, device), port)] = link.media

    def lookup(device: str, port: int) -> str | None:
        return table.get((canonical_device(device), port))

    return lookup


def expectation_from_plan(plan: Plan,
                          guid_names: dict[str, str] | None = None
                          ) -> Callable[[str, int], Expectation | None]:
    """``(device, port) -> (width, speed)`` the plan sets for that port's cable, or None.

    For detectors that judge width/speed from counters (``streams.degraded_link``): the
    plan's figure where it gives one, so that they and the diff agree on what is degraded.
    """
    names = {normalize_guid(g) or g: n for g, n in (guid_names or {}).items()}
    table: dict[End, Expectation] = {}
    for link in plan.links:
        if link.width is None and link.speed is None:
            continue
        for device, port in (link.a, link.b):
            table[(names.get(device, device), port)] = (link.width, link.speed)

    def lookup(device: str, port: int) -> Expectation | None:
        return table.get((canonical_device(device), port))

    return lookup


def uplinks_from_plan(plan: Plan) -> Callable[[str], frozenset[int] | None]:
    """``device -> its uplink ports`` for a leaf, else None.

    A leaf is a switch with a host behind one of its ports (a host end names an HCA,
    ``node0042/mlx5_3``); its uplinks are its ports cabled to another switch: the ECMP (or
    adaptive-routing) peers that traffic up the tree is spread over (the hot-uplink rule).
    """
    def is_host(name: str) -> bool:
        return "/" in name

    up: dict[str, set[int]] = {}
    leaves: set[str] = set()
    for link in plan.links:
        a, b = canonical_device(link.a_device), canonical_device(link.b_device)
        if is_host(a) != is_host(b):
            leaves.add(b if is_host(a) else a)
        elif not is_host(a):
            up.setdefault(a, set()).add(link.a_port)
            up.setdefault(b, set()).add(link.b_port)
    table = {leaf: frozenset(up[leaf]) for leaf in leaves if leaf in up}

    def lookup(device: str) -> frozenset[int] | None:
        return table.get(canonical_device(device))

    return lookup


def load_plan_file(path: Path) -> Plan:
    """The plan in the CSV file ``path``; ``PlanError`` names the file and the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"cannot read plan file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise PlanError(f"plan file {path} is not UTF-8 text (byte {exc.start})") from None
    try:
        return load_plan(text)
    except PlanError as exc:
        raise PlanError(f"{path}: {exc.reason}", exc.line) from None
