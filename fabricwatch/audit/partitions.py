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

Rules: PART001-PART010.
"""

from __future__ import annotations

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
    errors: int = 0  # bad members opensm stopped at

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


def _membership(flag: str | None, default: str) -> tuple[str, bool]:
    """opensm's reading of a membership word, and whether the word was recognised."""
    if flag is None:
        return default, True
    for word in ("full", "both", "limited"):
        # strncmp(flag, word, strlen(flag)): the word as written is a prefix (even "").
        if word.startswith(flag):
            return word, flag != ""
    return "limited", False


def _strtoul(text: str) -> int:
    """C strtoul/strtoull with base 0: 0x hex, leading-zero octal, else decimal."""
    if text.isdigit() and text.startswith("0") and len(text) > 1:
        return int(text, 8)
    return int(text, 0)


def _pkey(text: str) -> int:
    value = _strtoul(text)
    if value < 0 or value > 0xFFFF:
        raise ValueError(text)
    return value & 0x7FFF


def _guid(text: str) -> int:
    value = _strtoul(text)
    if value <= 0 or value >= 1 << 64:
        raise ValueError(text)
    return value


class _Parser:
    """opensm's own reading order: line by line, a statement's header (up to ':') on one line,
    members up to ';' possibly over several lines. After a bad member opensm drops the rest of
    that line, ';' included, so the next lines still add members to the same partition."""

    def __init__(self, path: str) -> None:
        self.conf = PartitionsConf(path=path)
        self.current: Partition | None = None
        self.default_member = "limited"

    def bad(self, line: int, reason: str, fix: str, member: str | None = None) -> None:
        _bad(self.conf, line, reason, fix, member)

    def feed(self, lineno: int, raw: str) -> None:
        line = raw.split("#", 1)[0]
        pos = 0
        while line[pos:].strip():
            rest = line[pos:]
            semi = rest.find(";")
            seg = rest if semi < 0 else rest[:semi]
            if self.current is None:
                colon = seg.find(":")
                if colon < 0:
                    self.bad(lineno, "opensm finds no partition definition (no ':' on the "
                             "line that starts the statement) and skips this line.",
                             "Write `Name=0xPKEY[,flags] : members ;`, with the header and "
                             "its ':' on one line.")
                    return
                part = self.header(seg[:colon], lineno)
                if part is None:
                    return  # opensm skips the rest of the line
                self.current = part
                seg = seg[colon + 1:]
            if not self.members(seg, lineno):
                return  # the rest of the line, ';' included, is lost
            if semi < 0:
                return
            self.current = None
            pos += semi + 1

    def finish(self, last_line: int) -> PartitionsConf:
        if self.current is not None:
            self.bad(last_line, f"Partition {self.current.label} (line {self.current.line}) is "
                     "never closed with ';', so every line after it is read as its members.",
                     "End every partition statement with ';'.")
        return self.conf

    def header(self, text: str, line: int) -> Partition | None:
        fields = text.split(",")
        name_part, eq, pkey_text = fields[0].partition("=")
        name = name_part.strip()
        pkey: int | None = None
        if pkey_text.strip():
            try:
                pkey = _pkey(pkey_text.strip())
            except ValueError:
                self.bad(line, f"P_Key {pkey_text.strip()[:40]!r} is not a 16-bit number, so "
                         "opensm rejects this partition.", "Write the P_Key as hex, e.g. 0x8001.")
                return None
            if pkey == 0:
                self.bad(line, "P_Key 0 is invalid, so opensm rejects this partition.",
                         "Use a P_Key between 0x0001 and 0x7ffe.")
                return None
        elif eq:
            self.bad(line, "'=' with no P_Key after it; opensm rejects this definition.",
                     "Write the P_Key after '=' or remove the '='.")
            return None
        elif name == "Default":
            pkey = DEFAULT_PKEY
        part = Partition(name=name, pkey=pkey, line=line)
        for raw_flag in fields[1:]:
            flag, has_value, value = raw_flag.partition("=")
            flag = flag.strip()
            if not flag:
                self.bad(line, "Empty partition flag (two commas, or a trailing comma): opensm "
                         "reports bad partition flags and skips the definition.",
                         "Remove the extra comma.")
                return None
            part.flags[flag] = value.strip() if has_value else None
            if flag not in PARTITION_FLAGS:
                self.conf.findings.append(finding(
                    "PART007", self.conf.path, line,
                    f"opensm does not know the partition flag {flag[:40]!r} and ignores it.",
                    "Use ipoib, mtu, rate, sl, scope, Q_Key, TClass, FlowLabel, indx0 or "
                    "defmember.", flag=flag[:40]))
        self.default_member = "limited"
        if "defmember" in part.flags:
            defmember = part.flags["defmember"]
            if defmember in ("full", "limited", "both"):
                self.default_member = defmember
            else:
                self.conf.findings.append(finding(
                    "PART009", self.conf.path, line,
                    f"defmember={str(defmember)[:20]} is not full, limited or both; opensm "
                    "skips it and members default to limited.",
                    "Write defmember=full, defmember=limited or defmember=both.",
                    flag="defmember"))
        _check_flag_values(self.conf, part)
        self.conf.partitions.append(part)
        return part

    def members(self, text: str, line: int) -> bool:
        part = self.current
        if part is None:  # feed() sets it before calling
            return True
        for raw in text.split(","):
            item = raw.strip()
            if not item:
                continue
            name, eq, flag = item.partition("=")
            name = name.strip()
            if name == "mgid":
                return True  # an mgid=... group definition consumes the rest of the segment
            membership, known = _membership(flag.strip() if eq else None, self.default_member)
            if not known:
                word = flag.strip()
                reason = ("An empty membership after '=' is read by opensm as full."
                          if word == "" else
                          f"Membership {word[:20]!r} is not full, limited or both; opensm "
                          "assumes limited.")
                self.bad(line, reason, "Write =full, =limited or =both after the member.",
                         member=name[:40])
            if name in KEYWORDS:
                if name != "NONE":
                    part.members.append(Member(name, membership, line))
                continue
            try:
                guid = _guid(name)
            except ValueError:
                self.bad(line, f"{name[:40]!r} is not a port GUID or keyword, so opensm stops "
                         "reading this line (bad PortGUID): the members after it and any ';' "
                         f"on the line are lost, and the next lines join {part.label}.",
                         "Use 0x-prefixed port GUIDs (from ibstat or ibnetdiscover) or ALL, "
                         "ALL_CAS, ALL_SWITCHES, ALL_ROUTERS, SELF.", member=name[:40])
                part.errors += 1
                return False
            part.members.append(Member(f"0x{guid:016x}", membership, line))
        return True


