"""The dispatcher takes messages through the same acceptance as the worker and the ledger:
a detection on the wrong topic, or stamped far ahead of its arrival, starts nothing."""

from __future__ import annotations

from typing import Any

from schemas import Detection, encode
from schemas.policy import Policy
from schemas.topics import DETECTIONS, TOPOLOGY
from workflows.dispatch import Dispatcher
from workflows.inventory import Inventory

NOW = 1_795_971_600_000


class NoTemporal:
    """Any call to Temporal fails the test: a refused message must not reach it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the dispatcher called Temporal ({name}) for a refused message")


def _dispatcher() -> Dispatcher:
    return Dispatcher(NoTemporal(), Policy(), Inventory(), task_queue="q")  # type: ignore[arg-type]


def _detection(ts: int) -> bytes:
    return encode(Detection(id=f"d{ts}", ts=ts, fabric="f", source="streams",
                            device="leaf-su01-r1", port=3, detection="flap",
                            severity="critical", action="isolate_port", episode=f"e{ts}"))


async def test_a_detection_on_the_topology_topic_starts_nothing() -> None:
    disp = _dispatcher()
    assert not await disp.handle_raw(_detection(NOW), TOPOLOGY, NOW)
    assert disp.stats.invalid == 1 and disp.stats.dispatched == 0


async def test_a_detection_stamped_a_day_ahead_of_its_arrival_starts_nothing() -> None:
    disp = _dispatcher()
    assert not await disp.handle_raw(_detection(NOW + 23 * 3600_000), DETECTIONS, NOW)
    assert disp.stats.invalid == 1 and disp.stats.dispatched == 0


def test_a_fresh_partition_skips_records_from_before_its_look_back() -> None:
    from workflows.dispatch import _LookbackForNewGroup

    lookback = _LookbackForNewGroup(consumer=None, lookback_ms=4000)
    lookback._since["detections-0"] = 10_000  # placed at record time 10 s
    assert lookback.before_start("detections-0", 9_999)
    assert not lookback.before_start("detections-0", 10_000)
    assert not lookback.before_start("detections-0", None)  # no broker time: not judged here
    assert not lookback.before_start("detections-1", 1)  # a partition that resumed its offsets


async def test_a_detection_of_an_incident_or_a_maintenance_window_starts_nothing() -> None:
    disp = _dispatcher()
    base = Detection(id="d-inc", ts=NOW, fabric="f", source="fabricwatch",
                     device="leaf-su01-r1", port=33, detection="flap", severity="critical",
                     action="isolate_port", episode="flap/leaf-su01-r1:33/1")
    member = base.model_copy(update={"incident": "inc/switch_reboot/spine-1/1"})
    assert not await disp.handle_raw(encode(member), DETECTIONS, NOW)
    windowed = base.model_copy(update={"id": "d-mw", "maintenance": "mw-1"})
    assert not await disp.handle_raw(encode(windowed), DETECTIONS, NOW)
    assert disp.stats.held == 2 and disp.stats.dispatched == 0 and disp.stats.invalid == 0


def test_a_fresh_partition_starts_at_its_first_recent_record_else_at_its_end_before_the_query(
) -> None:
    from aiokafka.structs import OffsetAndTimestamp  # type: ignore[import-untyped]

    from workflows.dispatch import start_offsets

    ends = {"d-0": 7, "d-1": 0, "d-2": 12}
    found = {"d-0": OffsetAndTimestamp(5, 10_000), "d-1": None,
             "d-2": OffsetAndTimestamp(13, 10_500)}  # records from 12 on came after the end query
    assert start_offsets(["d-0", "d-1", "d-2"], ends, found) == {"d-0": 5, "d-1": 0, "d-2": 12}
