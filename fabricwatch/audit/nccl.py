"""Audit of the NCCL environment a training job runs with: an env file or a pod spec.

An env file is ``KEY=VALUE`` per line (``export`` allowed, ``#`` comments, single or double
quotes); a pod spec is a Kubernetes manifest whose containers carry ``env`` entries (each
container is audited on its own; ``valueFrom`` values are unknown and skipped) or a ConfigMap
whose data holds the variables.

What is checked, and against what:

- ``NCCL_SOCKET_IFNAME`` (bootstrap and socket traffic) must not name a backend interface:
  backend interface patterns default to ``ib*`` (IPoIB) and can be given.
- ``NCCL_IB_HCA`` must name only backend devices (when the backend HCAs are given); an entry
  without ``=`` is a prefix, so ``mlx5_1`` also selects ``mlx5_10``..``mlx5_19``.
- On RoCE, ``NCCL_IB_GID_INDEX`` and ``NCCL_IB_TC`` must be set, and the DSCP in the traffic
  class (``TC >> 2``) must map to the fabric's single lossless priority (from the RoCE QoS
  input when audited together, else DSCP/8 = ``lossless_priority``).
- ``NCCL_IB_TIMEOUT`` x ``NCCL_IB_RETRY_CNT`` (4.096 us x 2^timeout per retry, times retries,
  NCCL defaults 20 and 7) must outlast the fabric's re-sweep time, which comes from
  ``--resweep-s`` or the ledger.

Rules: NCCL001-NCCL011.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from yaml.nodes import MappingNode, Node, ScalarNode

from fabricwatch.audit import k8s
from fabricwatch.audit.findings import Finding, finding
from fabricwatch.audit.inputs import AuditInputError

IB_TIMEOUT_UNIT_S = 4.096e-6
DEFAULT_IB_TIMEOUT = 20  # NCCL >= 2.14
DEFAULT_IB_RETRY_CNT = 7
ENV_LINE = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
KNOWN_NCCL = frozenset("""
    NCCL_SOCKET_IFNAME NCCL_SOCKET_FAMILY NCCL_SOCKET_RETRY_CNT NCCL_SOCKET_RETRY_SLEEP_MSEC
    NCCL_SOCKET_NTHREADS NCCL_NSOCKS_PERTHREAD NCCL_SOCKET_POLL_TIMEOUT_MSEC NCCL_CROSS_NIC
    NCCL_IB_HCA NCCL_IB_TIMEOUT NCCL_IB_RETRY_CNT NCCL_IB_GID_INDEX NCCL_IB_ADDR_FAMILY
    NCCL_IB_ADDR_RANGE NCCL_IB_ROCE_VERSION_NUM NCCL_IB_SL NCCL_IB_TC NCCL_IB_FIFO_TC
    NCCL_IB_RETURN_ASYNC_EVENTS NCCL_IB_DISABLE NCCL_IB_AR_THRESHOLD NCCL_IB_QPS_PER_CONNECTION
    NCCL_IB_SPLIT_DATA_ON_QPS NCCL_IB_CUDA_SUPPORT NCCL_IB_PCI_RELAXED_ORDERING
    NCCL_IB_ADAPTIVE_ROUTING NCCL_IB_ECE_ENABLE NCCL_IB_MERGE_NICS NCCL_IB_MERGE_VFS
    NCCL_IB_MQP_RETRY_ALL NCCL_IB_MQP_RETRY_CNT NCCL_IB_MQP_RETRY_SLEEP_MSEC NCCL_IB_OOO_RQ
    NCCL_IB_USE_INLINE NCCL_IB_PKEY NCCL_IB_DATA_DIRECT NCCL_IB_WARN_RAIL_LOCAL
    NCCL_OOB_NET_ENABLE NCCL_OOB_NET_IFNAME NCCL_UID_STAGGER_THRESHOLD NCCL_UID_STAGGER_RATE
    NCCL_NET NCCL_NET_PLUGIN NCCL_TUNER_PLUGIN NCCL_PROFILER_PLUGIN NCCL_ENV_PLUGIN
    NCCL_IGNORE_CPU_AFFINITY NCCL_CONF_FILE NCCL_DEBUG NCCL_DEBUG_FILE NCCL_DEBUG_SUBSYS
    NCCL_DEBUG_TIMESTAMP_FORMAT NCCL_DEBUG_TIMESTAMP_LEVELS NCCL_COLLNET_ENABLE
    NCCL_COLLNET_NODE_THRESHOLD NCCL_CTA_POLICY NCCL_TOPO_FILE NCCL_TOPO_DUMP_FILE
    NCCL_SET_THREAD_NAME NCCL_P2P_DISABLE NCCL_P2P_LEVEL NCCL_P2P_DIRECT_DISABLE
    NCCL_SHM_DISABLE NCCL_SHM_USE_CUDA_MEMCPY NCCL_BUFFSIZE NCCL_NTHREADS NCCL_MAX_NCHANNELS
    NCCL_MIN_NCHANNELS NCCL_MAX_NRINGS NCCL_MIN_NRINGS NCCL_CHECKS_DISABLE NCCL_CHECK_POINTERS
    NCCL_LAUNCH_MODE NCCL_NET_GDR_LEVEL NCCL_NET_GDR_C2C NCCL_NET_GDR_READ
    NCCL_NET_SHARED_BUFFERS NCCL_NET_SHARED_COMMS NCCL_NET_MERGE_LEVEL NCCL_NET_FORCE_MERGE
    NCCL_NET_DISABLE_INTRA NCCL_NET_OVERHEAD NCCL_SINGLE_RING_THRESHOLD NCCL_LL_THRESHOLD
    NCCL_TREE_THRESHOLD NCCL_ALGO NCCL_PROTO NCCL_IGNORE_DISABLED_P2P NCCL_GRAPH_REGISTER
    NCCL_LOCAL_REGISTER NCCL_LEGACY_CUDA_REGISTER NCCL_SET_STACK_SIZE
    NCCL_GRAPH_MIXING_SUPPORT NCCL_DMABUF_ENABLE NCCL_P2P_NET_CHUNKSIZE NCCL_P2P_LL_THRESHOLD
    NCCL_P2P_NVL_CHUNKSIZE NCCL_P2P_PCI_CHUNKSIZE NCCL_P2P_USE_CUDA_MEMCPY NCCL_PXN_DISABLE
    NCCL_NVLS_ENABLE NCCL_NVLS_CHUNKSIZE NCCL_NVB_DISABLE NCCL_WORK_FIFO_DEPTH
    NCCL_RUNTIME_CONNECT NCCL_NCHANNELS_PER_NET_PEER NCCL_MAX_CTAS NCCL_MIN_CTAS
    NCCL_CGA_CLUSTER_SIZE NCCL_COMM_BLOCKING NCCL_CUMEM_ENABLE NCCL_CUMEM_HOST_ENABLE
    NCCL_RAS_ENABLE NCCL_RAS_ADDR NCCL_RAS_TIMEOUT_FACTOR NCCL_MNNVL_ENABLE NCCL_HOSTID
    NCCL_COMM_ID NCCL_ASYNC_ERROR_HANDLING NCCL_BLOCKING_WAIT NCCL_NVLS_NCHANNELS
    NCCL_NET_GDR_DISABLE NCCL_IB_GDR_LEVEL NCCL_PXN_C2C NCCL_COMM_SPLIT_SHARE_RESOURCES
