"""The pure event -> row mapping."""

from __future__ import annotations

import base64

import orjson
import pytest

from ledger.base import encode_rows
from ledger.rows import (
    RAW_COUNTER_COLUMNS,
    counter_rows,
    dead_letter_id,
    switch_location,
    to_rows,
)
from schemas import (
    COUNTER_FIELDS,
    Action,
    ActionRecord,
    ContractError,
    Counters,
    Detection,
    DetectionKind,
    EvidenceRecord,
    PortEvent,
    PortSample,
    Probe,
    Severity,
    Topology,
    TopologyLink,
    dead_letter,
)

TS = 1_790_000_000_123


def test_port_event_row_keeps_every_field_and_ms_precision() -> None:
    ev = PortEvent(id="e1", ts=TS, fabric="f", source="opensm", device="leaf-su01-r3",
                   port=7, state="down", trap=128, phys_state="Polling", reason="x")
    [(table, row)] = to_rows(ev)
    assert table == "port_events"
    assert row == {"id": "e1", "ts": TS / 1000, "fabric": "f", "source": "opensm",
                   "device": "leaf-su01-r3", "port": 7, "state": "down", "trap": 128,
                   "phys_state": "Polling", "reason": "x"}
    # The float the engine parses must carry the exact milliseconds.
    assert orjson.dumps(row["ts"]) == b"1790000000.123"


def test_counters_explode_one_row_per_port_with_nulls_kept() -> None:
    ev = Counters(id="c1", ts=TS, fabric="f", source="perfquery", device="leaf-su01-r3",
                  ports=[PortSample(port=1, symbol_errors=5, width="4X", speed="NDR",
                                    optic_serial="MT123"),  # type: ignore[call-arg]
                         PortSample(port=2, raw_ber=1e-9)])
    rows = to_rows(ev)
    assert [t for t, _ in rows] == ["counter_ingest", "counter_ingest"]
    first, second = (r for _, r in rows)
    assert list(first) == list(RAW_COUNTER_COLUMNS)
    assert first["symbol_errors"] == 5 and first["rcv_errors"] is None
    assert first["optic_serial"] == "MT123" and second["optic_serial"] is None
    assert second["raw_ber"] == 1e-9 and second["width"] is None
    assert all(first[c] is None for c in COUNTER_FIELDS if c != "symbol_errors")
    assert counter_rows(ev) == [r for _, r in rows]


def test_topology_rows_both_ends_and_locations() -> None:
    links = [TopologyLink(a_device="leaf-su02-r5", a_port=1, b_device="node2001/mlx5_5",
                          b_port=1, width="4X", speed="NDR"),
             TopologyLink(a_device="leaf-su02-r5", a_port=33, b_device="spine-05", b_port=2)]
    rows = to_rows(Topology(id="t1", ts=TS, fabric="f", source="ibnetdiscover", links=links))
    tables = [t for t, _ in rows]
    assert tables.count("topology_snapshots") == 1
    assert tables.count("topology_links") == 4
    ends = {(r["device"], r["port"]): (r["peer_device"], r["peer_port"])
            for t, r in rows if t == "topology_links"}
    assert ends[("node2001/mlx5_5", 1)] == ("leaf-su02-r5", 1)
    assert ends[("leaf-su02-r5", 1)] == ("node2001/mlx5_5", 1)
    locations = {r["device"]: (r["su"], r["rail"]) for t, r in rows if t == "device_location"}
    # The HCA inherits its leaf's place; the spine has no SU / rail in its name.
    assert locations == {"leaf-su02-r5": (2, 5), "node2001/mlx5_5": (2, 5)}


@pytest.mark.parametrize(("name", "expected"), [
    ("leaf-su01-r3", (1, 3)), ("leaf-su12-r0", (12, 0)), ("LEAF_SU3_RAIL7", (3, 7)),
    ("spine-05", (None, None)), ("core-a", (None, None)), ("su01-leaf", (1, None)),
])
def test_switch_location(name: str, expected: tuple[int | None, int | None]) -> None:
    assert switch_location(name) == expected


def test_detection_action_evidence_probe_rows() -> None:
    det = Detection(id="d1", ts=TS, fabric="f", source="streams", device="leaf-su01-r1", port=3,
                    detection=DetectionKind.FLAP, severity=Severity.CRITICAL,
                    action=Action.ISOLATE_PORT, evidence={"downs": 3}, episode="ep1")
    [(t, row)] = to_rows(det)
    assert t == "detections" and row["detection"] == "flap" and row["severity"] == "critical"
    assert orjson.loads(row["evidence"]) == {"downs": 3}
    act = ActionRecord(id="a1", ts=TS, fabric="f", source="fw", device="leaf-su01-r1", port=3,
                       workflow_id="remediate/f/leaf-su01-r1:3", step="isolate", actor="bob",
                       outcome="done", before={"isolated": False}, after=None, dry_run=True)
    [(t, row)] = to_rows(act)
    assert t == "actions" and row["dry_run"] == 1 and row["after"] is None
    assert orjson.loads(row["before"]) == {"isolated": False}
    evd = EvidenceRecord(id="v1", ts=TS, fabric="f", source="fw", device="d", port=1,
                         workflow_id="w", tool="mlxlink", output="out", exit_code=0)
    assert to_rows(evd)[0][0] == "evidence"
    probe = Probe(id="p1", ts=TS, fabric="f", source="probe", probe="ib_write_bw", src="a",
                  dst="b", rail=3, size_bytes=1 << 20, bw_gbps=380.5)
    assert to_rows(probe)[0][1]["baseline_gbps"] is None


def test_dead_letter_ids_are_stable() -> None:
    raw = b'{"kind": "nope"}'
    err = ContractError("unknown kind", "kind")
    with_coords = dead_letter(raw, err, source_topic="fabric.counters", partition=2, offset=9,
                              now_ms=TS)
    assert dead_letter_id(with_coords) == "fabric.counters/2/9"
    a = dead_letter(raw, err, now_ms=TS)
    b = dead_letter(raw, err, now_ms=TS + 5)
    assert dead_letter_id(a) == dead_letter_id(b)  # same bytes and reason: same letter
    [(t, row)] = to_rows(a)
    assert t == "dead_letters" and base64.b64decode(row["raw_b64"]) == raw


def test_encode_rows_is_a_json_array() -> None:
    rows = [{"a": 1, "b": None}, {"a": 2, "b": "x"}]
    assert orjson.loads(encode_rows(rows)) == rows


def test_sample_generations_one_sample_per_port_per_insert() -> None:
    from ledger.base import sample_generations

    def row(device: str, port: int, ts: float) -> tuple[object, ...]:
        return ("id", ts, "f", "src", device, port)

    rows = [row("a", 1, 3.0), row("a", 1, 1.0), row("b", 1, 1.0), row("a", 1, 2.0),
            row("a", 1, 1.0), row("a", 2, 1.0)]
    gens = sample_generations(rows)
    assert [[(r[4], r[5], r[1]) for r in g] for g in gens] == [
        [("a", 1, 1.0), ("b", 1, 1.0), ("a", 2, 1.0)], [("a", 1, 2.0)], [("a", 1, 3.0)]]
