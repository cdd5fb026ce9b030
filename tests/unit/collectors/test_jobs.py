"""Job placements from Slurm (squeue --json, host lists) and from Kubernetes pod lists."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.errors import ParseError
from collectors.formats import IngestOptions, parse_input
from collectors.jobs import expand_hostlist, parse_squeue_json, slurm_number
from collectors.k8s_jobs import core_api, list_pods, placements_from_pods
from schemas import JobPlacement, decode, encode

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
TS = 1_700_000_000_000


# ---- host lists ------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "hosts"), [
    ("node[001-004,010]", ["node001", "node002", "node003", "node004", "node010"]),
    ("cs75", ["cs75"]),
    ("node[8-11]", ["node8", "node9", "node10", "node11"]),
    ("node[08-11]", ["node08", "node09", "node10", "node11"]),
    ("node[098-101]", ["node098", "node099", "node100", "node101"]),
    ("gpu-a[1-2],gpu-b[01-02],login", ["gpu-a1", "gpu-a2", "gpu-b01", "gpu-b02", "login"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("node[1-2]-ib", ["node1-ib", "node2-ib"]),
    ("su01-node[0001-0002],su02-node[0033]", ["su01-node0001", "su01-node0002",
                                               "su02-node0033"]),
    ("a[1,1-2]", ["a1", "a2"]),
    ("", []),
])
def test_hostlists_expand_as_scontrol_show_hostnames(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(("text", "fragment"), [
    ("node[1-3", "never closed"),
    ("node1-3]", "without '['"),
    ("node[[1-2]]", "inside brackets"),
    ("node[3-1]", "backwards"),
    ("node[a-b]", "not a number"),
    ("node[]", "not a number"),
    ("a,,b", "empty name"),
    ("a b", "whitespace"),
    ("n[0-9999999]", "more than"),
    ("n[0-999]m[0-999]x[0-9]", "more than"),
])
def test_bad_hostlists_are_clear_errors(text: str, fragment: str) -> None:
    with pytest.raises(ParseError, match=fragment.replace("[", r"\[")):
        expand_hostlist(text)


_prefix = st.from_regex(r"[a-z][a-z0-9-]{0,6}", fullmatch=True).filter(
    lambda p: not p[-1].isdigit())
_range = st.tuples(st.integers(0, 500), st.integers(0, 20), st.integers(1, 4))


def _group(ranges: list[tuple[int, int, int]]) -> tuple[str, list[str]]:
    """A bracket body and the numbers it stands for, zero-padded to each range's width."""
    items, numbers = [], []
    for lo, span, width in ranges:
        hi = lo + span
        pad = width if width > len(str(lo)) else 0  # padding is only seen with a leading 0
        lo_text = str(lo).zfill(pad) if pad else str(lo)
        items.append(lo_text if span == 0 else f"{lo_text}-{hi}")
        numbers.extend(str(n).zfill(pad) if pad else str(n) for n in range(lo, hi + 1))
    return ",".join(items), numbers


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_prefix, st.lists(_range, min_size=1, max_size=3), _prefix |
                          st.just("")), min_size=1, max_size=4))
def test_hostlist_expansion_matches_the_ranges_it_was_built_from(
        names: list[tuple[str, list[tuple[int, int, int]], str]]) -> None:
    text_parts, expected = [], []
    for prefix, ranges, suffix in names:
        body, numbers = _group(ranges)
        text_parts.append(f"{prefix}[{body}]{suffix}")
        expected.extend(f"{prefix}{n}{suffix}" for n in numbers)
    assert expand_hostlist(",".join(text_parts)) == list(dict.fromkeys(expected))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.from_regex(r"[a-z][a-z0-9.-]{0,10}", fullmatch=True), min_size=1,
                max_size=10))
def test_plain_names_come_back_as_given(hosts: list[str]) -> None:
    assert expand_hostlist(",".join(hosts)) == list(dict.fromkeys(hosts))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab01-[],", max_size=30))
def test_any_text_expands_or_is_a_parse_error(text: str) -> None:
    try:
        hosts = expand_hostlist(text)
    except ParseError:
        return
    assert all(h and "[" not in h and "]" not in h and "," not in h for h in hosts)


# ---- squeue --json ---------------------------------------------------------------------------


