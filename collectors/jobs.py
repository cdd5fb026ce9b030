"""Where jobs run: Slurm's ``squeue --json`` and host lists as ``job`` placements.

``expand_hostlist`` reads Slurm's compressed host lists the way ``scontrol show hostnames``
expands them: ``node[001-004,010]`` is five hosts, a zero-padded bound keeps its width,
several bracket groups in one name multiply out (``r[1-2]n[1-2]`` is r1n1, r1n2, r2n1,
r2n2), and commas outside brackets separate names.

``parse_squeue_json`` reads a saved ``squeue --json`` (the data_parser output; the same
document ``slurmrestd``'s ``/slurm/vX/jobs`` returns). Across Slurm releases its fields
change shape, and both shapes are read:

* numbers and times are plain integers up to data_parser v0.0.39 (Slurm 23.02; 0 = unset)
  and ``{"set": bool, "infinite": bool, "number": n}`` objects from v0.0.40 (Slurm 23.11);
* ``job_state`` is a string up to v0.0.39 and a list of flags (the base state first) after.

A job without nodes (pending) places nothing and is counted in a note.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from collectors.common import guarded, stable_id
from collectors.errors import ParseError
from schemas import JobPlacement

MAX_HOSTS = 1_000_000  # a host list that expands past this is refused, not expanded
MAX_HOSTLIST_CHARS = 1 << 20
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
# gres/gpu:8, gres/gpu:h100:8, gres:gpu:8, gpu:h100:8(IDX:0-7): the count is the last field.
_GPU_PER_NODE = re.compile(r"(?:^|[,/ ]|gres:)gpu(?::[A-Za-z0-9_.-]+)?:(\d+)(?=$|[,(])")
_GPU_ALLOC = re.compile(r"(?:^|,)gres/gpu=(\d+)(?=$|,)")


def _fail(reason: str) -> ParseError:
    return ParseError(None, None, reason)


def _split_top(text: str) -> list[str]:
    """``text`` split at commas outside brackets; unbalanced brackets are an error."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise _fail(f"host list {text[:80]!r}: '[' inside brackets at column {i + 1}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise _fail(f"host list {text[:80]!r}: ']' without '[' at column {i + 1}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise _fail(f"host list {text[:80]!r}: '[' is never closed")
    parts.append(text[start:])
    return parts


def _ranges(body: str, whole: str) -> list[str]:
    """The numbers of one bracket group as strings, zero-padded as the bounds are."""
    out: list[str] = []
    for item in body.split(","):
        m = _RANGE.match(item.strip())
        if m is None:
            raise _fail(f"host list {whole[:80]!r}: {item[:40]!r} is not a number or a "
                        "range lo-hi")
        lo_text, hi_text = m.group(1), m.group(2)
        lo = int(lo_text)
        hi = int(hi_text) if hi_text is not None else lo
        if hi < lo:
            raise _fail(f"host list {whole[:80]!r}: range {item.strip()!r} runs backwards")
        if hi - lo + 1 > MAX_HOSTS:
            raise _fail(f"host list {whole[:80]!r}: range {item.strip()!r} is more than "
                        f"{MAX_HOSTS:,} hosts")
        # Slurm keeps the lower bound's width when it is zero-padded (node[08-10]).
        width = len(lo_text) if lo_text.startswith("0") and len(lo_text) > 1 else 0
        out.extend(str(n).zfill(width) for n in range(lo, hi + 1))
        if len(out) > MAX_HOSTS:
            raise _fail(f"host list {whole[:80]!r} expands to more than {MAX_HOSTS:,} hosts")
    return out


def _expand_name(name: str, whole: str) -> list[str]:
    """One comma-free name with any number of bracket groups, multiplied out in order."""
    results = [""]
    rest = name
    while rest:
        open_at = rest.find("[")
        if open_at < 0:
            results = [r + rest for r in results]
            break
        close_at = rest.index("]", open_at)  # balanced: _split_top checked
        prefix, body, rest = rest[:open_at], rest[open_at + 1:close_at], rest[close_at + 1:]
        numbers = _ranges(body, whole)
        if len(results) * len(numbers) > MAX_HOSTS:
            raise _fail(f"host list {whole[:80]!r} expands to more than {MAX_HOSTS:,} hosts")
        results = [r + prefix + n for r in results for n in numbers]
    return results


def expand_hostlist(text: str) -> list[str]:
    """The host names of a Slurm host list, in order, duplicates kept once (first wins)."""
    if len(text) > MAX_HOSTLIST_CHARS:
        raise _fail(f"host list is {len(text):,} characters, more than {MAX_HOSTLIST_CHARS:,}")
    text = text.strip()
    if not text:
        return []
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise _fail(f"host list {text[:80]!r} contains whitespace or a control character")
    hosts: dict[str, None] = {}
    for part in _split_top(text):
        if not part:
            raise _fail(f"host list {text[:80]!r} has an empty name (',,' or a trailing ',')")
        for host in _expand_name(part, text):
            hosts.setdefault(host, None)
            if len(hosts) > MAX_HOSTS:
                raise _fail(f"host list {text[:80]!r} expands to more than {MAX_HOSTS:,} hosts")
    return list(hosts)


# ---- squeue --json -------------------------------------------------------------------------


def slurm_number(value: Any, what: str) -> int | None:
    """A Slurm integer field in either shape; None when unset or infinite."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise _fail(f"{what} is a boolean, not a number")
    if isinstance(value, int):
        if value < 0:
            raise _fail(f"{what} {value} is negative")
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, Mapping):
        if not value.get("set", False) or value.get("infinite", False):
            return None
        return slurm_number(value.get("number"), what)
    raise _fail(f"{what} is {type(value).__name__}, not a number or a "
                "{set, infinite, number} object")


def _time_ms(value: Any, what: str) -> int | None:
    seconds = slurm_number(value, what)
    return None if not seconds else seconds * 1000  # 0 = not set in the older shape


def _state(value: Any, job: str) -> str:
    if isinstance(value, str) and value:
        return value.lower()
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return str(value[0]).lower()  # the base state; the rest are flags (COMPLETING, ...)
    raise _fail(f"job {job}: job_state {str(value)[:40]!r} is neither a state nor a list")


def _nodes_text(job: Mapping[str, Any], job_id: str) -> str:
    nodes = job.get("nodes")
    if isinstance(nodes, str):
        return nodes
    resources = job.get("job_resources")
    if nodes is None and isinstance(resources, Mapping):
        inner = resources.get("nodes")
        if isinstance(inner, str):
            return inner
        if isinstance(inner, Mapping) and isinstance(inner.get("list"), str):
            return str(inner["list"])  # data_parser v0.0.41+: {"count", "list", ...}
        if inner is None:
            return ""
    if nodes is None:
        return ""
    raise _fail(f"job {job_id}: nodes is {type(nodes).__name__}, not a host list")


def gpus_per_node(job: Mapping[str, Any], node_count: int) -> int | None:
    """GPUs per node from the request (``tres_per_node``, ``gres_detail``) or the allocation."""
    per_node = job.get("tres_per_node")
    if isinstance(per_node, str) and (m := _GPU_PER_NODE.search(per_node)):
        return int(m.group(1))
    detail = job.get("gres_detail")
    if isinstance(detail, list) and detail:
        counts = {int(m.group(1)) for d in detail if isinstance(d, str)
                  and (m := _GPU_PER_NODE.search(d))}
        if len(counts) == 1:
            return counts.pop()
    alloc = job.get("tres_alloc_str")
    if isinstance(alloc, str) and node_count and (m := _GPU_ALLOC.search(alloc)):
        total = int(m.group(1))
        if total % node_count == 0:
            return total // node_count
    return None


@guarded
def parse_squeue_json(text: str, *, fabric: str, ts: int,
                      notes: list[str] | None = None) -> list[JobPlacement]:
    """One ``job`` placement per job of a saved ``squeue --json`` that has nodes."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ParseError(None, getattr(exc, "lineno", None), f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise _fail("not squeue --json output: no top-level 'jobs' list")
    errors = doc.get("errors")
    if isinstance(errors, list) and errors and not doc["jobs"]:
        first = errors[0]
        said = first.get("description") or first.get("error") if isinstance(first, dict) \
            else first
        raise _fail(f"squeue reported an error and no jobs: {str(said)[:200]}")
    when = _time_ms(doc.get("last_update"), "last_update") or ts
    out: list[JobPlacement] = []
    pending = 0
    for index, job in enumerate(doc["jobs"]):
        if not isinstance(job, dict):
            raise _fail(f"jobs[{index}] is not an object")
        raw_id = job.get("job_id")
        if isinstance(raw_id, bool) or not isinstance(raw_id, int | str) or raw_id == "":
            raise _fail(f"jobs[{index}]: job_id {str(raw_id)[:40]!r} is missing or not an id")
        job_id = str(raw_id)
        nodes = expand_hostlist(_nodes_text(job, job_id))
        state = _state(job.get("job_state"), job_id)
        if not nodes:
            pending += 1
            continue
        start = _time_ms(job.get("start_time"), f"job {job_id} start_time")
        end = _time_ms(job.get("end_time"), f"job {job_id} end_time")
        if start is not None and end is not None and end < start:
            end = None  # a running job whose limit Slurm does not know yet
        name = job.get("name") if isinstance(job.get("name"), str) else None
        gpus = gpus_per_node(job, len(nodes))
        ident = stable_id("slurm", fabric, job_id, start, end, state, ",".join(nodes), gpus)
        out.append(JobPlacement(id=ident, ts=when, fabric=fabric, source="slurm", job=job_id,
                                nodes=nodes, start=start, end=end, gpus_per_node=gpus,
                                state=state, name=name))
    if pending and notes is not None:
        notes.append(f"{pending} job(s) without nodes (pending) place nothing")
    return out