""".split())


@dataclass(frozen=True)
class NcclOptions:
    backend_ifaces: tuple[str, ...] = ("ib*",)
    backend_hcas: tuple[str, ...] = ()
    transport: str | None = None  # "ib" | "roce"; None = RoCE when RoCE QoS or RoCE vars seen
    resweep_s: float | None = None
    resweep_source: str = "--resweep-s"
    lossless_priority: int = 3
    lossless_dscps: frozenset[int] | None = None  # DSCPs mapped to the lossless priority


@dataclass
class EnvSet:
    """The variables of one env file or one container: name -> (value, line)."""

    label: str
    values: dict[str, tuple[str, int]] = field(default_factory=dict)
    line: int | None = None  # where a missing variable belongs: the container, the ConfigMap


def _unquote(raw: str) -> str | None:
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    if value[:1] in ("'", '"'):
        return None  # an unterminated quote
    value = re.split(r"\s+#", value, maxsplit=1)[0].strip()
    if any(c.isspace() for c in value):
        return None  # a shell would run the rest as a command
    return value


def parse_env_file(text: str, path: str) -> tuple[EnvSet, list[Finding]]:
    env = EnvSet(label="env file", line=1)  # a missing variable belongs at the top
    bad: list[Finding] = []
    content = 0
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        content += 1
        match = ENV_LINE.match(line)
        value = _unquote(match.group(2)) if match else None
        if match is None or value is None:
            bad.append(finding(
                "NCCL011", path, lineno,
                "This line is not KEY=VALUE, so a shell or env loader would fail on it or run "
                "part of it as a command.",
                "Write KEY=VALUE, quoting values that contain spaces."))
            continue
        env.values[match.group(1)] = (value, lineno)
    if content and (not env.values or len(env.values) < len(bad)):
        raise AuditInputError("no KEY=VALUE lines: this is not an environment file", path)
    return env, bad


def _pod_env_sets(text: str, path: str) -> list[EnvSet]:
    """One variable set per container (``envFrom`` ConfigMaps of the same file merged in,
    ``env`` entries winning as in Kubernetes), plus one per ConfigMap no container uses."""
    docs = [doc for node in k8s.compose_documents(text, path) for doc in k8s.objects(node, path)]
    if not docs:
        raise AuditInputError("no Kubernetes object and no KEY=VALUE lines: this is neither "
                              "an env file nor a pod spec", path)
    config_maps: dict[tuple[str, str], EnvSet] = {}
    for doc in docs:
        if doc.kind == "ConfigMap":
            env = EnvSet(label=f"ConfigMap {doc.namespace}/{doc.name}",
                         line=k8s.line_of(doc.node))
            for key, value in k8s.pairs(k8s.get(doc.node, "data")):
                if isinstance(value, ScalarNode):
                    env.values[key] = (str(value.value), k8s.line_of(value))
            config_maps[(doc.namespace, doc.name)] = env
    used: set[tuple[str, str]] = set()
    sets: list[EnvSet] = []
    for doc in docs:
        template = k8s.POD_TEMPLATE_PATHS.get(doc.kind)
        spec = k8s.get_path(doc.node, template) if template else None
        if not isinstance(spec, MappingNode):
            continue
        for container in k8s.containers(spec):
            cname = k8s.scalar(k8s.get(container, "name")) or "(unnamed)"
            env = EnvSet(label=f"{doc.kind} {doc.namespace}/{doc.name} container {cname}",
                         line=k8s.line_of(container))
            for source in k8s.items(k8s.get(container, "envFrom")):
                ref = k8s.scalar(k8s.get(k8s.get(source, "configMapRef"), "name"))
                prefix = k8s.scalar(k8s.get(source, "prefix")) or ""
                found = config_maps.get((doc.namespace, ref or ""))
                if found is not None:
                    used.add((doc.namespace, ref or ""))
                    env.values.update({prefix + k: v for k, v in found.values.items()})
            for item in k8s.items(k8s.get(container, "env")):
                name = k8s.scalar(k8s.get(item, "name"))
                value_node: Node | None = k8s.get(item, "value")
                if name and isinstance(value_node, ScalarNode):
                    env.values[name] = (str(value_node.value), k8s.line_of(value_node))
            sets.append(env)
    sets += [env for key, env in config_maps.items() if key not in used]
    if not sets:
        raise AuditInputError("no pod spec or ConfigMap with environment variables found",
                              path)
    return sets


def _looks_like_yaml(text: str, path: str) -> bool:
    if path.endswith((".yaml", ".yml", ".json")):
        return True
    return bool(re.search(r"^\s*(apiVersion|kind)\s*:", text, re.M))


def audit_nccl(text: str, path: str, options: NcclOptions) -> list[Finding]:
    """All findings for one env file or pod spec."""
    if _looks_like_yaml(text, path):
        sets = _pod_env_sets(text, path)
        out: list[Finding] = []
    else:
        env, out = parse_env_file(text, path)
        sets = [env]
    for env in sets:
        out += _audit_env(env, path, options)
    return out


def _int(value: str) -> int | None:
    try:
        return int(value.strip(), 0)
    except ValueError:
        return None


def _entries(value: str) -> tuple[bool, list[tuple[str, bool]]]:
    """NCCL's list syntax: leading '^' excludes, '=' on an entry means exact match."""
    exclude = value.startswith("^")
    body = value[1:] if exclude else value
    out: list[tuple[str, bool]] = []
    for raw in body.split(","):
        entry = raw.strip()
        if not entry:
            continue
        exact = entry.startswith("=")
        out.append((entry.lstrip("="), exact))
    return exclude, out


