"""Audit of opensm.conf, the options file opensm writes (``opensm -c``) and reads (``-F``).

The format is one ``key value`` per line, ``#`` comments, blank lines; the value is the rest of
the line (a few keys such as ``cc_ca_cong_setting_ccti_timer 0 0`` take several words) and
``(null)`` means unset. A key given twice keeps the last value, as opensm does.

Rules: OSM001-OSM017 (see :mod:`fabricwatch.audit.findings`). Key values (``m_key``,
``sm_key``, ``sa_key``, ``cc_key``) are secrets: they are only ever reported masked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fabricwatch.audit.findings import Finding, finding, mask_secret
from fabricwatch.audit.inputs import AuditInputError
from schemas import Severity

# Every key opensm 3.3.23 writes with ``opensm -c`` (the default file), plus a few that
# other 3.3.x releases and vendor builds add.
KNOWN_KEYS = frozenset("""
    guid m_key m_key_lease_period m_key_protection_level m_key_lookup sm_key sa_key
    subnet_prefix lmc lmc_esp0 sm_sl packet_life_time vl_stall_count leaf_vl_stall_count
    head_of_queue_lifetime leaf_head_of_queue_lifetime max_op_vls force_link_speed
    force_link_speed_ext force_link_width fdr10 subnet_timeout local_phy_errors_threshold
    overrun_errors_threshold use_mfttop partition_config_file no_partition_enforcement
    part_enforce allow_both_pkeys keep_pkey_indexes sm_assigned_guid sweep_interval
    reassign_lids force_heavy_sweep sweep_on_trap port_profile_switch_nodes
    port_prof_ignore_file hop_weights_file port_search_ordering_file routing_engine
    avoid_throttled_links connect_roots use_ucast_cache lid_matrix_dump_file lfts_file
    root_guid_file cn_guid_file io_guid_file quasi_ftree_indexing max_reverse_hops
    ids_guid_file guid_routing_order_file do_mesh_analysis lash_start_vl nue_max_num_vls
    nue_include_switches port_shifting scatter_ports guid_routing_order_no_scatter
    sa_db_file sa_db_dump torus_config sm_priority ignore_other_sm sminfo_polling_timeout
    polling_retry_number honor_guid2lid_file max_wire_smps max_wire_smps2 max_smps_timeout
    transaction_timeout transaction_retries long_transaction_timeout max_msg_fifo_timeout
    single_thread daemon sm_inactive babbling_port_policy drop_event_subscriptions
    ipoib_mcgroup_creation_validation mcgroup_join_validation
    use_original_extended_sa_rates_only use_optimized_slvl fsync_high_avail_files perfmgr
    perfmgr_redir perfmgr_sweep_time_s perfmgr_max_outstanding_queries perfmgr_ignore_cas
    perfmgr_rm_nodes perfmgr_log_errors perfmgr_query_cpi perfmgr_xmit_wait_log
    perfmgr_xmit_wait_threshold event_db_dump_file event_plugin_name event_plugin_options
    node_name_map_name log_flags force_log_flush log_file log_max_size accum_log_file
    per_module_logging_file dump_files_dir enable_quirks no_clients_rereg disable_multicast
    exit_on_fatal console console_port qos qos_policy_file suppress_sl2vl_mad_status_errors
    qos_max_vls qos_high_limit qos_vlarb_high qos_vlarb_low qos_sl2vl qos_ca_max_vls
    qos_ca_high_limit qos_ca_vlarb_high qos_ca_vlarb_low qos_ca_sl2vl qos_sw0_max_vls
    qos_sw0_high_limit qos_sw0_vlarb_high qos_sw0_vlarb_low qos_sw0_sl2vl qos_swe_max_vls
    qos_swe_high_limit qos_swe_vlarb_high qos_swe_vlarb_low qos_swe_sl2vl qos_rtr_max_vls
    qos_rtr_high_limit qos_rtr_vlarb_high qos_rtr_vlarb_low qos_rtr_sl2vl congestion_control
    cc_key cc_max_outstanding_mads cc_sw_cong_setting_control_map
    cc_sw_cong_setting_victim_mask cc_sw_cong_setting_credit_mask
    cc_sw_cong_setting_threshold cc_sw_cong_setting_packet_size
    cc_sw_cong_setting_credit_starvation_threshold
    cc_sw_cong_setting_credit_starvation_return_delay cc_sw_cong_setting_marking_rate
    cc_ca_cong_setting_port_control cc_ca_cong_setting_control_map
    cc_ca_cong_setting_ccti_timer cc_ca_cong_setting_ccti_increase
    cc_ca_cong_setting_trigger_threshold cc_ca_cong_setting_ccti_min cc_cct
    prefix_routes_file consolidate_ipv6_snm_req log_prefix
    m_key_per_port virt_enabled virt_max_ports_in_process virt_default_hop_limit
    rereg_on_guid_migr aguid_inout_notice sm_assign_guid_func max_seq_redisc
    rtr_pr_sl rtr_pr_mtu rtr_pr_rate rtr_pr_flow_label rtr_pr_tclass
    force_link_speed_ext_2 sweep_every_hup_signal
