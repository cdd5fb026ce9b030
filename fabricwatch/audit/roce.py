"""Audit of RoCE QoS: ``mlnx_qos -i <iface>`` output from a host, or a switch's QoS as YAML.

RoCE is only lossless when exactly one priority has PFC, the port classifies by DSCP, ECN marks
(so DCQCN slows senders) before PFC pauses, the MTU carries 4096-byte RDMA payloads, and a PFC
watchdog breaks pause storms.

``mlnx_qos`` output (MLNX_OFED / DOCA)::

    DCBX mode: OS controlled
    Priority trust state: dscp
    dscp2prio mapping:
            prio:0 dscp:07,06,05,04,03,02,01,00,
            ...
    PFC configuration:
            priority    0   1   2   3   4   5   6   7
            enabled     0   0   0   1   0   0   0   0
    tc: 0 ratelimit: unlimited, tsa: vendor
    ...

It shows trust and PFC only, so MTU, ECN and watchdog rules apply to the switch's QoS: a SONiC
``config_db.json`` (PORT_QOS_MAP ``pfc_enable`` / ``pfcwd_sw_enable`` / ``dscp_to_tc_map``,
QUEUE ``wred_profile`` -> WRED_PROFILE ``ecn`` and ``green_min/max_threshold``, BUFFER_PG
``profile`` -> BUFFER_PROFILE ``xoff``, PFC_WD, PORT ``mtu``; findings are grouped over the
ports they hold for), or YAML of this shape (one mapping per document, one document per switch
or profile)::

    device: leaf-su01-r3          # optional
    trust: dscp                   # dscp | pcp | port
    mtu: 9216                     # bytes
    dscp_to_priority: {26: 3}     # optional; default DSCP/8
    pfc:
      priorities: [3]             # priorities with PFC enabled
      xoff_bytes: 262144          # lossless PG xoff threshold
      xon_bytes: 131072           # optional
      watchdog: {enabled: true, detection_time_ms: 200, restoration_time_ms: 400, action: drop}
    ecn:
      enabled: true
      priority: 3                 # optional
      min_threshold_bytes: 150000
      max_threshold_bytes: 1500000
      probability_percent: 10

"Well below" xoff means the ECN minimum at most half of xoff and the maximum below xoff.

Rules: ROCE001-ROCE008.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from yaml.nodes import MappingNode, Node, SequenceNode

from fabricwatch.audit import k8s
from fabricwatch.audit.findings import Finding, finding
from fabricwatch.audit.inputs import AuditInputError
from schemas import Severity

MIN_ROCE_MTU = 4200
KNOWN_TOP = frozenset({"device", "trust", "mtu", "dscp_to_priority", "pfc", "ecn"})
KNOWN_PFC = frozenset({"priorities", "xoff_bytes", "xon_bytes", "watchdog", "headroom_bytes"})
KNOWN_WD = frozenset({"enabled", "detection_time_ms", "restoration_time_ms", "action"})
KNOWN_ECN = frozenset({"enabled", "priority", "min_threshold_bytes", "max_threshold_bytes",
                       "probability_percent"})
QOS_KEYS = frozenset({"trust", "mtu", "pfc", "ecn"})
# SONiC CONFIG_DB tables that carry RoCE QoS (config_db.json is JSON, so YAML reads it).
SONIC_TABLES = frozenset({"PORT_QOS_MAP", "WRED_PROFILE", "BUFFER_PG", "PFC_WD"})
SONIC_ECN_OFF = frozenset({"", "ecn_none"})
MAX_PORTS_SHOWN = 6


@dataclass
class RoceContext:
    """What the NCCL audit needs from the QoS input: the lossless priority and its DSCPs."""

    pfc_priorities: list[int] = field(default_factory=list)
    dscp_to_priority: dict[int, int] = field(default_factory=dict)

    @property
    def lossless_dscps(self) -> frozenset[int] | None:
        if len(self.pfc_priorities) != 1:
            return None
        prio = self.pfc_priorities[0]
        mapping = self.dscp_to_priority or {d: d >> 3 for d in range(64)}
        return frozenset(d for d, p in mapping.items() if p == prio)


def is_mlnx_qos(text: str) -> bool:
    return bool(re.search(r"^\s*(PFC configuration:|Priority trust (state|mode):)", text, re.M))


def audit_roce(text: str, path: str) -> tuple[list[Finding], RoceContext]:
    """Findings for mlnx_qos output or switch QoS YAML, and the lossless class it defines."""
    if is_mlnx_qos(text):
        return _mlnx_qos(text, path)
    return _switch_yaml(text, path)


def _pfc_findings(path: str, line: int | None, prios: list[int], where: str) -> list[Finding]:
    if len(prios) == 1:
        return []
    if not prios:
        return [finding(
            "ROCE001", path, line,
            f"PFC is enabled on no priority{where}, so RoCE traffic is lossy and congestion "
            "drops become go-back-N retransmissions.",
            "Enable PFC on exactly the RoCE priority, e.g. `mlnx_qos -i <iface> --pfc "
            "0,0,0,1,0,0,0,0` (priority 3) and the same on the switch.", priorities="")]
    shown = ",".join(str(p) for p in prios)
    return [finding(
        "ROCE001", path, line,
        f"PFC is enabled on {len(prios)} priorities ({shown}){where}, so pauses spread to more "
        "traffic classes and the risk of PFC deadlock and head-of-line blocking grows.",
        "Keep PFC on the single RoCE priority only (e.g. 3).", severity=Severity.WARNING,
        priorities=shown)]


def _trust_finding(path: str, line: int | None, trust: str | None, where: str) -> list[Finding]:
    if trust is not None and trust.lower() == "dscp":
        return []
    shown = trust or "unset (pcp)"
    return [finding(
        "ROCE002", path, line,
        f"Trust mode is {shown[:20]}{where}, not dscp, so routed RoCE v2 packets (no VLAN tag) "
        "all land in priority 0 and miss the lossless class.",
        "Set trust to dscp (`mlnx_qos -i <iface> --trust dscp`, and on the switch).",
        trust=shown[:20])]


def _mlnx_qos(text: str, path: str) -> tuple[list[Finding], RoceContext]:
    ctx = RoceContext()
    out: list[Finding] = []
    trust: str | None = None
    trust_line: int | None = None
    prio_row: list[str] | None = None
    enabled_line: int | None = None
    enabled_row: list[str] | None = None
    in_pfc = False
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        match = re.match(r"Priority trust (?:state|mode):\s*(\S+)", line)
        if match:
            trust, trust_line = match.group(1), lineno
            continue
        match = re.match(r"prio:\s*(\d+)\s+dscp:\s*([\d,\s]*)", line)
        if match:
            prio = int(match.group(1))
            for d in re.findall(r"\d+", match.group(2)):
                if 0 <= int(d) < 64 and 0 <= prio < 8:
                    ctx.dscp_to_priority[int(d)] = prio
            continue
        if line.startswith("PFC configuration"):
            in_pfc = True
            continue
        if in_pfc and line.startswith("priority"):
            prio_row = line.split()[1:]
            continue
        if in_pfc and line.startswith("enabled"):
            enabled_row, enabled_line = line.split()[1:], lineno
            in_pfc = False
    if enabled_row is None:
        out.append(finding(
            "ROCE007", path, None,
            "No `enabled` row under PFC configuration, so the PFC state could not be read.",
            "Audit the full output of `mlnx_qos -i <iface>`."))
    else:
        prios = _enabled_priorities(prio_row, enabled_row)
        if prios is None:
            out.append(finding(
                "ROCE007", path, enabled_line,
                "The PFC `enabled` row is not eight 0/1 values, so the PFC state could not be "
                "read.", "Audit the unmodified output of `mlnx_qos -i <iface>`."))
        else:
            ctx.pfc_priorities = prios
            out += _pfc_findings(path, enabled_line, prios, "")
    if trust is None:
        out.append(finding(
            "ROCE002", path, None,
            "The output has no trust line, so the port uses the default, pcp: routed RoCE v2 "
            "packets land in priority 0 and miss the lossless class.",
            "Set trust to dscp (`mlnx_qos -i <iface> --trust dscp`).", trust="unset"))
    else:
        out += _trust_finding(path, trust_line, trust, "")
    return out, ctx


def _enabled_priorities(prio_row: list[str] | None, enabled_row: list[str]) -> list[int] | None:
    if any(v not in ("0", "1") for v in enabled_row) or not 1 <= len(enabled_row) <= 8:
        return None
    labels = list(range(len(enabled_row)))
    if prio_row is not None and len(prio_row) == len(enabled_row) and \
            all(p.isdigit() for p in prio_row):
        labels = [int(p) for p in prio_row]
    return [p for p, v in zip(labels, enabled_row, strict=True) if v == "1"]


# --- switch QoS YAML -----------------------------------------------------------------------

def _num(node: Node | None) -> float | None:
    value = k8s.scalar(node)
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _bool(node: Node | None) -> bool | None:
    value = k8s.scalar(node)
    if value is None:
        return None
    low = value.lower()
    if low in ("true", "yes", "on", "enabled", "1"):
        return True
    if low in ("false", "no", "off", "disabled", "0"):
        return False
    return None


class _Doc:
    def __init__(self, path: str, node: MappingNode) -> None:
        self.path = path
        self.node = node
        self.findings: list[Finding] = []
        device = k8s.scalar(k8s.get(node, "device"))
        self.where = f" on {device[:60]}" if device else ""

    def unknown(self, node: Node | None, known: frozenset[str], section: str) -> None:
        for key, value in k8s.pairs(node):
            if key not in known:
                self.findings.append(finding(
                    "ROCE006", self.path, k8s.line_of(value),
                    f"fabricwatch does not know the QoS key {section}{key[:40]}; it was ignored.",
                    "Check the key against the switch QoS YAML shape in the audit docs.",
                    key=f"{section}{key[:40]}"))

    def bad(self, node: Node, key: str, need: str) -> None:
        self.findings.append(finding(
            "ROCE007", self.path, k8s.line_of(node),
            f"{key} is not {need}{self.where}, so that setting could not be checked.",
            f"Give {key} as {need}.", key=key))


def _switch_yaml(text: str, path: str) -> tuple[list[Finding], RoceContext]:
    nodes = k8s.compose_documents(text, path)
    if not nodes:
        raise AuditInputError("empty: neither mlnx_qos output nor a switch QoS YAML", path)
    out: list[Finding] = []
    ctx = RoceContext()
    for node in nodes:
        if isinstance(node, MappingNode) and {k for k, _ in k8s.pairs(node)} & SONIC_TABLES:
            out += _sonic(path, node, ctx)
            continue
        if not isinstance(node, MappingNode) or not (
                {k for k, _ in k8s.pairs(node)} & QOS_KEYS):
            raise AuditInputError(
                "neither mlnx_qos output nor a switch QoS YAML (a mapping with trust, mtu, pfc "
                "or ecn)", path, k8s.line_of(node))
        doc = _Doc(path, node)
        _audit_switch(doc, ctx)
        out += doc.findings
    return out, ctx


def _audit_switch(doc: _Doc, ctx: RoceContext) -> None:
    node, p, where = doc.node, doc.path, doc.where
    doc.unknown(node, KNOWN_TOP, "")
    trust_node = k8s.get(node, "trust")
    doc.findings += _trust_finding(p, k8s.line_of(trust_node) if trust_node else None,
                                   k8s.scalar(trust_node), where)
    mtu_node = k8s.get(node, "mtu")
    if mtu_node is not None:
        mtu = _num(mtu_node)
        if mtu is None:
            doc.bad(mtu_node, "mtu", "a number of bytes")
        elif mtu < MIN_ROCE_MTU:
            doc.findings.append(finding(
                "ROCE004", p, k8s.line_of(mtu_node),
                f"MTU is {mtu:g} bytes{where}, below 4200, so 4096-byte RoCE frames (payload "
                "plus headers) do not fit and RDMA falls back to a smaller MTU.",
                "Set the port MTU to 9216 (at least 4200) end to end.", mtu=mtu))
    mapping = k8s.get(node, "dscp_to_priority")
    for key, value in k8s.pairs(mapping):
        d, prio = _num_text(key), _num(value)
        if d is None or prio is None or not 0 <= d < 64 or not 0 <= prio < 8:
            doc.bad(value, f"dscp_to_priority.{key[:10]}", "a DSCP 0-63 mapped to 0-7")
        else:
            ctx.dscp_to_priority[int(d)] = int(prio)
    pfc = k8s.get(node, "pfc")
    doc.unknown(pfc, KNOWN_PFC, "pfc.")
    prios_node = k8s.get(pfc, "priorities")
    prios: list[int] = []
    unreadable = False
    if prios_node is not None and not isinstance(prios_node, SequenceNode):
        doc.bad(prios_node, "pfc.priorities", "a list of priorities 0-7")
        unreadable = True
    for item in k8s.items(prios_node):
        number = _num(item)
        if number is None or not 0 <= number < 8 or number != int(number):
            doc.bad(item, "pfc.priorities", "a list of priorities 0-7")
            unreadable = True
        elif int(number) not in prios:
            prios.append(int(number))
    line = k8s.line_of(prios_node) if prios_node else (k8s.line_of(pfc) if pfc else None)
    if not unreadable:  # (ROCE007 said it could not be checked; do not guess past it)
        doc.findings += _pfc_findings(p, line, prios, where)
    if not ctx.pfc_priorities:
        ctx.pfc_priorities = prios
    _watchdog(doc, pfc)
    _ecn(doc, pfc, k8s.get(node, "ecn"))


def _num_text(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _watchdog(doc: _Doc, pfc: Node | None) -> None:
    wd = k8s.get(pfc, "watchdog")
    doc.unknown(wd, KNOWN_WD, "pfc.watchdog.")
    enabled = _bool(k8s.get(wd, "enabled")) if isinstance(wd, MappingNode) else _bool(wd)
    if isinstance(wd, MappingNode) and k8s.get(wd, "enabled") is None:
        enabled = k8s.get(wd, "detection_time_ms") is not None
    if not enabled:
        doc.findings.append(finding(
            "ROCE005", doc.path, k8s.line_of(wd) if wd else (k8s.line_of(pfc) if pfc else None),
            f"No PFC watchdog{doc.where}, so a stuck receiver's pause storm can freeze the "
            "lossless class across the fabric.",
            "Enable the PFC watchdog on every port (e.g. detection 200 ms, restoration 400 ms, "
            "action drop)."))


def _ecn(doc: _Doc, pfc: Node | None, ecn: Node | None) -> None:
    doc.unknown(ecn, KNOWN_ECN, "ecn.")
    p, where = doc.path, doc.where
    enabled = _bool(k8s.get(ecn, "enabled")) if isinstance(ecn, MappingNode) else None
    if enabled is None and isinstance(ecn, MappingNode):
        enabled = k8s.get(ecn, "min_threshold_bytes") is not None
    if not enabled:
        doc.findings.append(finding(
            "ROCE008", p, k8s.line_of(ecn) if isinstance(ecn, Node) else None,
            f"ECN marking is not configured{where}, so DCQCN never slows senders and every "
            "congestion event becomes PFC pauses.",
            "Enable ECN (WRED marking) on the lossless queue with thresholds well below the "
            "PFC xoff threshold."))
        return
    values: dict[str, float] = {}
    for key, node in (("ecn.min_threshold_bytes", k8s.get(ecn, "min_threshold_bytes")),
                      ("ecn.max_threshold_bytes", k8s.get(ecn, "max_threshold_bytes")),
                      ("pfc.xoff_bytes", k8s.get(pfc, "xoff_bytes"))):
        if node is None:
            continue
        number = _num(node)
        if number is None or number < 0:
            doc.bad(node, key, "a number of bytes")
        else:
            values[key] = number
    xoff = values.get("pfc.xoff_bytes")
    low = values.get("ecn.min_threshold_bytes")
    high = values.get("ecn.max_threshold_bytes")
    if xoff is None or low is None:
        return
    line_node = k8s.get(ecn, "min_threshold_bytes")
    if low >= xoff or (high is not None and high >= xoff):
        which = low if low >= xoff else high
        line_node = k8s.get(ecn, "min_threshold_bytes" if low >= xoff else "max_threshold_bytes")
        doc.findings.append(finding(
            "ROCE003", p, k8s.line_of(line_node) if line_node else None,
            f"ECN marks at {which:.0f} bytes but PFC pauses at {xoff:.0f} bytes{where}, so pauses "
            "come before (or without) the ECN signal that should slow senders first.",
            f"Lower the ECN thresholds well below xoff (min at most {xoff / 2:.0f}, max below "
            f"{xoff:.0f} bytes).", ecn_bytes=which, xoff_bytes=xoff))
    elif low > xoff / 2:
        doc.findings.append(finding(
            "ROCE003", p, k8s.line_of(line_node) if line_node else None,
            f"ECN starts marking at {low:.0f} bytes, more than half of the PFC xoff threshold "
            f"({xoff:.0f} bytes){where}, leaving DCQCN little room before PFC pauses.",
            f"Lower ecn.min_threshold_bytes to at most {xoff / 2:.0f} bytes.",
            ecn_bytes=low, xoff_bytes=xoff))



# --- SONiC CONFIG_DB ------------------------------------------------------------------------

def _ref(value: str | None) -> str:
    """A table reference: ``AZURE`` or the older ``[WRED_PROFILE|AZURE]`` form."""
    text = (value or "").strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1].split("|", 1)[-1]
    return text


def _priorities(value: str | None) -> list[int] | None:
    out: list[int] = []
    for part in (value or "").split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or int(part) > 7:
            return None
        out.append(int(part))
    return out


def _port_keyed(table: Node | None) -> dict[str, list[tuple[set[int], Node]]]:
    """``Ethernet0|3``, ``Ethernet0|3-4`` and ``Ethernet0,Ethernet4|3-4`` keys, per port."""
    out: dict[str, list[tuple[set[int], Node]]] = {}
    for key, value in k8s.pairs(table):
        ports, _, index = key.partition("|")
        low, _, high = index.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            continue
        if not 0 <= first <= last <= 15:  # queue / PG indices; anything else is not ours
            continue
        ids = set(range(first, last + 1))
        for port in ports.split(","):
            out.setdefault(port.strip(), []).append((ids, value))
    return out


class _Grouped:
    """One finding per (rule, reason) over every port it holds for, at the first port's line."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.groups: dict[tuple[str, str], tuple[int | None, list[str], str, Severity | None]] = {}

    def add(self, rule: str, port: str, line: int | None, reason: str, fix: str,
            severity: Severity | None = None) -> None:
        key = (rule, reason)
        if key not in self.groups:
            self.groups[key] = (line, [], fix, severity)
        self.groups[key][1].append(port)

    def findings(self) -> list[Finding]:
        out: list[Finding] = []
        for (rule, reason), (line, ports, fix, severity) in self.groups.items():
            shown = ", ".join(ports[:MAX_PORTS_SHOWN])
            if len(ports) > MAX_PORTS_SHOWN:
                shown += f" and {len(ports) - MAX_PORTS_SHOWN} more"
            out.append(finding(rule, self.path, line, f"{reason} (port{'s' * (len(ports) > 1)} "
                               f"{shown}).", fix, severity, ports=len(ports)))
        return out


