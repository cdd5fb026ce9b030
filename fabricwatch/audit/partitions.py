"""Audit of opensm's partitions.conf (``partition_config_file``, ``opensm -P``).

Grammar (opensm ``doc/partition-config.txt`` and ``osm_prtn_config.c``)::

    <Partition Definition> : <member list> ;
    Partition Definition: [Name][=PKey][,flag[=value]]...   flags: ipoib, mtu, rate, sl, scope,
                          Q_Key, TClass, FlowLabel, indx0, defmember=full|limited|both
    member list:          member[=full|limited|both] [, member...]   or  mgid=<IPv6>[,flags]
    member:               ALL | ALL_CAS | ALL_SWITCHES | ALL_ROUTERS | SELF | NONE | <port GUID>

``#`` starts a comment, a statement may wrap over lines and ends at ``;``, only the low 15 bits
of a P_Key count (0xffff is 0x7fff), and a definition named ``Default`` without a P_Key is the
default partition 0x7fff. A member without a membership takes the partition's ``defmember``
(limited unless set). opensm matches membership words by prefix (``limi`` is limited, an empty
``=`` reads as full); this parser does the same and reports what opensm would misread.

Rules: PART001-PART009.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from fabricwatch.audit.findings import Finding, finding
from fabricwatch.audit.inputs import AuditInputError

DEFAULT_PKEY = 0x7FFF
ALL_WORDS = frozenset({"ALL", "ALL_CAS"})
KEYWORDS = frozenset({"ALL", "ALL_CAS", "ALL_SWITCHES", "ALL_ROUTERS", "SELF", "NONE"})
GROUP_FLAGS = frozenset({"mtu", "rate", "sl", "scope", "Q_Key", "TClass", "FlowLabel"})
PARTITION_FLAGS = frozenset({"ipoib", "defmember", "indx0"}) | GROUP_FLAGS
IPOIB_ONLY_FLAGS = frozenset({"mtu", "rate", "scope"})
MTU_NAMES = {1: "256", 2: "512", 3: "1024", 4: "2048", 5: "4096"}


@dataclass(frozen=True)
class Member:
    name: str
    membership: str  # full | limited | both
    line: int


@dataclass
class Partition:
    name: str
    pkey: int | None  # low 15 bits; None when opensm would autogenerate it
    line: int
    flags: dict[str, str | None] = field(default_factory=dict)
    members: list[Member] = field(default_factory=list)

    @property
    def is_default(self) -> bool:
        return self.pkey == DEFAULT_PKEY

    @property
    def label(self) -> str:
        pkey = f"0x{self.pkey:04x}" if self.pkey is not None else "auto"
        return f"{self.name or '(unnamed)'} ({pkey})"


@dataclass
class PartitionsConf:
    path: str
    partitions: list[Partition] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


class _Lines:
    """Offset -> 1-based line number for a text."""

    def __init__(self, text: str) -> None:
        self.starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self.starts.append(i + 1)

    def at(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset)


def _membership(flag: str | None, default: str) -> tuple[str, bool]:
    """opensm's reading of a membership word, and whether the word was recognised."""
    if flag is None:
        return default, True
    for word in ("full", "both", "limited"):
        # strncmp(flag, word, strlen(flag)): the word as written is a prefix (even "").
        if word.startswith(flag):
            return word, flag != ""
    return "limited", False


def _pkey(text: str) -> int | None:
    try:
        value = int(text, 0)
    except ValueError:
        # strtoul accepts a leading-zero octal such as 0100; int(..., 0) does not.
        if text.isdigit():
            value = int(text, 8) if text.startswith("0") and len(text) > 1 else int(text)
        else:
            raise
    if value < 0 or value > 0xFFFF:
        raise ValueError(text)
    return value & 0x7FFF


def _guid(text: str) -> int:
    if text.isdigit() and text.startswith("0") and len(text) > 1:
        value = int(text, 8)
    else:
        value = int(text, 0)
    if value <= 0 or value >= 1 << 64:
        raise ValueError(text)
    return value