""".split())

SECRET_KEYS = frozenset({"m_key", "sm_key", "sa_key", "cc_key"})
DEFAULT_SM_SA_KEY = 1
# Engines that route a fat tree without credit loops; ar_* are the adaptive-routing variants.
FAT_TREE_ENGINES = frozenset({"ftree", "updn", "ar_ftree", "ar_updn", "dfsssp", "sssp"})
NULL = "(null)"


@dataclass(frozen=True)
class Entry:
    key: str
    value: str
    line: int


@dataclass
class OpensmConf:
    """The parsed file: the effective entry of each key, and what was odd about the text."""

    path: str
    entries: dict[str, Entry] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def get(self, key: str) -> Entry | None:
        return self.entries.get(key)

    def value(self, key: str) -> str | None:
        entry = self.entries.get(key)
        if entry is None or entry.value == NULL or entry.value == "":
            return None
        return entry.value


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value, 0)
    except ValueError:
        return None


def _shown(key: str, value: str) -> str:
    return mask_secret(value) if key in SECRET_KEYS else value[:80]


def _looks_like_a_value(token: str) -> bool:
    """A number or hex string where a key belongs: possibly a key's value, so masked."""
    return _int(token) is not None or (len(token) >= 8 and all(
        c in "0123456789abcdefABCDEF" for c in token.removeprefix("0x")))


def parse_opensm(text: str, path: str) -> OpensmConf:
    """Parse opensm.conf text; raise :class:`AuditInputError` if it is not an opensm.conf."""
    conf = OpensmConf(path=path)
    content_lines = 0
    known = 0  # lines whose key opensm knows
    after_secret = False  # the line before was a key such as m_key with its value missing
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        content_lines += 1
        parts = line.split(None, 1)
        key = parts[0]
        known += key in KNOWN_KEYS
        if key not in KNOWN_KEYS and (after_secret or _looks_like_a_value(key)):
            # A stray value (an M_Key wrapped onto its own line, say): never echo it.
            after_secret = False
            conf.findings.append(finding(
                "OSM016", path, lineno,
                f"Line holds a value ({mask_secret(key)}) with no key, so opensm ignores it.",
                "Write `key value` on one line, or delete the line.", key=mask_secret(key)))
            continue
        after_secret = len(parts) == 1 and key in SECRET_KEYS
        if len(parts) == 1:
            conf.findings.append(finding(
                "OSM016", path, lineno,
                f"Line has the key {key[:60]!r} but no value, so opensm ignores it.",
                "Write `key value` on one line, or delete the line.", key=key[:60]))
            continue
        value = parts[1].strip()
        if key not in KNOWN_KEYS:
            conf.findings.append(finding(
                "OSM015", path, lineno,
                f"opensm 3.3 does not know the key {key[:60]!r}; it will be ignored or refused.",
                "Check the spelling against `opensm -c` output of the running version, "
                "or remove it.", key=key[:60]))
            conf.entries.setdefault(key, Entry(key, value, lineno))
            continue
        previous = conf.entries.get(key)
        if previous is not None:
            conf.findings.append(finding(
                "OSM017", path, lineno,
                f"{key} is also set on line {previous.line}; opensm uses this later value "
                f"({_shown(key, value)}).",
                f"Keep one {key} line.", key=key, first_line=previous.line))
        conf.entries[key] = Entry(key, value, lineno)
    if content_lines and known == 0:
        raise AuditInputError("no opensm option found: this is not an opensm.conf", path)
    if content_lines and known * 2 < content_lines:
        raise AuditInputError(
            f"only {known} of {content_lines} lines are opensm options: "
            "this does not look like an opensm.conf", path)
    return conf


