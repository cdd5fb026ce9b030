"""The format registry: every input format ``fabricwatch ingest`` knows, by name.

Each format is a pure function from decoded text and ``IngestOptions`` to contract events;
``decode_input`` turns raw bytes into text or a ``ParseError`` that names the line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo

from collectors import ibdiags, ibnetdiscover, jobs, k8s_jobs, probes, smlog, telemetry
from collectors.errors import ParseError
from collectors.lidmap import LidMap
from schemas.events import Event

MAX_INPUT_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class IngestOptions:
    """What the command line supplies where a tool's output lacks it."""

    fabric: str
    ts: int  # epoch ms, for outputs that carry no time of their own
    device: str | None = None
    port: int = 1
    tz: str | tzinfo | None = None
    year: int | None = None
    lids: LidMap | None = None
    rail: int = 0
    src: str | None = None
    dst: str | None = None
    baseline_gbps: float | None = None
    job_label: str | None = None  # the pod label whose value names a Kubernetes job
    # What a parser could not turn into events and why (the CLI prints them on stderr).
    notes: list[str] = field(default_factory=list)


def _need_device(opts: IngestOptions, what: str) -> str:
    if not opts.device:
        raise ParseError(None, None, f"{what} output does not name the device; give --device")
    return opts.device


def _need_tz(opts: IngestOptions, what: str) -> str | tzinfo:
    if opts.tz is None:
        raise ParseError(None, None, f"{what} timestamps are the SM host's local time without "
                                     "a zone; give --tz (an IANA zone such as UTC or "
                                     "Europe/Oslo)")
    return opts.tz


def _k8s_pods(text: str, o: IngestOptions) -> list[Event]:
    if not o.job_label:
        raise ParseError(None, None, "a pod list needs --job-label (the label whose value "
                                     "names the job, e.g. batch.kubernetes.io/job-name)")
    return list(k8s_jobs.parse_pod_list(text, job_label=o.job_label, fabric=o.fabric,
                                        ts=o.ts))


def _opensm(text: str, o: IngestOptions) -> list[Event]:
    zone = smlog.zone(_need_tz(o, "opensm log"))
    year = o.year or smlog.infer_year(text, now=datetime.fromtimestamp(o.ts / 1000, tz=zone))
    return _resolved(smlog.parse_opensm_log(text, fabric=o.fabric, tz=zone, year=year,
                                            lids=o.lids), o, "opensm log")


def _ufm_events(text: str, o: IngestOptions) -> list[Event]:
    return _resolved(smlog.parse_ufm_events(text, fabric=o.fabric,
                                            tz=_need_tz(o, "UFM event.log"), lids=o.lids),
                     o, "UFM event.log")


def _resolved(result: smlog.SmLogResult, o: IngestOptions, what: str) -> list[Event]:
    """The events, after saying which port-change lines could not be placed and why: without
    ``--topology`` that is an error (the option supplies the GUID/LID map), with it a note."""
    missing = result.unresolved
    if missing and o.lids is None:
        first = missing[0]
        raise ParseError(None, first.line, f"{len(missing)} {what} line(s) name ports by GUID "
                                           "or LID only; give --topology (ibnetdiscover output "
                                           f"of the fabric) to resolve them ({first.reason})")
    for item in missing[:20]:
        o.notes.append(f"line {item.line}: not placed: {item.reason}")
    if len(missing) > 20:
        o.notes.append(f"... and {len(missing) - 20} more lines not placed")
    return [*result.events, *result.sm_events]  # the SM's own events go to fabric.sm