def test_slurm_numbers_in_both_shapes() -> None:
    assert slurm_number(1684114921, "t") == 1684114921
    assert slurm_number({"set": True, "infinite": False, "number": 7}, "t") == 7
    assert slurm_number({"set": False, "infinite": False, "number": 0}, "t") is None
    assert slurm_number({"set": True, "infinite": True, "number": 0}, "t") is None
    with pytest.raises(ParseError, match="boolean"):
        slurm_number(True, "t")
    with pytest.raises(ParseError, match="negative"):
        slurm_number(-3, "t")


def test_squeue_json_of_slurm_21_08_plain_integers() -> None:
    notes: list[str] = []
    text = (FIXTURES / "slurm" / "squeue-21.08-openapi-v0.0.37.json").read_text()
    events = parse_squeue_json(text, fabric="f1", ts=TS, notes=notes)
    assert len(events) == 1  # the PENDING job has no nodes
    job = events[0]
    assert (job.job, job.nodes, job.state) == ("26515966", ["cs75"], "running")
    assert job.start == 1684114921 * 1000 and job.end == 1686633833 * 1000
    assert job.source == "slurm" and job.ts == TS and job.gpus_per_node is None
    assert notes == ["1 job(s) without nodes (pending) place nothing"]
    assert decode(encode(job)) == job


def test_squeue_json_of_slurm_23_11_number_objects() -> None:
    text = (FIXTURES / "slurm" / "slurmrestd-23.11-data_parser-v0.0.40-jobs.json").read_text()
    events = parse_squeue_json(text, fabric="f1", ts=TS)
    assert len(events) == 1
    job = events[0]
    assert (job.job, job.nodes, job.state, job.name) == ("6080221", ["cma2-02"], "running",
                                                         "archive")
    assert job.start == 1711534808 * 1000 and job.end == 1712226008 * 1000
    assert job.ts == 1711536388 * 1000  # the document's last_update, not the reading time
    # the same file twice makes the same ids: a re-ingest dedupes in the ledger
    assert [e.id for e in parse_squeue_json(text, fabric="f1", ts=TS + 5)] == [job.id]


def _job(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"job_id": 42, "job_state": ["RUNNING"],
                            "nodes": "gpu[001-004]", "name": "train",
                            "start_time": {"set": True, "infinite": False, "number": 1000},
                            "end_time": {"set": True, "infinite": False, "number": 5000}}
    base.update(over)
    return base


@pytest.mark.parametrize(("over", "gpus"), [
    ({"tres_per_node": "gres/gpu:8"}, 8),
    ({"tres_per_node": "gres/gpu:h100:4"}, 4),
    ({"tres_per_node": "gres:gpu:2"}, 2),
    ({"gres_detail": ["gpu:h100:8(IDX:0-7)"] * 4}, 8),
    ({"tres_alloc_str": "cpu=128,mem=1T,node=4,billing=128,gres/gpu=32"}, 8),
    ({"tres_alloc_str": "cpu=128,node=4,gres/gpu=30"}, None),  # not even per node
    ({}, None),
])
def test_gpus_per_node(over: dict[str, Any], gpus: int | None) -> None:
    doc = {"jobs": [_job(**over)]}
    (job,) = parse_squeue_json(orjson.dumps(doc).decode(), fabric="f", ts=TS)
    assert job.gpus_per_node == gpus
    assert job.nodes == ["gpu001", "gpu002", "gpu003", "gpu004"]


def test_squeue_job_resources_node_list_of_newer_parsers() -> None:
    job = _job()
    del job["nodes"]
    job["job_resources"] = {"nodes": {"count": 2, "list": "gpu[7-8]"}}
    (placement,) = parse_squeue_json(orjson.dumps({"jobs": [job]}).decode(), fabric="f", ts=TS)
    assert placement.nodes == ["gpu7", "gpu8"]