def audit_opensm(text: str, path: str, *, fat_tree: bool | None = None,
                 plan_expects_qos: bool | None = None) -> list[Finding]:
    """All findings for one opensm.conf."""
    conf = parse_opensm(text, path)
    out = list(conf.findings)
    out += _keys(conf)
    out += _routing_and_ha(conf, fat_tree=fat_tree, plan_expects_qos=plan_expects_qos)
    out += _partitions(conf)
    return out


def _line(conf: OpensmConf, key: str) -> int | None:
    entry = conf.get(key)
    return entry.line if entry else None


def _keys(conf: OpensmConf) -> list[Finding]:
    out: list[Finding] = []
    p = conf.path
    m_key = _int(conf.value("m_key"))
    if m_key is None or m_key == 0:
        out.append(finding(
            "OSM001", p, _line(conf, "m_key"),
            "m_key is 0 (or unset), so any host on the fabric can change the port settings of "
            "every switch and HCA (Set(PortInfo)): take links down, move LIDs, or become SM.",
            "Set m_key to a random 64-bit value (e.g. `openssl rand -hex 8`), the same on every "
            "SM of this subnet, and raise m_key_protection_level to 2.",
            key="m_key", value=mask_secret(conf.value("m_key") or "0")))
    level = _int(conf.value("m_key_protection_level"))
    if level is None or level < 2:
        out.append(finding(
            "OSM002", p, _line(conf, "m_key_protection_level"),
            f"m_key_protection_level is {level if level is not None else 'unset (0)'}: below 2 a "
            "host can read port configuration (and at level 0 the M_Key itself) with an "
            "unauthenticated Get(PortInfo).",
            "Set m_key_protection_level 2 (or 3 to also trap on bad keys).",
            severity=Severity.CRITICAL if not level else None,
            key="m_key_protection_level", value=level))
    lease = _int(conf.value("m_key_lease_period"))
    if lease is None or lease == 0:
        out.append(finding(
            "OSM003", p, _line(conf, "m_key_lease_period"),
            "m_key_lease_period is 0, so M_Key protection never expires: if the master SM is lost "
            "without a standby that knows the key, no SM can manage those ports again.",
            "Set m_key_lease_period to a bounded lease (e.g. 60 seconds) and give every standby "
            "SM the same m_key.", key="m_key_lease_period", value=lease))
    for key, rule, who in (("sm_key", "OSM004", "negotiate with and take over from the SM"),
                           ("sa_key", "OSM005", "make SA queries as a trusted client")):
        value = _int(conf.value(key))
        if value is None or value == DEFAULT_SM_SA_KEY:
            out.append(finding(
                rule, p, _line(conf, key),
                f"{key} is the well-known default 0x1 (or unset), so any host running an SM or "
                f"SA client can {who}.",
                f"Set {key} to a random 64-bit value, the same on every SM of this subnet.",
                key=key, value=mask_secret(conf.value(key) or "1")))
    values: dict[str, int] = {}
    for key in ("m_key", "sm_key", "sa_key", "cc_key"):
        value = _int(conf.value(key))
        if value is None or value in (0, DEFAULT_SM_SA_KEY):
            continue
        if value.bit_length() < 32:
            out.append(finding(
                "OSM013", p, _line(conf, key),
                f"{key} ({mask_secret(str(value))}) has fewer than 32 significant bits, "
                "so it can be guessed by trying values.",
                f"Use a random 64-bit value for {key}.", key=key, value=mask_secret(str(value))))
        for other, other_value in values.items():
            if other_value == value:
                out.append(finding(
                    "OSM014", p, _line(conf, key),
                    f"{key} has the same value as {other}, so leaking one key leaks both.",
                    f"Give {key} its own random value.", key=key, same_as=other))
        values[key] = value
    return out