@dataclass(frozen=True)
class Format:
    name: str
    summary: str
    parse: Callable[[str, IngestOptions], Sequence[Event]]


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("ibnetdiscover", "ibnetdiscover (default or -p) -> topology",
           lambda t, o: [ibnetdiscover.parse_ibnetdiscover(t, fabric=o.fabric, ts=o.ts)]),
    Format("perfquery", "perfquery, -x, -D, -E -> counters (--device, or --topology for LIDs)",
           lambda t, o: ibdiags.parse_perfquery(t, fabric=o.fabric, ts=o.ts, device=o.device,
                                                lids=o.lids)),
    Format("ibqueryerrors", "ibqueryerrors (-r, -c) -> counters of the ports listed",
           lambda t, o: ibdiags.parse_ibqueryerrors(t, fabric=o.fabric, ts=o.ts, lids=o.lids)),
    Format("iblinkinfo", "iblinkinfo (grouped, -l, -d) -> counters with width/speed/state",
           lambda t, o: ibdiags.parse_iblinkinfo(t, fabric=o.fabric, ts=o.ts, lids=o.lids)),
    Format("ibstat", "ibstat -> HCA port state, rate, LID (--device HOST)",
           lambda t, o: ibdiags.parse_ibstat(t, fabric=o.fabric, ts=o.ts, host=o.device)),
    Format("ibstatus", "ibstatus -> HCA port width/speed/state (--device HOST)",
           lambda t, o: ibdiags.parse_ibstatus(t, fabric=o.fabric, ts=o.ts, host=o.device)),
    Format("mlxlink", "mlxlink -m -c --json -> BER, FEC, module temperature and power "
           "(--device, --port)",
           lambda t, o: telemetry.parse_mlxlink(t, fabric=o.fabric, ts=o.ts,
                                                device=_need_device(o, "mlxlink"),
                                                port=o.port)),
    Format("opensm", "opensm log -> port events, and heavy sweeps / SM state / trap storms "
           "(--tz, --year, --topology)", _opensm),
    Format("sminfo", "sminfo -> the master SM's state (fabric.sm)",
           lambda t, o: [ibdiags.parse_sminfo(t, fabric=o.fabric, ts=o.ts)]),
    Format("saquery-sm", "saquery -s -> the standby SMs (fabric.sm)",
           lambda t, o: [ibdiags.parse_saquery_sms(t, fabric=o.fabric, ts=o.ts)]),
    Format("ufm-events", "UFM event.log -> port events (--tz, --topology)", _ufm_events),
    Format("ufm-telemetry", "UFM telemetry JSON -> counters",
           lambda t, o: telemetry.parse_ufm_telemetry(t, fabric=o.fabric, lids=o.lids)),
    Format("gnmic", "gnmic JSON (event, json, protojson) -> counters",
           lambda t, o: telemetry.parse_gnmic(t, fabric=o.fabric, device=o.device)),
    Format("ethtool", "ethtool -S of an mlx5 NIC -> counters (--device, --port)",
           lambda t, o: telemetry.parse_ethtool(t, fabric=o.fabric, ts=o.ts,
                                                device=_need_device(o, "ethtool -S"),
                                                port=o.port)),
    Format("sysfs", "/sys/class/infiniband dump (grep -r .) -> counters (--device HOST)",
           lambda t, o: telemetry.parse_sysfs_counters(t, fabric=o.fabric, ts=o.ts,
                                                       host=o.device)),
    Format("rdma-statistic", "rdma statistic -> counters (--device HOST)",
           lambda t, o: telemetry.parse_rdma_statistic(t, fabric=o.fabric, ts=o.ts,
                                                       host=o.device)),
    Format("sflowtool", "sflowtool text -> counters from interface counter samples",
           lambda t, o: telemetry.parse_sflowtool(t, fabric=o.fabric, device=o.device)),
    Format("sonic", "SONiC show pfc/queue/wred counters, pfcwd stats -> counters (--device)",
           lambda t, o: telemetry.parse_sonic_show(t, fabric=o.fabric, ts=o.ts,
                                                   device=_need_device(o, "SONiC show"))),
    Format("ib_write_bw", "perftest ib_write_bw -> probes (--rail, --src, --dst)",
           lambda t, o: probes.parse_ib_write_bw(t, fabric=o.fabric, ts=o.ts, rail=o.rail,
                                                 src=o.src, dst=o.dst, lids=o.lids,
                                                 baseline_gbps=o.baseline_gbps)),
    Format("nccl-tests", "nccl-tests all_reduce_perf -> probes (--rail)",
           lambda t, o: probes.parse_nccl_tests(t, fabric=o.fabric, ts=o.ts, rail=o.rail,
                                                src=o.src, dst=o.dst,
                                                baseline_gbps=o.baseline_gbps)),
    Format("slurm-squeue", "squeue --json (any data_parser version) -> job placements",
           lambda t, o: jobs.parse_squeue_json(t, fabric=o.fabric, ts=o.ts, notes=o.notes)),
    Format("k8s-pods", "kubectl get pods -o json (a PodList) -> job placements (--job-label)",
           _k8s_pods),
)}


def decode_input(data: bytes) -> str:
    """Raw input bytes as text; binary data and invalid UTF-8 raise ParseError with a line."""
    if len(data) > MAX_INPUT_BYTES:
        raise ParseError(None, None, f"input is {len(data)} bytes, more than the "
                                     f"{MAX_INPUT_BYTES} ingest reads")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ParseError(None, data.count(b"\n", 0, nul) + 1,
                         "NUL byte: binary data, not tool output")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")  # a BOM is no part of the output
    except UnicodeDecodeError as exc:
        raise ParseError(None, data.count(b"\n", 0, exc.start) + 1,
                         f"not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


def parse_input(fmt: str, data: bytes, opts: IngestOptions) -> list[Event]:
    """Decode and parse one input with the named format."""
    spec = FORMATS.get(fmt)
    if spec is None:
        raise ParseError(None, None, f"unknown format {fmt!r}; see 'fabricwatch ingest --list'")
    return list(spec.parse(decode_input(data), opts))