@pytest.mark.parametrize(("doc", "fragment"), [
    ("[1, 2]", "no top-level 'jobs'"),
    ('{"jobs": [1]}', "not an object"),
    ('{"jobs": [{"job_state": "RUNNING", "nodes": "a"}]}', "job_id"),
    ('{"jobs": [{"job_id": 1, "job_state": 5, "nodes": "a"}]}', "job_state"),
    ('{"jobs": [{"job_id": 1, "job_state": "RUNNING", "nodes": "a[1-"}]}', "never closed"),
    ('{"jobs": [{"job_id": 1, "job_state": "RUNNING", "nodes": "a", "start_time": "x"}]}',
     "start_time"),
    ('{"jobs": [], "errors": [{"description": "Unable to contact slurm controller"}]}',
     "Unable to contact"),
    ("{not json", "not JSON"),
])
def test_bad_squeue_json_is_a_clear_error(doc: str, fragment: str) -> None:
    with pytest.raises(ParseError, match=fragment):
        parse_squeue_json(doc, fabric="f", ts=TS)


def test_ingest_format_slurm_squeue() -> None:
    data = (FIXTURES / "slurm" / "squeue-21.08-openapi-v0.0.37.json").read_bytes()
    opts = IngestOptions(fabric="f9", ts=TS)
    events = parse_input("slurm-squeue", data, opts)
    assert [type(e) for e in events] == [JobPlacement]
    assert opts.notes


# ---- Kubernetes pods -------------------------------------------------------------------------


def _pod(name: str, node: str | None, phase: str, *, job: str = "llm-pretrain",
         gpus: str = "8", namespace: str = "training",
         finished: str | None = None) -> dict[str, Any]:
    """A Pod as the API returns it (core/v1 Pod: metadata, spec, status)."""
    status: dict[str, Any] = {"phase": phase, "startTime": "2026-11-30T22:00:00Z"}
    if finished:
        status["containerStatuses"] = [{"name": "trainer", "state": {"terminated": {
            "exitCode": 0, "finishedAt": finished, "startedAt": "2026-11-30T22:00:05Z"}}}]
    spec: dict[str, Any] = {"containers": [{"name": "trainer", "image": "trainer:1",
                                            "resources": {"limits": {"nvidia.com/gpu": gpus},
                                                          "requests": {"cpu": "32"}}}]}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"batch.kubernetes.io/job-name": job, "app": "trainer"},
                         "creationTimestamp": "2026-11-30T21:59:00Z"},
            "spec": spec, "status": status}


def _pod_list(*pods: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "12345"},
            "items": list(pods)}


LABEL = "batch.kubernetes.io/job-name"


def test_pods_of_a_job_become_its_placement() -> None:
    pods = _pod_list(_pod("llm-0", "node0001.cluster.local", "Running"),
                     _pod("llm-1", "node0002.cluster.local", "Running"),
                     _pod("llm-2", None, "Pending"),  # not scheduled: no node yet
                     _pod("other", "node0009", "Running", job="eval", gpus="2"),
                     {"metadata": {"name": "unlabelled", "labels": {}},
                      "spec": {"nodeName": "node0005"}, "status": {"phase": "Running"}})
    events = placements_from_pods(pods, job_label=LABEL, fabric="f", ts=TS)
    by_job = {e.job: e for e in events}
    assert set(by_job) == {"training/llm-pretrain", "training/eval"}
    llm = by_job["training/llm-pretrain"]
    assert llm.nodes == ["node0001", "node0002"] and llm.gpus_per_node == 8
    assert llm.state == "running" and llm.end is None and llm.source == "kubernetes"
    assert llm.start == 1796076000000
    assert by_job["training/eval"].gpus_per_node == 2


def test_finished_pods_give_the_job_its_end() -> None:
    pods = _pod_list(_pod("a", "node0001", "Succeeded", finished="2026-12-01T02:00:00Z"),
                     _pod("b", "node0002", "Succeeded", finished="2026-12-01T02:00:30Z"))
    (job,) = placements_from_pods(pods, job_label=LABEL, fabric="f", ts=TS)
    assert job.state == "completed" and job.end == 1796090430000