def _routing_and_ha(conf: OpensmConf, *, fat_tree: bool | None, plan_expects_qos: bool | None
                    ) -> list[Finding]:
    """``fat_tree`` and ``plan_expects_qos`` are None when the topology or plan is unknown:
    the settings that depend on them are then still reported (an unpinned routing engine,
    QoS off), worded for an unknown topology, never passed over in silence."""
    out: list[Finding] = []
    p = conf.path
    engine = conf.value("routing_engine")
    engines = [e.strip() for e in (engine or "").split(",") if e.strip()]
    if fat_tree and (not engines or engines[0] not in FAT_TREE_ENGINES):
        shown = engine or "unset (minhop)"
        out.append(finding(
            "OSM006", p, _line(conf, "routing_engine"),
            f"routing_engine is {shown[:60]} on a fat tree: minhop balances badly and does not "
            "prevent credit-loop deadlock there.",
            "Set routing_engine ftree (or updn when the tree is not pure), optionally with "
            "root_guid_file.", key="routing_engine", value=shown[:60]))
    elif fat_tree is None and not engines:
        out.append(finding(
            "OSM006", p, _line(conf, "routing_engine"),
            "routing_engine is unset, so opensm routes with minhop, and the topology is "
            "unknown to this audit: on a fat tree (most GPU backend fabrics) minhop balances "
            "badly and does not prevent credit-loop deadlock.",
            "Pin the routing engine the topology needs (ftree, or updn when the tree is not "
            "pure, on a fat tree); pass --fat-tree or --not-fat-tree to have it judged.",
            key="routing_engine", value="unset (minhop)", topology="unknown"))
    priority = _int(conf.value("sm_priority"))
    if not priority:
        out.append(finding(
            "OSM007", p, _line(conf, "sm_priority"),
            "sm_priority is 0, so there is no standby plan: which SM becomes master is left to "
            "the lowest port GUID, and any new SM on the fabric ties with this one.",
            "Give the intended master sm_priority 15 and each standby a distinct lower value "
            "(14, 13).", key="sm_priority", value=priority))
    qos = (conf.value("qos") or "FALSE").upper()
    if plan_expects_qos and qos != "TRUE":
        out.append(finding(
            "OSM008", p, _line(conf, "qos"),
            "qos is off although the plan expects QoS, so every SL shares one VL and storage or "
            "management traffic competes with training traffic.",
            "Set qos TRUE and configure qos_policy_file (or the qos_* VL arbitration keys).",
            key="qos", value=qos))
    elif plan_expects_qos is None and qos != "TRUE":
        out.append(finding(
            "OSM008", p, _line(conf, "qos"),
            "qos is off and whether the fabric's plan uses QoS is unknown to this audit: with "
            "it off every SL shares one VL, so storage or management traffic competes with "
            "training traffic on a shared fabric.",
            "Decide it and pin it: qos TRUE with a qos_policy_file where storage or management "
            "share the fabric; pass --plan-expects-qos or --plan-without-qos to have it judged.",
            Severity.INFO, key="qos", value=qos, plan="unknown"))
    if (conf.value("ignore_other_sm") or "FALSE").upper() == "TRUE":
        out.append(finding(
            "OSM012", p, _line(conf, "ignore_other_sm"),
            "ignore_other_sm is TRUE, so this SM does not negotiate with others and two masters "
            "can fight over the subnet.",
            "Set ignore_other_sm FALSE.", key="ignore_other_sm"))
    console = (conf.value("console") or "off").lower()
    if console in ("socket", "remote"):
        out.append(finding(
            "OSM011", p, _line(conf, "console"),
            f"console is {console}: the opensm console listens on TCP port "
            f"{conf.value('console_port') or 10000} and can reconfigure the SM.",
            "Set console off (or loopback and reach it over ssh).", key="console",
            value=console))
    return out


def _partitions(conf: OpensmConf) -> list[Finding]:
    out: list[Finding] = []
    p = conf.path
    if conf.value("partition_config_file") is None:
        out.append(finding(
            "OSM009", p, _line(conf, "partition_config_file"),
            "No partition_config_file is set, so opensm gives every port full membership of the "
            "default partition and tenants are not isolated.",
            "Set partition_config_file /etc/opensm/partitions.conf and define "
            "`Default=0x7fff, ipoib : ALL=limited, SELF=full ;` plus one partition per tenant.",
            key="partition_config_file"))
    enforce = (conf.value("part_enforce") or "both").lower()
    no_enforce = (conf.value("no_partition_enforcement") or "FALSE").upper() == "TRUE"
    if no_enforce or enforce == "off":
        key = "no_partition_enforcement" if no_enforce else "part_enforce"
        out.append(finding(
            "OSM010", p, _line(conf, key),
            "Partition enforcement is disabled on switches, so packets with any P_Key cross "
            "every link and partitions isolate nothing.",
            "Set no_partition_enforcement FALSE and part_enforce both.", key=key))
    elif enforce in ("in", "out"):
        out.append(finding(
            "OSM010", p, _line(conf, "part_enforce"),
            f"part_enforce is {enforce}: switches check P_Keys in one direction only.",
            "Set part_enforce both.", severity=Severity.WARNING, key="part_enforce",
            value=enforce))
    return out