def _audit_env(env: EnvSet, path: str, options: NcclOptions) -> list[Finding]:
    out: list[Finding] = []
    values = env.values
    ctx = env.label
    for name, (_, line) in sorted(values.items()):
        if name.startswith("NCCL_") and name not in KNOWN_NCCL:
            out.append(finding(
                "NCCL009", path, line,
                f"NCCL does not know {name[:60]}, so it has no effect (a typo leaves the "
                "intended setting at its default).",
                "Check the name against the NCCL environment variable reference.",
                variable=name[:60], context=ctx))
    out += _socket_ifname(values, path, options, ctx)
    out += _ib_hca(values, path, options, ctx)
    roce = options.transport == "roce" or (
        options.transport is None and (options.lossless_dscps is not None or any(
            v in values for v in ("NCCL_IB_GID_INDEX", "NCCL_IB_TC",
                                  "NCCL_IB_ROCE_VERSION_NUM"))))
    if roce:
        out += _roce(values, path, options, ctx, env.line)
    out += _timeouts(values, path, options, ctx, env.line)
    return out


def _socket_ifname(values: dict[str, tuple[str, int]], path: str, options: NcclOptions,
                   ctx: str) -> list[Finding]:
    if "NCCL_SOCKET_IFNAME" not in values:
        return []
    value, line = values["NCCL_SOCKET_IFNAME"]
    exclude, entries = _entries(value)
    if exclude:
        return []
    backend = [name for name, _ in entries
               if any(fnmatch.fnmatchcase(name, pat) or fnmatch.fnmatchcase(name + "0", pat)
                      for pat in options.backend_ifaces)]
    if not backend:
        return []
    return [finding(
        "NCCL001", path, line,
        f"NCCL_SOCKET_IFNAME={value[:60]} selects the backend interface "
        f"{', '.join(backend)[:60]}, so NCCL's bootstrap and socket traffic rides the RDMA "
        "fabric (and fails with it) instead of the frontend network.",
        "Point NCCL_SOCKET_IFNAME at the frontend (management) interface, e.g. =eth0, and "
        "leave the backend to NCCL_IB_HCA.", interfaces=", ".join(backend)[:60], context=ctx)]


