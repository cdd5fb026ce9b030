"""sim.exporter: the simulator's counters in the text exposition an InfiniBand exporter
serves, parsed back by prometheus_client's own parser (every port, every family, the values
of ``Simulator.cnt``), and served over HTTP on loopback."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from schemas.events import COUNTER_FIELDS
from sim.exporter import FAMILIES, Exporter, family, render
from sim.faults import Fault
from sim.telemetry import Simulator
from sim.topology import generate

START = 1_790_000_000_000
LAB = generate("lab")
LDN = COUNTER_FIELDS.index("link_downed")


def parsed(body: bytes) -> dict[tuple[str, str, int], float]:
    """(family, device, port) -> value."""
    out: dict[tuple[str, str, int], float] = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            device = s.labels.get("switch") or s.labels["hca"]
            key = (s.name, device, int(s.labels["port"]))
            assert key not in out, key
            out[key] = s.value
    return out


def test_every_port_and_family_carries_the_simulators_counters() -> None:
    leaf = next(x for x in LAB.links if x.tier == "host")
    flaps = [Fault(kind="flap", device=leaf.b_device, port=leaf.b_port, at_ms=at, down_ms=500,
                   every_ms=10**9) for at in (2_000, 5_000, 9_000)]  # one bounce each here
    sim = Simulator(LAB, faults=flaps, start_ms=START, interval_s=1.0, probe_every=0)
    sim.run_steps(12)
    got = parsed(render(sim))
    assert len(got) == len(sim.p_dev) * len(FAMILIES)
    for pi, device in enumerate(sim.p_dev):
        kind = "hca" if sim.p_hca[pi] else "switch"
        for field, counter, _help in FAMILIES:
            value = got[(family(kind, counter), device, sim.p_port[pi])]
            assert value == sim.cnt[pi][COUNTER_FIELDS.index(field)]
    # three bounces of the cable: three downs on both ends, nothing on the others
    assert got[(family("switch", "link_downed"), leaf.b_device, leaf.b_port)] == 3
    assert got[(family("hca", "link_downed"), leaf.a_device, leaf.a_port)] == 3
    downed = [k for k, v in got.items() if k[0].endswith("link_downed_total") and v]
    assert len(downed) == 2


def test_guid_labels_are_the_devices() -> None:
    sim = Simulator(LAB, start_ms=START, interval_s=1.0, probe_every=0)
    text = render(sim).decode()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            device = s.labels.get("switch") or s.labels["hca"]
            assert s.labels["guid"] == f"0x{LAB.device(device).guid:016x}"


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), min_size=8, max_size=8))
def test_any_counter_value_renders_exactly(values: list[int]) -> None:
    sim = Simulator(LAB, start_ms=START, interval_s=1.0, probe_every=0)
    for i, (field, _c, _h) in enumerate(FAMILIES):
        sim.cnt[0][COUNTER_FIELDS.index(field)] = values[i]
    text = render(sim).decode()
    kind = "hca" if sim.p_hca[0] else "switch"
    for i, (_field, counter, _h) in enumerate(FAMILIES):
        label = "hca" if kind == "hca" else "switch"
        line = next(x for x in text.splitlines() if x.startswith(family(kind, counter) + "{")
                    and f'{label}="{sim.p_dev[0]}"' in x and f'port="{sim.p_port[0]}"' in x)
        assert int(line.rsplit(" ", 1)[1]) == values[i]


def test_served_on_loopback() -> None:
    sim = Simulator(LAB, start_ms=START, interval_s=1.0, probe_every=0)
    exporter = Exporter().start()
    try:
        exporter.update(sim)
        with urllib.request.urlopen(exporter.url, timeout=5) as resp:  # noqa: S310
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            body = resp.read()
        assert body == render(sim)
        sim.cnt[0][LDN] += 1
        exporter.update(sim)
        with urllib.request.urlopen(exporter.url, timeout=5) as resp:  # noqa: S310
            assert parsed(resp.read()) != parsed(body)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(exporter.url.replace("/metrics", "/other"), timeout=5)  # noqa: S310
        assert err.value.code == 404
        err.value.close()
        assert exporter.scrapes == 2
    finally:
        exporter.stop()