def _sonic(path: str, db: MappingNode, ctx: RoceContext) -> list[Finding]:
    qos_map = k8s.get(db, "PORT_QOS_MAP")
    ports_table = k8s.get(db, "PORT")
    global_qos = k8s.get(qos_map, "global")
    queues = _port_keyed(k8s.get(db, "QUEUE"))
    pgs = _port_keyed(k8s.get(db, "BUFFER_PG"))
    wred = k8s.get(db, "WRED_PROFILE")
    profiles = k8s.get(db, "BUFFER_PROFILE")
    pfc_wd = k8s.get(db, "PFC_WD")
    out = _Grouped(path)
    ports = [(name, node) for name, node in k8s.pairs(qos_map) if name != "global"]
    if not ports:
        return [finding(
            "ROCE001", path, k8s.line_of(qos_map) if qos_map else None,
            "No port has a PORT_QOS_MAP entry, so PFC is enabled on no priority and RoCE "
            "traffic is lossy.",
            "Add PORT_QOS_MAP entries with pfc_enable set to the RoCE priority (e.g. \"3\").",
            priorities="")]
    for name, node in ports:
        line = k8s.line_of(node)
        pfc_node = k8s.get(node, "pfc_enable")
        prios = _priorities(k8s.scalar(pfc_node))
        if prios is None:
            out.add("ROCE007", name, k8s.line_of(pfc_node) if pfc_node else line,
                    "pfc_enable is not a comma-separated list of priorities 0-7, so PFC could "
                    "not be checked", "Write pfc_enable as e.g. \"3\".")
            prios = []
        else:
            for f in _pfc_findings(path, None, prios, ""):
                out.add(f.rule, name, k8s.line_of(pfc_node) if pfc_node else line,
                        f.reason.rstrip("."), f.fix, f.severity)
            if len(prios) == 1 and not ctx.pfc_priorities:
                ctx.pfc_priorities = prios
        dscp_map = k8s.get(node, "dscp_to_tc_map") or k8s.get(global_qos, "dscp_to_tc_map")
        if dscp_map is None:
            trust = "pcp" if k8s.get(node, "dot1p_to_tc_map") is not None else None
            for f in _trust_finding(path, None, trust, ""):
                out.add(f.rule, name, line, f.reason.rstrip("."),
                        "Bind a DSCP_TO_TC_MAP to the port (PORT_QOS_MAP dscp_to_tc_map).")
        elif not ctx.dscp_to_priority:
            table = k8s.get(k8s.get(db, "DSCP_TO_TC_MAP"), _ref(k8s.scalar(dscp_map)))
            for dscp, tc in k8s.pairs(table):
                d, t = _num_text(dscp), _num(tc)
                if d is not None and t is not None and 0 <= d < 64 and 0 <= t < 8:
                    ctx.dscp_to_priority[int(d)] = int(t)
        mtu_node = k8s.get(k8s.get(ports_table, name), "mtu")
        mtu = _num(mtu_node)
        if mtu is not None and mtu < MIN_ROCE_MTU and mtu_node is not None:
            out.add("ROCE004", name, k8s.line_of(mtu_node),
                    f"MTU is {mtu:g} bytes, below 4200, so 4096-byte RoCE frames do not fit",
                    "Set the port mtu to 9100 (at least 4200) end to end.")
        sw_wd = set(_priorities(k8s.scalar(k8s.get(node, "pfcwd_sw_enable"))) or [])
        has_wd = k8s.get(k8s.get(pfc_wd, name), "detection_time") is not None or (
            bool(prios) and set(prios) <= sw_wd)
        if prios and not has_wd:
            out.add("ROCE005", name, line,
                    "No PFC watchdog, so a stuck receiver's pause storm can freeze the lossless "
                    "class across the fabric",
                    "Enable the PFC watchdog (`config pfcwd start --action drop ports all "
                    "detection-time 200`).")
        _sonic_ecn(out, name, line, prios, queues.get(name, []), pgs.get(name, []), wred,
                   profiles)
    return out.findings()


