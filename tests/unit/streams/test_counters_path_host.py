"""A host agent's message through the worker's counters path: its columnar form gives the
same states, counter downs and detections as its rows (the row parts replay applies)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.counters_intervals import CountersHarness
from schemas import CounterColumns, Counters, PortSample, columns_wire, decode
from streams.counters.agent import CountersPath
from streams.stale.agent import StaleObserver

BASE = 1_700_000_000_000


def host_round(host: str, seq: int, bad: bool, downs: int) -> Counters:
    """One round of a host of 4 HCAs, a vendor counter the contract does not know on each."""
    return Counters.model_validate({
        "id": f"{host}/{seq}", "ts": BASE + seq * 1000, "fabric": "lab",
        "source": "host_agent", "device": host, "ports": [
            {"port": 1, "device": f"{host}/mlx5_{i}",
             "symbol_errors": seq * 500 if bad and i == 0 else 0,
             "link_downed": downs if i == 1 else 0, "rcv_errors": 0,
             "xmit_wait": 1000 + seq * 10, "port_xmit_data": seq * 1_000_000,
             "vendor_np_cnp_sent": seq if i == 2 else None}
            for i in range(4)]})


def run(messages: list[bytes]) -> tuple[list[str], list[bytes], dict[bytes, Any], Any]:
    worker = CountersHarness()
    table: dict[bytes, bytes] = {}
    stale: dict[bytes, bytes] = {}
    path = CountersPath(worker, table)  # type: ignore[arg-type]  # the parts it uses
    observer = StaleObserver(worker, stale)  # type: ignore[arg-type]
    worker.counters_observers.append(observer.observe)

    async def go() -> None:
        for raw in messages:
            msg = decode(raw)
            assert isinstance(msg, Counters | CounterColumns)
            await path.process(msg, 0, [])

    asyncio.run(go())
    states = {k: orjson.loads(v) for k, v in table.items()}
    published = [d.model_dump_json() for d in worker.published]
    return published, worker.counter_downs.sent, states, observer.scopes


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 2)), min_size=2, max_size=14))
@settings(max_examples=40, deadline=None)
def test_a_columnar_host_message_is_applied_as_its_rows(rounds: list[tuple[bool, int]]) -> None:
    total = 0
    rows: list[bytes] = []
    for seq, (bad, more) in enumerate(rounds):
        total += more
        for host in ("node01", "node02"):
            rows.append(orjson.dumps(host_round(host, seq, bad, total).model_dump(
                mode="json", exclude_none=True)))
    columns = [orjson.dumps(columns_wire(orjson.loads(r))) for r in rows]
    assert isinstance(decode(columns[0]), CounterColumns)
    assert decode(columns[0]).names_devices()  # type: ignore[union-attr]
    assert run(columns) == run(rows)


def test_the_fixed_host_rounds_detect_and_count_downs_in_both_forms() -> None:
    rows: list[bytes] = []
    total = 0
    for seq in range(14):
        total += 1 if seq % 3 == 0 else 0
        for host in ("node01", "node02"):
            rows.append(orjson.dumps(host_round(host, seq, True, total).model_dump(
                mode="json", exclude_none=True)))
    published, downs, states, _ = run(rows)
    kinds = sorted({orjson.loads(p)["detection"] for p in published})
    assert kinds == ["ber", "error_rate"] and len(downs) == 8 and len(states) == 8
    assert run([orjson.dumps(columns_wire(orjson.loads(r))) for r in rows])[:3] == (
        published, downs, states)


def test_a_message_without_per_port_devices_keeps_the_column_path() -> None:
    plain = Counters(id="s/1", ts=BASE, fabric="lab", source="gnmi", device="leaf1",
                     ports=[PortSample(port=p, symbol_errors=0) for p in (1, 2)])
    msg = decode(orjson.dumps(columns_wire(plain.model_dump(mode="json", exclude_none=True))))
    assert isinstance(msg, CounterColumns) and not msg.names_devices()
    worker = CountersHarness()
    path = CountersPath(worker, {})  # type: ignore[arg-type]
    asyncio.run(path.process(msg, 0, []))
    assert list(path.views.values()) and all(v is not None for v in path.views.values())


@st.composite
def host_rounds(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Rounds of two hosts whose HCAs mostly stay quiet, with what sends one the per-sample
    way: errors counting, a down, a register at its maximum (``counter_bits``), a lane
    trained narrower, a port that could not be read, an HCA missing a round or new, a
    round sent again (a redelivery) or not newer than the last."""
    out: list[dict[str, Any]] = []
    totals: dict[tuple[str, int], dict[str, int]] = {}
    for seq in range(draw(st.integers(2, 16))):
        for host in ("node01", "node02"):
            if draw(st.integers(0, 7)) == 0 and out:
                out.append(out[-1])  # the last round again, as a redelivery brings it
                continue
            ports = []
            for i in range(draw(st.sampled_from([3, 4, 4, 4, 5]))):
                if draw(st.integers(0, 9)) == 0:
                    continue  # this HCA missing this round
                t = totals.setdefault((host, i), {"sym": 0, "down": 0, "wait": 1000})
                event = draw(st.sampled_from(["quiet"] * 8 + ["errors", "down", "saturated",
                                                               "narrow", "unread"]))
                t["sym"] += 40 if event == "errors" else 0
                t["down"] += 1 if event == "down" else 0
                t["wait"] += 10
                sample: dict[str, Any] = {
                    "port": 1, "device": f"{host}/mlx5_{i}", "symbol_errors": t["sym"],
                    "link_downed": t["down"], "rcv_errors": 0, "xmit_wait": t["wait"],
                    "excessive_buffer_overrun": 15 if event == "saturated" else 0,
                    "counter_bits": {"excessive_buffer_overrun": 4, "symbol_errors": 16},
                    "width": "2X" if event == "narrow" else "4X", "speed": "NDR",
                    "port_xmit_data": seq * 1_000_000, "vendor_np_cnp_sent": seq}
                if event == "unread":
                    sample = {"port": 1, "device": f"{host}/mlx5_{i}", "error": "read failed"}
                ports.append(sample)
            if not ports:
                continue
            back = draw(st.integers(0, 11)) == 0  # a clock that did not move on
            ts = BASE + max(0, seq - 1 if back else seq) * 20_000
            out.append({"id": f"{host}/{seq}", "ts": ts, "fabric": "lab",
                        "source": "host_agent", "kind": "counters", "device": host,
                        "ports": ports})
    return out


@given(host_rounds())
@settings(max_examples=120, deadline=None)
def test_quiet_hcas_stamped_together_give_what_their_row_parts_give(
        rounds: list[dict[str, Any]]) -> None:
    rows = [orjson.dumps(Counters.model_validate(r).model_dump(mode="json", exclude_none=True))
            for r in rounds]
    columns = [orjson.dumps(columns_wire(orjson.loads(r))) for r in rows]
    assert run(columns) == run(rows)