def _strip_comments(text: str) -> str:
    """Comments to the end of the line become spaces, so offsets still match the text."""
    out: list[str] = []
    for raw in text.splitlines(keepends=True):
        hash_at = raw.find("#")
        if hash_at < 0:
            out.append(raw)
        else:
            tail = "\n" if raw.endswith("\n") else ""
            out.append(raw[:hash_at] + " " * (len(raw) - hash_at - len(tail)) + tail)
    return "".join(out)


def parse_partitions(text: str, path: str) -> PartitionsConf:
    """Parse partitions.conf; malformed statements become PART006 findings with their line.

    Raises :class:`AuditInputError` when nothing in the file is a partition statement.
    """
    conf = PartitionsConf(path=path)
    lines = _Lines(text)
    body = _strip_comments(text)
    start = 0
    while start < len(body):
        end = body.find(";", start)
        terminated = end >= 0
        chunk_start = start
        chunk = body[start:end] if terminated else body[start:]
        offset = start + (len(chunk) - len(chunk.lstrip()))
        start = end + 1 if terminated else len(body)
        if not chunk.strip():
            continue
        line = lines.at(offset)
        if not terminated:
            conf.findings.append(finding(
                "PART006", path, line,
                "The last statement has no closing ';'; opensm applies what it parsed but the "
                "statement is easy to break by appending lines.",
                "End every partition statement with ';'."))
        _statement(conf, chunk, chunk_start, lines)
    if not conf.partitions and any(not c.isspace() for c in body):
        first = next((f for f in conf.findings if f.rule == "PART006"), None)
        detail = f" (line {first.line}: {first.reason})" if first else ""
        raise AuditInputError("no valid partition statement (`Name=PKey : members ;`) found: "
                              f"this is not an opensm partitions.conf{detail}", path)
    return conf


def _bad(conf: PartitionsConf, line: int, reason: str, fix: str, member: str | None = None
         ) -> None:
    evidence = {"member": member} if member is not None else {}
    conf.findings.append(finding("PART006", conf.path, line, reason, fix, None, **evidence))


def _statement(conf: PartitionsConf, chunk: str, base: int, lines: _Lines) -> None:
    colon = chunk.find(":")
    line = lines.at(base + len(chunk) - len(chunk.lstrip()))
    if colon < 0:
        _bad(conf, line, "opensm finds no partition definition (no ':') and skips this text.",
             "Write `Name=0xPKEY[,flags] : members ;`.")
        return
    header, members = chunk[:colon], chunk[colon + 1:]
    fields = header.split(",")
    name_part, _, pkey_text = fields[0].partition("=")
    name = name_part.strip()
    pkey: int | None = None
    if pkey_text.strip():
        try:
            pkey = _pkey(pkey_text.strip())
        except ValueError:
            _bad(conf, line, f"P_Key {pkey_text.strip()[:40]!r} is not a 16-bit number, so "
                 "opensm rejects this partition.", "Write the P_Key as hex, e.g. 0x8001.")
            return
        if pkey == 0:
            _bad(conf, line, "P_Key 0 is invalid, so opensm rejects this partition.",
                 "Use a P_Key between 0x0001 and 0x7ffe.")
            return
    elif "=" in fields[0]:
        _bad(conf, line, "'=' with no P_Key after it; opensm rejects this definition.",
             "Write the P_Key after '=' or remove the '='.")
        return
    elif name == "Default":
        pkey = DEFAULT_PKEY
    part = Partition(name=name, pkey=pkey, line=line)
    for raw_flag in fields[1:]:
        flag, eq, value = raw_flag.partition("=")
        flag = flag.strip()
        if not flag:
            _bad(conf, line, "Empty partition flag (two commas, or a trailing comma): opensm "
                 "reports bad partition flags and skips the definition.",
                 "Remove the extra comma.")
            return
        part.flags[flag] = value.strip() if eq else None
        if flag not in PARTITION_FLAGS:
            conf.findings.append(finding(
                "PART007", conf.path, line,
                f"opensm does not know the partition flag {flag[:40]!r} and ignores it.",
                "Use ipoib, mtu, rate, sl, scope, Q_Key, TClass, FlowLabel, indx0 or defmember.",
                flag=flag[:40]))
    default_member = "limited"
    defmember = part.flags.get("defmember")
    if "defmember" in part.flags:
        if defmember and defmember in ("full", "limited", "both"):
            default_member = defmember
        else:
            conf.findings.append(finding(
                "PART009", conf.path, line,
                f"defmember={str(defmember)[:20]} is not full, limited or both; opensm "
                "skips it and members default to limited.",
                "Write defmember=full, defmember=limited or defmember=both.",
                flag="defmember"))
    _check_flag_values(conf, part)
    _members(conf, part, members, base + colon + 1, lines, default_member)
    conf.partitions.append(part)