def _sonic_ecn(out: _Grouped, port: str, line: int, prios: list[int],
               queues: list[tuple[set[int], Node]], pgs: list[tuple[set[int], Node]],
               wred: Node | None, profiles: Node | None) -> None:
    for prio in prios:
        profile_node = next((k8s.get(q, "wred_profile") for ids, q in queues
                             if prio in ids and k8s.get(q, "wred_profile") is not None), None)
        profile = k8s.get(wred, _ref(k8s.scalar(profile_node))) if profile_node else None
        ecn = (k8s.scalar(k8s.get(profile, "ecn")) or "").strip()
        if profile is None or ecn in SONIC_ECN_OFF:
            out.add("ROCE008", port, k8s.line_of(profile_node) if profile_node else line,
                    f"ECN marking is not configured on lossless queue {prio}, so DCQCN never "
                    "slows senders and congestion becomes PFC pauses",
                    "Give the lossless queue a WRED_PROFILE with ecn ecn_all and green "
                    "thresholds below the PG xoff.")
            continue
        low = _num(k8s.get(profile, "green_min_threshold"))
        high = _num(k8s.get(profile, "green_max_threshold"))
        pg_node = next((k8s.get(pg, "profile") for ids, pg in pgs
                        if prio in ids and k8s.get(pg, "profile") is not None), None)
        xoff = _num(k8s.get(k8s.get(profiles, _ref(k8s.scalar(pg_node))), "xoff")) \
            if pg_node else None
        if low is None or xoff is None:
            continue  # dynamic buffer model: xoff is computed, not in CONFIG_DB
        if low >= xoff or (high is not None and high >= xoff):
            which = low if low >= xoff else high
            out.add("ROCE003", port, k8s.line_of(profile),
                    f"ECN on queue {prio} marks at {which:.0f} bytes but PFC pauses at {xoff:.0f} "
                    "bytes, so pauses come before the ECN signal that should slow senders",
                    f"Lower green_min_threshold to at most {xoff / 2:.0f} and green_max_threshold "
                    f"below {xoff:.0f} bytes.")
        elif low > xoff / 2:
            out.add("ROCE003", port, k8s.line_of(profile),
                    f"ECN on queue {prio} starts at {low:.0f} bytes, more than half of the PFC "
                    f"xoff ({xoff:.0f} bytes), leaving DCQCN little room before PFC pauses",
                    f"Lower green_min_threshold to at most {xoff / 2:.0f} bytes.")
