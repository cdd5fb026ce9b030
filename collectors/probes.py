"""Active probe output to ``probe`` events: perftest ``ib_write_bw`` and nccl-tests.

Neither tool prints a timestamp, and neither knows the rail it tested: the caller gives
``ts`` and ``rail`` (the CLI's ``--ts``, ``--rail``). ``src`` / ``dst`` default to what the
output says (perftest: the local and remote LID, or device:port through a LidMap; nccl:
the first host and the list of hosts).

Units. perftest's ``BW average[MB/sec]`` is MiB/s (its MB is 2^20 bytes), so
``bw_gbps = MB/s * 2^20 * 8 / 1e9``; with ``--report_gbits`` the column is ``Gb/sec`` and is
taken as it is. nccl-tests ``busbw`` is GB/s with GB = 10^9 bytes, so ``bw_gbps = busbw *
8``; the out-of-place bus bandwidth is the probe value, the in-place one and ``#wrong`` are
kept as extra fields (``in_place_bw_gbps``, ``wrong``, ``in_place_wrong``, ``alg_bw_gbps``),
and so is ``ranks``, the number of ``# Rank`` lines (the run's scale) when it prints them.

A size measured twice in one file (perftest prints the server's and the client's report
of the same run) is reported once, first occurrence. nccl rows of size 0 carry no data and
are skipped.
"""

from __future__ import annotations

import re
from typing import Any

from collectors.common import guarded, lines, stable_id
from collectors.errors import ParseError
from collectors.lidmap import LidMap
from schemas import Probe

_PT_HEADER = re.compile(r"^#bytes\s+#iterations\s+BW peak\[(MB|Gb)/sec\]\s+"
                        r"BW average\[(MB|Gb)/sec\]")
