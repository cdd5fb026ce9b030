"""Property tests: no input crashes a parser (only AuditInputError), secrets never leak."""

from __future__ import annotations

import time
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabricwatch.audit import (
    AuditInputError,
    K8sOptions,
    NcclOptions,
    audit_nccl,
    audit_opensm,
    audit_partitions,
    audit_roce,
    findings_to_detections,
    render,
)
from fabricwatch.audit.k8s import audit_manifest_text
from schemas import encode

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _tokens(*words: str) -> st.SearchStrategy[str]:
    """Text built from a grammar's own tokens, so the fuzzing reaches past the first check."""
    token = st.sampled_from(words) | st.text(max_size=6)
    line = st.lists(token, max_size=8).map("".join)
    return st.lists(line, max_size=12).map("\n".join)


OPENSM_TEXT = _tokens("m_key ", "sm_key ", "sa_key ", "0x", "1", "0", "ff", "(null)", " ",
                      "routing_engine ", "ftree", "sm_priority ", "qos ", "TRUE", "#",
                      "part_enforce ", "console ", "socket", "m_key_protection_level ")
PARTITION_TEXT = _tokens("Default", "=", "0x7fff", ",", ":", ";", "ALL", "SELF", "full",
                         "limited", "both", "ipoib", "mtu=", "5", "0x1000", "mgid=ff12::1",
                         "defmember=", "#", " ", "\n", "NONE", "0")
YAML_TEXT = _tokens("apiVersion: v1\n", "kind: Pod\n", "kind: ConfigMap\n", "metadata:\n",
                    "  namespace: x\n", "spec:\n", "  containers:\n", "  - name: a\n",
                    "    image: mofed:1\n", "privileged: true\n", "hostPath:\n", "path: ",
                    "/dev/infiniband", "---\n", "[", "]", "{", "}", "&a ", "*a", ": ", "- ",
                    "data:\n", "  k: /dev/infiniband/umad0\n", "env:\n", "value: ", "'", '"')
NCCL_TEXT = _tokens("NCCL_IB_TC=", "NCCL_IB_TIMEOUT=", "NCCL_IB_RETRY_CNT=",
                    "NCCL_SOCKET_IFNAME=", "NCCL_IB_HCA=", "=", "^", "ib0", "mlx5_1", ",",
                    "export ", "'", '"', "#", "106", "99999999999999999999", "-1", " ")
ROCE_TEXT = _tokens("PFC configuration:\n", "priority 0 1 2 3 4 5 6 7\n", "enabled ", "0 ",
                    "1 ", "Priority trust state: ", "dscp", "pcp", "prio:3 dscp:26,\n",
                    "trust: ", "mtu: ", "pfc:\n", "  priorities: [", "]", "  xoff_bytes: ",
                    "ecn:\n", "  min_threshold_bytes: ", "1e999", "nan", "-5", "\n",
                    "PORT_QOS_MAP:\n", "  E0: {pfc_enable: '", "3,4", "', dscp_to_tc_map: M}\n",
                    "  global: {dscp_to_tc_map: M}\n", "DSCP_TO_TC_MAP: {M: {'26': '3'}}\n",
                    "QUEUE:\n", "  E0|3-", "99999999999", ": {wred_profile: W}\n",
                    "WRED_PROFILE: {W: {ecn: ecn_all, green_min_threshold: ", "}}\n",
                    "BUFFER_PG:\n  E0|3: {profile: '[BUFFER_PROFILE|P]'}\n",
                    "BUFFER_PROFILE: {P: {xoff: ", "PFC_WD: {E0: {detection_time: 1}}\n",
                    "PORT: {E0: {mtu: ")


def _only_input_errors(call: Callable[[], object]) -> None:
    try:
        result = call()
    except AuditInputError as exc:
        assert str(exc)
        return
    findings = result[0] if isinstance(result, tuple) else result
    assert isinstance(findings, list)
    for fmt in ("text", "json", "sarif"):
        assert render(findings, fmt)
    for d in findings_to_detections(findings, fabric="lab", ts=int(time.time() * 1000)):
        encode(d)


@SETTINGS
@given(st.text(max_size=400) | OPENSM_TEXT)
def test_opensm_never_crashes(text: str) -> None:
    _only_input_errors(lambda: audit_opensm(text, "o.conf", fat_tree=True,
                                            plan_expects_qos=True))


@SETTINGS
@given(st.text(max_size=400) | PARTITION_TEXT)
def test_partitions_never_crash(text: str) -> None:
    _only_input_errors(lambda: audit_partitions(text, "p.conf"))


@SETTINGS
@given(st.text(max_size=400) | YAML_TEXT)
def test_k8s_never_crashes(text: str) -> None:
    options = K8sOptions(gpu_namespaces=frozenset({"x", "default"}),
                         approved_rdma_namespaces=frozenset({"y"}))
    _only_input_errors(lambda: audit_manifest_text(text, "m.yaml", options))


@SETTINGS
@given(st.text(max_size=400) | NCCL_TEXT | YAML_TEXT, st.sampled_from(["e.env", "p.yaml"]))
def test_nccl_never_crashes(text: str, name: str) -> None:
    options = NcclOptions(backend_hcas=("mlx5_0", "mlx5_10"), transport="roce", resweep_s=9.0)
    _only_input_errors(lambda: audit_nccl(text, name, options))


@SETTINGS
@given(st.text(max_size=400) | ROCE_TEXT)
def test_roce_never_crashes(text: str) -> None:
    _only_input_errors(lambda: audit_roce(text, "q.txt"))


KEY_NAMES = st.sampled_from(["m_key", "sm_key", "sa_key", "cc_key"])


@SETTINGS
@given(st.lists(st.tuples(KEY_NAMES, st.integers(min_value=2**40, max_value=2**64 - 1)),
                min_size=1, max_size=6),
       st.lists(st.sampled_from(["sweep_interval 10", "lmc", "bogus_key 1", "#c",
                                 "routing_engine minhop", "console socket"]), max_size=4))
def test_secrets_never_appear_in_output(keys: list[tuple[str, int]], other: list[str]) -> None:
    filler = ["lmc 0", "sm_sl 0", "subnet_prefix 0xfe80000000000000", "max_op_vls 5",
              "sweep_interval 10", "qos FALSE", "log_flags 0x03", "perfmgr FALSE"]
    lines = filler + [f"{name} 0x{value:016x}" for name, value in keys] + other
    # Reuse a value for a second key, repeat a key: the findings that mention keys fire.
    name, value = keys[0]
    lines += [f"{'sa_key' if name != 'sa_key' else 'm_key'} 0x{value:016x}",
              f"{name} {value}"]
    findings = audit_opensm("\n".join(lines) + "\n", "s.conf", fat_tree=True)
    outputs = [render(findings, fmt).lower() for fmt in ("text", "json", "sarif")]
    outputs.append(b"".join(encode(d) for d in findings_to_detections(
        findings, fabric="lab", ts=int(time.time() * 1000))).decode().lower())
    for _, secret in keys:
        for shown in (f"{secret:016x}", f"{secret:x}", str(secret), f"{secret:016x}"[:12]):
            assert all(shown not in out for out in outputs), shown