def _ib_hca(values: dict[str, tuple[str, int]], path: str, options: NcclOptions,
            ctx: str) -> list[Finding]:
    if "NCCL_IB_HCA" not in values or not options.backend_hcas:
        return []
    value, line = values["NCCL_IB_HCA"]
    exclude, entries = _entries(value)
    if exclude:
        return []
    out: list[Finding] = []
    backend = set(options.backend_hcas)
    for entry, exact in entries:
        device = entry.split(":", 1)[0]
        if device not in backend and not any(b.startswith(device) for b in backend if not exact):
            out.append(finding(
                "NCCL002", path, line,
                f"NCCL_IB_HCA names {device[:40]}, which is not a backend HCA, so NCCL may send "
                "collective traffic over a frontend or storage port.",
                f"List only backend HCAs ({', '.join(sorted(backend))[:80]}), with '=' for "
                "exact names.", device=device[:40], context=ctx))
        elif not exact:
            widened = sorted(b for b in backend if b.startswith(device) and b != device)
            if widened:
                out.append(finding(
                    "NCCL003", path, line,
                    f"NCCL_IB_HCA entry {device[:40]} has no '=', so it is a prefix and also "
                    f"selects {', '.join(widened)[:80]}.",
                    f"Write ={value.lstrip('=')[:60]} (a leading '=' makes every entry exact).",
                    device=device[:40], context=ctx))
    return out