def test_bad_pod_lists_are_parse_errors() -> None:
    with pytest.raises(ParseError, match="PodList"):
        placements_from_pods({"kind": "Pod"}, job_label=LABEL, fabric="f", ts=TS)
    with pytest.raises(ParseError, match="whole number"):
        placements_from_pods(_pod_list(_pod("a", "n1", "Running", gpus="1.5")),
                             job_label=LABEL, fabric="f", ts=TS)
    with pytest.raises(ParseError, match="job-label"):
        parse_input("k8s-pods", orjson.dumps(_pod_list()), IngestOptions(fabric="f", ts=TS))
    # a time that is not RFC 3339 (hypothesis found one digit dropped from a start time)
    bad_start = _pod("a", "n1", "Running")
    bad_start["status"]["startTime"] = "2026011-30T22:00:00Z"
    with pytest.raises(ParseError, match="status.startTime"):
        placements_from_pods(_pod_list(bad_start), job_label=LABEL, fabric="f", ts=TS)
    with pytest.raises(ParseError, match="finishedAt"):
        placements_from_pods(_pod_list(_pod("a", "n1", "Succeeded", finished="yesterday")),
                             job_label=LABEL, fabric="f", ts=TS)


class _ApiServer(http.server.BaseHTTPRequestHandler):
    """The two pod-list endpoints of the Kubernetes API (GET /api/v1/pods and
    /api/v1/namespaces/NS/pods), answering with a PodList filtered by labelSelector."""

    pods: list[dict[str, Any]] = []
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        from urllib.parse import parse_qs, urlparse

        url = urlparse(self.path)
        self.seen.append(self.path)
        selector = parse_qs(url.query).get("labelSelector", [""])[0]
        parts = url.path.strip("/").split("/")
        namespace = parts[3] if len(parts) == 5 and parts[2] == "namespaces" else None
        items = [p for p in self.pods if (not selector or selector in p["metadata"]["labels"])
                 and (namespace is None or p["metadata"]["namespace"] == namespace)]
        body = orjson.dumps(_pod_list(*items))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


@pytest.fixture
def api_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ApiServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_official_client_lists_a_jobs_pods(api_server: str) -> None:
    _ApiServer.pods = [_pod("llm-0", "node0001", "Running"),
                       _pod("llm-1", "node0002", "Running", namespace="other")]
    _ApiServer.seen = []
    api = core_api(host=api_server)
    doc = list_pods(api, job_label=LABEL, namespace="training")
    assert _ApiServer.seen[-1].startswith("/api/v1/namespaces/training/pods?")
    assert "labelSelector=batch.kubernetes.io/job-name" in _ApiServer.seen[-1]
    (job,) = placements_from_pods(doc, job_label=LABEL, fabric="f", ts=TS)
    assert job.nodes == ["node0001"]
    everywhere = list_pods(api, job_label=LABEL)
    assert _ApiServer.seen[-1].startswith("/api/v1/pods?")
    jobs = placements_from_pods(everywhere, job_label=LABEL, fabric="f", ts=TS)
    assert sorted(j.job for j in jobs) == ["other/llm-pretrain", "training/llm-pretrain"]
    with pytest.raises(ValueError, match="label key"):
        list_pods(api, job_label="bad label")


def test_ingest_cli_prints_placements_and_refuses_bad_files(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from fabricwatch.commands.ingest import ingest

    runner = CliRunner()
    fixture = FIXTURES / "slurm" / "slurmrestd-23.11-data_parser-v0.0.40-jobs.json"
    result = runner.invoke(ingest, ["slurm-squeue", str(fixture), "--fabric", "f", "--print"])
    assert result.exit_code == 0, result.stderr
    (line,) = result.stdout.splitlines()
    event = decode(line)
    assert isinstance(event, JobPlacement) and event.nodes == ["cma2-02"]
    bad = tmp_path / "squeue.json"
    bad.write_text('{"jobs": [{"job_id": 1, "job_state": "RUNNING", "nodes": "n[2-1]"}]}')
    result = runner.invoke(ingest, ["slurm-squeue", str(bad), "--print"])
    assert result.exit_code == 2 and "runs backwards" in result.stderr
    pods = tmp_path / "pods.json"
    pods.write_bytes(orjson.dumps(_pod_list(_pod("p0", "node0001", "Running"))))
    result = runner.invoke(ingest, ["k8s-pods", str(pods), "--job-label", LABEL, "--print"])
    assert result.exit_code == 0 and decode(result.stdout.splitlines()[0]).job == (  # type: ignore[union-attr]
        "training/llm-pretrain")
    result = runner.invoke(ingest, ["k8s-pods", str(pods), "--print"])
    assert result.exit_code == 2 and "--job-label" in result.stderr