def parse_partitions(text: str, path: str) -> PartitionsConf:
    """Parse partitions.conf; malformed statements become PART006 findings with their line.

    Raises :class:`AuditInputError` when nothing in the file reads as a partition statement.
    """
    parser = _Parser(path)
    lines = text.splitlines()
    for lineno, raw in enumerate(lines, start=1):
        parser.feed(lineno, raw)
    conf = parser.finish(len(lines))
    plausible = [p for p in conf.partitions
                 if not any(c.isspace() for c in p.name)
                 and (p.pkey is not None or (p.members and not p.errors))]
    if not plausible and any(ln.split("#", 1)[0].strip() for ln in lines):
        first = next((f for f in conf.findings if f.rule == "PART006"), None)
        detail = f" (line {first.line}: {first.reason})" if first else ""
        raise AuditInputError("no valid partition statement (`Name=PKey : members ;`) found: "
                              f"this is not an opensm partitions.conf{detail}", path)
    return conf


def _bad(conf: PartitionsConf, line: int, reason: str, fix: str, member: str | None = None
         ) -> None:
    evidence = {"member": member} if member is not None else {}
    conf.findings.append(finding("PART006", conf.path, line, reason, fix, None, **evidence))


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


def audit_partitions(text: str, path: str, *, tenant_ipoib: bool = False) -> list[Finding]:
    """All findings for one partitions.conf; ``tenant_ipoib``: tenants run IPoIB."""
    conf = parse_partitions(text, path)
    out = list(conf.findings)
    out += _default_partition(conf)
    out += _tenants(conf)
    out += _ipoib(conf, tenant_ipoib=tenant_ipoib)
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


def _ipoib(conf: PartitionsConf, *, tenant_ipoib: bool) -> list[Finding]:
    out: list[Finding] = []
    for part in conf.partitions:
        if tenant_ipoib and not part.is_default and "ipoib" not in part.flags and part.members:
            out.append(finding(
                "PART010", conf.path, part.line,
                f"Partition {part.label} has no ipoib flag, so opensm creates no IPoIB "
                "broadcast group for it and the tenant's IPoIB interfaces on this P_Key "
                "never come up.",
                "Add `ipoib, mtu=5` to the definition.", partition=part.label))
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
