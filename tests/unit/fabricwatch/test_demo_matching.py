"""The demo matches every detection against its scenario, however many arrive at once."""

from __future__ import annotations

from fabricwatch.demo.view import LiveState
from schemas import DetectionKind
from streams.common import make_detection


def test_a_burst_larger_than_the_shown_list_reaches_the_matcher_whole() -> None:
    live = LiveState()
    burst = [make_detection(kind=DetectionKind.SLOW_PROBE, fabric="f", device="leaf-1",
                            port=p, ts=1_700_000_000_000, action="ticket",
                            episode=f"e{p}", evidence={}) for p in range(1, 40)]
    for det in burst:
        live.add_detection(det)
    assert len(live.detections) == 12  # what the screen shows
    taken, live.unmatched = live.unmatched, []
    assert taken == burst  # what the scenario is matched against: all, in order
    live.add_detection(burst[0])
    assert live.unmatched == [burst[0]]


def test_the_flapping_link_is_proved_by_its_flap_or_by_a_probe_verdict_on_its_cable() -> None:
    # the cable may be isolated on the probes' verdict before the fault's third down, and
    # then no flap ever happens: the localised verdict on that cable proves it, nothing else
    from fabricwatch.demo.scenario import build_scenario

    scenario = build_scenario("su", short=True, fabric_name="f")
    flapping = next(e for e in scenario.expectations if e.label == "flapping link")
    device, port = sorted(flapping.ports)[0].rsplit(":", 1)

    def det(kind: DetectionKind, at: str = device, evidence: dict | None = None):  # type: ignore[no-untyped-def,type-arg]
        return make_detection(kind=kind, fabric="f", device=at, port=int(port),
                              ts=1_700_000_000_000, action="isolatePort", episode="e",
                              evidence=evidence or {})

    on_paths = {"localised": True, "by": "paths"}
    assert flapping.matches(det(DetectionKind.FLAP))
    assert flapping.matches(det(DetectionKind.SLOW_PROBE, evidence=on_paths))
    assert not flapping.matches(det(DetectionKind.SLOW_PROBE))  # an endpoint's ticket
    assert not flapping.matches(det(DetectionKind.SLOW_PROBE, at="leaf-su09-r9",
                                    evidence=on_paths))
    assert not flapping.matches(det(DetectionKind.BER, evidence=on_paths))
    others = [e for e in scenario.expectations if e.label != "flapping link"]
    assert all(e.or_localised is None for e in others)


def test_the_simulators_clock_is_the_one_the_demo_counts_fault_times_from(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A simulator left to pick its own start begins an interval before it got going; started
    # quickly that is before the demo's reference, and a caught SM failover or spine reboot
    # stamped "before the fault began" was counted as missed (a CI run timed out so). The demo
    # hands both simulators its start; the SM failover's trap, made by the real `sim run`
    # from the demo's own arguments, is counted.
    import datetime

    from click.testing import CliRunner

    from fabricwatch.cli import main
    from fabricwatch.demo.run import Demo, DemoOptions
    from runtime.settings import Settings
    from schemas import SmEvent, decode

    demo = Demo(Settings(state_dir=tmp_path), DemoOptions(preset="su", short=True, fabric="f",
                                                           live=False))
    argvs: dict[str, list[str]] = {}
    demo._child = lambda name, *args: argvs.setdefault(name, list(args))  # type: ignore[method-assign,assignment,misc]
    demo._alertmanager_args = list  # type: ignore[method-assign]  # nothing started here
    demo._start_children()
    starts = {name: argv[argv.index("--start") + 1] for name, argv in argvs.items()
              if name.startswith("sim-")}
    assert set(starts) == {"sim-ib", "sim-roce"} and len(set(starts.values())) == 1
    start_ms = datetime.datetime.fromisoformat(starts["sim-ib"]).timestamp() * 1000
    assert start_ms == demo._sim_start_ms <= demo._children_started * 1000

    failover = next(e for e in demo.scenario.expectations if e.label == "SM failover")
    argv = argvs["sim-ib"]
    run = [a for a in argv if a not in ("--state-dir", str(tmp_path / "sim"))]
    result = CliRunner().invoke(main, [*run, "--state-dir", str(tmp_path / "sim"), "--print",
                                       "--duration", "40s", "--speedup", "0",
                                       "--probe-every", "0", "--topology-every", "0"])
    assert result.exit_code == 0, result.output
    took = [e for e in (decode(line.encode()) for line in result.stdout.splitlines()
                        if line.startswith("{") and '"sm"' in line)
            if isinstance(e, SmEvent) and e.sm == "sm-2" and e.state == "master"]
    assert len(took) == 1
    assert took[0].ts >= demo._sim_start_ms + failover.after_s * 1000  # counted as the fault
    assert took[0].ts - demo._sim_start_ms < failover.after_s * 1000 + 1000