def _check_flag_values(conf: PartitionsConf, part: Partition) -> None:
    mtu = part.flags.get("mtu")
    if "mtu" in part.flags:
        try:
            ok = mtu is not None and int(mtu, 0) in MTU_NAMES
        except ValueError:
            ok = False
        if not ok:
            conf.findings.append(finding(
                "PART009", conf.path, part.line,
                f"mtu={str(mtu)[:20]} is not an IBTA MTU code (1-5), so opensm skips it and the "
                "IPoIB group uses 2048 bytes.",
                "Write mtu=5 for 4096 bytes (mtu=4 is 2048).", flag="mtu"))
    for flag, limit in (("sl", 15), ("rate", 255), ("scope", 15)):
        if flag not in part.flags:
            continue
        value = part.flags[flag]
        try:
            ok = value is not None and 0 <= int(value, 0) <= limit
        except ValueError:
            ok = False
        if not ok:
            conf.findings.append(finding(
                "PART009", conf.path, part.line,
                f"{flag}={str(value)[:20]} is not a valid value (0-{limit}); opensm skips it.",
                f"Give {flag} a number between 0 and {limit}.", flag=flag))


def _members(conf: PartitionsConf, part: Partition, text: str, base: int, lines: _Lines,
             default_member: str) -> None:
    pos = 0
    for raw in text.split(","):
        here = base + pos + (len(raw) - len(raw.lstrip()))
        pos += len(raw) + 1
        line = lines.at(here)
        item = raw.strip()
        if not item:
            continue
        name, eq, flag = item.partition("=")
        name = name.strip()
        if name == "mgid":
            return  # an mgid=... group definition consumes the rest of the statement
        membership, known = _membership(flag.strip() if eq else None, default_member)
        if not known:
            word = flag.strip()
            reason = ("An empty membership after '=' is read by opensm as full."
                      if word == "" else
                      f"Membership {word[:20]!r} is not full, limited or both; opensm assumes "
                      "limited.")
            _bad(conf, line, reason, "Write =full, =limited or =both after the member.",
                 member=name[:40])
        if name in KEYWORDS:
            if name != "NONE":
                part.members.append(Member(name, membership, line))
            continue
        try:
            guid = _guid(name)
        except ValueError:
            _bad(conf, line, f"{name[:40]!r} is not a port GUID or keyword, so opensm stops "
                 "reading this statement (bad PortGUID) and the members after it are lost.",
                 "Use 0x-prefixed port GUIDs (from ibstat or ibnetdiscover) or ALL, ALL_CAS, "
                 "ALL_SWITCHES, ALL_ROUTERS, SELF.", member=name[:40])
            return
        part.members.append(Member(f"0x{guid:016x}", membership, line))


def audit_partitions(text: str, path: str) -> list[Finding]:
    """All findings for one partitions.conf."""
    conf = parse_partitions(text, path)
    out = list(conf.findings)
    out += _default_partition(conf)
    out += _tenants(conf)
    out += _ipoib(conf)
    return out