def _roce(values: dict[str, tuple[str, int]], path: str, options: NcclOptions,
          ctx: str, where: int | None) -> list[Finding]:
    out: list[Finding] = []
    if "NCCL_IB_GID_INDEX" not in values:
        out.append(finding(
            "NCCL004", path, where,
            "RoCE without NCCL_IB_GID_INDEX: NCCL may pick a RoCE v1 or link-local GID, whose "
            "packets the fabric does not route or classify as lossless.",
            "Set NCCL_IB_GID_INDEX to the RoCE v2 IPv4/IPv6 GID index (see `show_gids`), the "
            "same on every node.", context=ctx))
    expected = options.lossless_dscps
    if expected is None:
        p = options.lossless_priority
        expected = frozenset(range(p * 8, p * 8 + 8))
    if "NCCL_IB_TC" not in values:
        dscp = min(expected) if expected else 26
        out.append(finding(
            "NCCL005", path, where,
            "RoCE without NCCL_IB_TC: NCCL traffic goes out with DSCP 0, the lossy best-effort "
            "class, so congestion drops packets instead of pausing them.",
            f"Set NCCL_IB_TC={dscp << 2 | 2} (DSCP {dscp}, ECN-capable), a DSCP that maps to the "
            "lossless priority.", context=ctx))
        return out
    value, line = values["NCCL_IB_TC"]
    tc = _int(value)
    if tc is None or not 0 <= tc <= 255:
        out.append(finding(
            "NCCL008", path, line, f"NCCL_IB_TC={value[:20]} is not a number from 0 to 255.",
            "Set NCCL_IB_TC to the traffic class byte, DSCP << 2 (e.g. 106 for DSCP 26).",
            variable="NCCL_IB_TC", context=ctx))
        return out
    dscp = tc >> 2
    if dscp not in expected:
        want = min(expected) if expected else 26
        out.append(finding(
            "NCCL006", path, line,
            f"NCCL_IB_TC={tc} carries DSCP {dscp}, which does not map to the fabric's lossless "
            "priority, so NCCL traffic is not protected by PFC.",
            f"Set NCCL_IB_TC={want << 2 | 2} (DSCP {want}).", tc=tc, dscp=dscp, context=ctx))
    return out


def _timeouts(values: dict[str, tuple[str, int]], path: str, options: NcclOptions,
              ctx: str, where: int | None) -> list[Finding]:
    out: list[Finding] = []
    timeout, retry = DEFAULT_IB_TIMEOUT, DEFAULT_IB_RETRY_CNT
    line: int | None = None  # the first timeout variable's line, else the container's
    for name, low, high in (("NCCL_IB_TIMEOUT", 0, 31), ("NCCL_IB_RETRY_CNT", 0, 7)):
        if name not in values:
            continue
        raw, at = values[name]
        number = _int(raw)
        if number is None or not low <= number <= high:
            out.append(finding(
                "NCCL008", path, at,
                f"{name}={raw[:20]} is outside {low}..{high}, the range the HCA accepts, so "
                "queue pair setup fails.",
                f"Set {name} between {low} and {high}.", variable=name, context=ctx))
            return out
        line = line or at
        if name == "NCCL_IB_TIMEOUT":
            timeout = number
        else:
            retry = number
    line = line or where
    if timeout == 0:
        return out  # 0 is an infinite timeout: nothing to compare
    per_try = IB_TIMEOUT_UNIT_S * 2 ** timeout
    budget = per_try * retry
    if options.resweep_s is None:
        if "NCCL_IB_TIMEOUT" in values or "NCCL_IB_RETRY_CNT" in values:
            out.append(finding(
                "NCCL010", path, line,
                f"The fabric's re-sweep time is unknown, so the {budget:.2f} s that "
                f"NCCL_IB_TIMEOUT={timeout} and NCCL_IB_RETRY_CNT={retry} tolerate was not "
                "checked.",
                "Pass --resweep-s (the longest heavy sweep seen) or keep the ledger running.",
                context=ctx))
        return out
    if budget < options.resweep_s:
        tries = retry or 7  # no retries at all: the fix starts with NCCL's default of 7
        needed = timeout
        while IB_TIMEOUT_UNIT_S * 2 ** needed * tries < options.resweep_s and needed < 31:
            needed += 1
        if retry == 0:
            fix = ("Set NCCL_IB_RETRY_CNT to 7 (NCCL's default; 0 gives up at the first "
                   "timeout)" + (f" and NCCL_IB_TIMEOUT to {needed}." if needed > timeout
                                 else "."))
        else:
            fix = f"Raise NCCL_IB_TIMEOUT to {needed} (or NCCL_IB_RETRY_CNT towards 7)."
        out.append(finding(
            "NCCL007", path, line,
            f"NCCL_IB_TIMEOUT={timeout} x NCCL_IB_RETRY_CNT={retry} gives up after "
            f"{budget:.2f} s, less than the fabric's {options.resweep_s:g} s re-sweep "
            f"({options.resweep_source}), so a link flap that triggers a sweep kills the job.",
            fix, budget_s=round(budget, 3), resweep_s=options.resweep_s, context=ctx))
    return out
