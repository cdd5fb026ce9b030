"""SONiC ``show queue wredcounters`` (sonic-utilities scripts/wredstat) to per-queue marks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.errors import ParseError
from collectors.telemetry import parse_sonic_show

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
SAMPLES = Path(__file__).parent / "samples"
HEADER = ["Port", "TxQ", "WredDrp/pkts", "WredDrp/bytes", "EcnMarked/pkts", "EcnMarked/bytes"]


def render(port: str, rows: list[tuple[str, list[int | None]]], comma: bool) -> str:
    """One port's table as wredstat prints it: tabulate 'simple', right-aligned."""
    def cell(v: int | None) -> str:
        if v is None:
            return "N/A"
        return f"{v:,}" if comma else str(v)

    table = [[port, q, *(cell(v) for v in values)] for q, values in rows]
    widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(HEADER)]
    out = ["  ".join(h.rjust(w) for h, w in zip(HEADER, widths, strict=True)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in table]
    return "\n".join(out) + "\n\n"


def test_the_source_test_vector_parses_per_queue() -> None:
    text = (FIXTURES / "sonic" / "show-queue-wredcounters.txt").read_text()
    [event] = parse_sonic_show(text, fabric="lab", ts=1, device="sw")
    by_port = {s.port: s for s in event.ports}
    assert sorted(by_port) == [0, 4, 8]
    eth0 = by_port[0]
    extra = eth0.model_extra or {}
    # Ethernet0 UC3: 52 WRED drops, 19 ECN-marked packets; MC10 is not a priority's queue
    assert extra["ecn_marked_q3"] == 19 and extra["wred_uc3_drop_pkts"] == 52
    assert extra["wred_mc10_ecn_pkts"] == 74 and "ecn_marked_q10" not in extra
    assert extra["wred_all20_ecn_pkts"] is None
    # ecn_marked: every queue's marks (UC0-9 and MC10-19; ALL20-29 are N/A)
    assert eth0.ecn_marked == (0 + 39 + 39 + 19 + 12 + 35 + 2 + 94 + 95 + 93
                               + 74 + 61 + 82 + 89 + 95 + 66 + 48 + 77 + 56 + 12)


def test_pfc_and_wred_tables_merge_per_port() -> None:
    text = (SAMPLES / "sonic-roce-leaf-pfc-tx-and-wredcounters.txt").read_text()
    [event] = parse_sonic_show(text, fabric="lab", ts=1, device="leaf")
    eth4 = next(s for s in event.ports if s.port == 4)
    extra = eth4.model_extra or {}
    assert extra["pfc3_tx"] == 51_004 and extra["ecn_marked_q3"] == 0
    assert extra["ecn_marked_q4"] == 9_877 and eth4.ecn_marked == 9_877
    assert eth4.pfc_pause_tx == 51_004 + 9_120


def test_an_unknown_queue_name_is_refused_with_its_line() -> None:
    text = render("Ethernet0", [("XQ1", [0, 0, 0, 0])], comma=False)
    with pytest.raises(ParseError, match="XQ1"):
        parse_sonic_show(text, fabric="lab", ts=1, device="sw")
    short = render("Ethernet0", [("UC1", [0, 0, 0, 0])], comma=False).replace("UC1", "")
    with pytest.raises(ParseError, match="6 columns"):
        parse_sonic_show(short, fabric="lab", ts=1, device="sw")


counter = st.one_of(st.none(), st.integers(min_value=0, max_value=2**48))


@settings(max_examples=80, deadline=None)
@given(ports=st.dictionaries(st.integers(min_value=0, max_value=512),
                             st.dictionaries(st.tuples(st.sampled_from(["UC", "MC", "ALL"]),
                                                       st.integers(min_value=0, max_value=31)),
                                             st.lists(counter, min_size=4, max_size=4),
                                             min_size=1, max_size=6),
                             min_size=1, max_size=4),
       comma=st.booleans())
def test_rendered_tables_round_trip(ports: dict[int, dict[tuple[str, int], list[int | None]]],
                                    comma: bool) -> None:
    text = "".join(render(f"Ethernet{port}", [(f"{k}{i}", v) for (k, i), v in queues.items()],
                          comma) for port, queues in ports.items())
    [event] = parse_sonic_show(text, fabric="lab", ts=1, device="sw")
    got = {s.port: s for s in event.ports}
    assert sorted(got) == sorted(ports)
    for port, queues in ports.items():
        extra = got[port].model_extra or {}
        marks = []
        for (kind, index), (drops, _, ecn, _) in queues.items():
            assert extra[f"wred_{kind.lower()}{index}_drop_pkts"] == drops
            assert extra[f"wred_{kind.lower()}{index}_ecn_pkts"] == ecn
            if kind == "UC" and ecn is not None:
                assert extra[f"ecn_marked_q{index}"] == ecn
            if ecn is not None:
                marks.append(ecn)
        uc_marked = {i for (k, i), v in queues.items() if k == "UC" and v[2] is not None}
        assert {int(k[len("ecn_marked_q"):]) for k in extra
                if k.startswith("ecn_marked_q")} == uc_marked
        assert got[port].ecn_marked == (sum(marks) if marks else None)