def _default_partition(conf: PartitionsConf) -> list[Finding]:
    out: list[Finding] = []
    for part in conf.partitions:
        if not part.is_default:
            continue
        for member in part.members:
            if member.name in ALL_WORDS and member.membership in ("full", "both"):
                out.append(finding(
                    "PART001", conf.path, member.line,
                    f"The default partition 0x7fff gives {member.name}={member.membership}, so "
                    "every host is a full member and can reach every other host, across "
                    "tenants.",
                    "Write `Default=0x7fff, ipoib : ALL=limited, SELF=full ;` (add "
                    "ALL_SWITCHES=full if switches need it) and give tenants their own "
                    "partitions.", member=member.name, membership=member.membership))
    return out


def _tenants(conf: PartitionsConf) -> list[Finding]:
    out: list[Finding] = []
    full_in: dict[str, list[tuple[Partition, Member]]] = {}
    names_by_pkey: dict[int, Partition] = {}
    for part in conf.partitions:
        if part.pkey is not None:
            first = names_by_pkey.setdefault(part.pkey, part)
            if first is not part and first.name != part.name:
                out.append(finding(
                    "PART008", conf.path, part.line,
                    f"P_Key 0x{part.pkey:04x} is already defined as {first.name!r} on line "
                    f"{first.line}; opensm merges both into one partition named {first.name!r}.",
                    "Use one name per P_Key, or a different P_Key for a different tenant.",
                    pkey=f"0x{part.pkey:04x}"))
        if part.is_default:
            continue
        for member in part.members:
            if member.name in ALL_WORDS and member.membership in ("full", "both"):
                out.append(finding(
                    "PART003", conf.path, member.line,
                    f"Partition {part.label} gives {member.name}={member.membership}, so every "
                    "host is a full member of this tenant's partition.",
                    "List the tenant's port GUIDs as full members instead of ALL.",
                    partition=part.label, member=member.name))
            elif member.name.startswith("0x") and member.membership in ("full", "both"):
                full_in.setdefault(member.name, []).append((part, member))
    for guid, places in full_in.items():
        tenants: dict[str, tuple[Partition, Member]] = {}
        for part, member in places:
            key = f"0x{part.pkey:04x}" if part.pkey is not None else f"auto:{part.line}"
            tenants.setdefault(key, (part, member))
        if len(tenants) < 2:
            continue
        labels = [p.label for p, _ in tenants.values()]
        _, last_member = list(tenants.values())[-1]
        out.append(finding(
            "PART002", conf.path, last_member.line,
            f"Port {guid} is a full member of {len(labels)} tenants' partitions "
            f"({', '.join(labels)}), so it bridges tenants that must not reach each other.",
            "Keep each port a full member of one tenant partition; make shared services "
            "(storage) full and their clients limited.", guid=guid,
            partitions=", ".join(labels)))
    return out


def _ipoib(conf: PartitionsConf) -> list[Finding]:
    out: list[Finding] = []
    for part in conf.partitions:
        if "ipoib" in part.flags and "mtu" not in part.flags:
            out.append(finding(
                "PART004", conf.path, part.line,
                f"Partition {part.label} is IPoIB but sets no mtu, so its broadcast group (and "
                "every IPoIB interface on it) uses 2048 bytes.",
                "Add mtu=5 (4096 bytes) to the definition, e.g. `Name=0x8001, ipoib, mtu=5 : "
                "... ;`.", partition=part.label))
        ignored = sorted(IPOIB_ONLY_FLAGS & part.flags.keys())
        if ignored and "ipoib" not in part.flags:
            out.append(finding(
                "PART005", conf.path, part.line,
                f"Partition {part.label} sets {', '.join(ignored)} but not ipoib, so no IPoIB "
                "group is created and those flags do nothing.",
                "Add ipoib if the tenant runs IPoIB on this partition, or drop the flags.",
                partition=part.label))
    return out