_PT_ROW = re.compile(r"^(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
_PT_ADDR = re.compile(r"^(local|remote) address:\s*LID\s+(0x[0-9a-fA-F]+|\d+)")
_PT_GID = re.compile(r"^(local|remote) address:.*?GID:?\s*([0-9a-fA-F:.]+)")
_PT_DEVICE = re.compile(r"Device\s*:\s*(\S+)")
_PT_TITLE = re.compile(r"^\s*(RDMA_Write|RDMA_Read|Send|Atomic)\s+BW Test")
MIB = 1 << 20


def _lid_name(lid: int, lids: LidMap | None) -> str:
    if lids is not None:
        target = lids.by_lid(lid)
        if target is not None:
            return f"{target.device}:{target.port}" if target.port is not None else target.device
    return f"lid:{lid}"


@guarded
def parse_ib_write_bw(text: str, *, fabric: str, ts: int, rail: int = 0,
                      src: str | None = None, dst: str | None = None,
                      baseline_gbps: float | None = None, lids: LidMap | None = None,
                      source: str = "probe") -> list[Probe]:
    """perftest ``ib_write_bw`` output (one size or ``-a``) -> a probe per message size."""
    unit: str | None = None
    local: str | None = None
    remote: str | None = None
    hca: str | None = None
    rows: dict[int, tuple[int, float, float]] = {}
    saw_title = False
    for number, line in lines(text):
        stripped = line.strip()
        if not stripped:
            continue
        if _PT_TITLE.match(stripped):
            if not stripped.startswith("RDMA_Write"):
                raise ParseError(None, number, f"this is a {stripped.split()[0]} test, "
                                               "not ib_write_bw")
            saw_title = True
            continue
        device = _PT_DEVICE.search(stripped)
        if device and hca is None:
            hca = device.group(1)
        header = _PT_HEADER.match(stripped)
        if header:
            unit = header.group(2)
            continue
        addr = _PT_ADDR.match(stripped) or _PT_GID.match(stripped)
        if addr:
            value = addr.group(2)
            where = (_lid_name(int(value, 0), lids) if _PT_ADDR.match(stripped)
                     else f"gid:{value}")
            if addr.group(1) == "local" and local is None:
                local = where
            elif addr.group(1) == "remote" and remote is None:
                remote = where
            continue
        row = _PT_ROW.match(stripped)
        if row:
            if unit is None:
                raise ParseError(None, number, "a result row before the '#bytes ...' header")
            size = int(row.group(1))
            average = float(row.group(4))
            gbps = average * MIB * 8 / 1e9 if unit == "MB" else average
            rows.setdefault(size, (number, gbps, float(row.group(3))))
    if not saw_title and unit is None:
        raise ParseError(None, None, "not ib_write_bw output (no 'RDMA_Write BW Test' title "
                                     "and no '#bytes' header)")
    if not rows:
        raise ParseError(None, None, "ib_write_bw output has no result row (the test did "
                                     "not finish, or the output is truncated)")
    src_name = src or local or hca
    dst_name = dst or remote or src_name
    if not src_name or not dst_name:
        raise ParseError(None, None, "no local/remote address in the output; give --src and "
                                     "--dst")
    probes = []
    for size, (_number, gbps, _peak) in sorted(rows.items()):
        probes.append(Probe(
            id=stable_id("ib_write_bw", fabric, source, ts, src_name, dst_name, rail, size),
            ts=ts, fabric=fabric, source=source, probe="ib_write_bw", src=src_name,
            dst=dst_name, rail=rail, size_bytes=size, bw_gbps=round(gbps, 6),
            baseline_gbps=baseline_gbps, hca=hca))
    return probes


_NCCL_HEADER = re.compile(r"^#\s+size\s+count\s+type\s+redop\s+(root\s+)?time\s+algbw\s+busbw")
_NCCL_RANK = re.compile(r"^#\s+Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device")
_NCCL_TITLE = re.compile(r"^#\s+Collective test starting:\s+(\S+)")
_NCCL_ROW_START = re.compile(r"^\s*\d+\s+\d+\s+\S+\s+\S+\s")


def _float(value: str, number: int, what: str) -> float | None:
    if value.upper() == "N/A":
        return None
    try:
        return float(value)
    except ValueError:
        raise ParseError(None, number, f"{what} {value[:20]!r} is not a number") from None


@guarded
def parse_nccl_tests(text: str, *, fabric: str, ts: int, rail: int = 0,
                     src: str | None = None, dst: str | None = None,
                     baseline_gbps: float | None = None,
                     source: str = "probe") -> list[Probe]:
    """nccl-tests ``all_reduce_perf`` output (old and current formats) -> a probe per size."""
    has_root: bool | None = None
    hosts: list[str] = []
    ranks = 0
    rows: dict[int, dict[str, Any]] = {}
    for number, line in lines(text):
        stripped = line.strip()
        if not stripped:
            continue
        title = _NCCL_TITLE.match(stripped)
        if title and title.group(1) != "all_reduce_perf":
            raise ParseError(None, number, f"this is {title.group(1)}, not all_reduce_perf")
        rank = _NCCL_RANK.match(stripped)
        if rank:
            ranks += 1
            if rank.group(1) not in hosts:
                hosts.append(rank.group(1))
            continue
        header = _NCCL_HEADER.match(stripped)
        if header:
            has_root = header.group(1) is not None
            continue
        if stripped.startswith("#") or "NCCL INFO" in stripped or "NCCL WARN" in stripped:
            continue
        if has_root is None or not _NCCL_ROW_START.match(stripped):
            continue  # launcher noise before the table, MPI banners, etc.
        cells = stripped.split()
        width = 13 if has_root else 12
        if len(cells) != width:
            raise ParseError(None, number, f"a result row has {len(cells)} columns, expected "
                                           f"{width} (truncated line?)")
        size = int(cells[0])
        if size == 0 or size in rows:
            continue
        base = 5 if has_root else 4
        busbw = _float(cells[base + 2], number, "busbw")
        if busbw is None:
            raise ParseError(None, number, "busbw is N/A")
        algbw = _float(cells[base + 1], number, "algbw")
        in_place = _float(cells[base + 6], number, "in-place busbw")
        wrong = cells[base + 3]
        in_wrong = cells[base + 7]
        rows[size] = {
            "line": number, "bw": busbw * 8,
            "alg_bw_gbps": None if algbw is None else round(algbw * 8, 6),
            "in_place_bw_gbps": None if in_place is None else round(in_place * 8, 6),
            "wrong": int(wrong) if wrong.isdigit() else None,
            "in_place_wrong": int(in_wrong) if in_wrong.isdigit() else None,
        }
    if has_root is None:
        raise ParseError(None, None, "not nccl-tests output (no '#  size  count  type  redop "
                                     "... busbw' header)")
    if not rows:
        raise ParseError(None, None, "nccl-tests output has no result row")
    src_name = src or (hosts[0] if hosts else None)
    dst_name = dst or (",".join(hosts)[:512] if hosts else None)
    if not src_name or not dst_name:
        raise ParseError(None, None, "no '# Rank ... on HOST' lines; give --src and --dst")
    probes = []
    for size, row in sorted(rows.items()):
        extra = {k: v for k, v in row.items() if k not in ("bw", "line")}
        if ranks:
            extra["ranks"] = ranks  # the run's scale, part of its baseline's key
        probes.append(Probe(
            id=stable_id("nccl", fabric, source, ts, src_name, dst_name, rail, size),
            ts=ts, fabric=fabric, source=source, probe="nccl_allreduce", src=src_name,
            dst=dst_name, rail=rail, size_bytes=size, bw_gbps=round(row["bw"], 6),
            baseline_gbps=baseline_gbps, **extra))
    return probes
