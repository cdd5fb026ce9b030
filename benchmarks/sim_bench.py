"""Benchmark: simulator telemetry generation + publish rate at the 100k-port preset.

Run: .venv/bin/python benchmarks/sim_bench.py [--preset 100k-port] [--steps 6] [--paced-steps 3]
     [--bootstrap HOST:PORT]

Without ``--bootstrap`` it starts the local Kafka broker (``fabricwatch.stack``) on free
ports in a temporary folder and stops it afterwards. Three phases, one simulator each:

1. generate only: ``Simulator.step()`` (counters + probes + topology, encoded), no sink;
2. generate + publish as fast as possible through ``collectors.publish.Publisher`` into the
   real broker, flush included: the sustainable port-samples/s;
3. paced at the real 10 s interval for ``--paced-steps`` steps: how many steps fell behind
   and the slack left in each 10 s slot.

The floor is what keeping up needs: ports / interval (101,376 / 10 s = 10,138 samples/s);
``ratio_to_floor`` is phase 2's rate over it. A few faults run throughout (a flap, a BER
ramp, a spine reboot) so that events and state changes are part of the load.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import write_result  # noqa: E402
from sim.controller import SimController  # noqa: E402
from sim.faults import parse_spec  # noqa: E402
from sim.run import run, run_to_kafka  # noqa: E402
from sim.telemetry import Simulator  # noqa: E402
from sim.topology import generate  # noqa: E402

FAULTS = ["flap:leaf-su01-r3:5,count=4,every=60s,at=5s", "ber:node0042/mlx5_3:1,ramp=2m",
          "spine_reboot:spine-su02-s1,at=20s,for=30s", "hot_uplink:leaf-su03-r0:40"]


_STATE_DIRS: list[Path] = []


class _NullSink:
    async def send(self, messages: Any) -> None:
        return None


def _sim(preset: str, interval_s: float, start_ms: int) -> Simulator:
    fab = generate(preset)
    faults = [parse_spec(f) for f in FAULTS] if preset in ("10k-gpu", "100k-port") else []
    # With a controller, as `sim run` has: its state file is checked every step and the
    # health report written when it changes.
    state = Path(tempfile.mkdtemp(prefix="fw-simbench-ctl-"))
    _STATE_DIRS.append(state)
    controller = SimController(state)
    return Simulator(fab, faults=faults, controller=controller, seed=1, start_ms=start_ms,
                     interval_s=interval_s, probe_every=6, topology_every=30)


INTERVAL_S = 10.0


async def _generate_only(args: argparse.Namespace) -> Any:
    """Phase 1, run before the broker starts so that its JVM does not share the cores."""
    sim = _sim(args.preset, INTERVAL_S, int(time.time() * 1000) - 3_600_000)
    return await run(sim, _NullSink(), steps=args.steps, speedup=0)


async def _phases(args: argparse.Namespace, bootstrap: str, gen: Any) -> dict[str, Any]:
    interval_s = INTERVAL_S
    start_ms = int(time.time() * 1000) - 3_600_000
    sim = _sim(args.preset, interval_s, start_ms)
    ports = sim.fabric.port_count()
    pub = await run_to_kafka(sim, bootstrap, steps=args.steps, speedup=0)
    paced = None
    if args.paced_steps:
        sim = _sim(args.preset, interval_s, int(time.time() * 1000))
        paced = await run_to_kafka(sim, bootstrap, steps=args.paced_steps, speedup=1.0)
    floor = ports / interval_s
    figures: dict[str, Any] = {
        "preset": args.preset,
        "ports": ports,
        "devices": len(sim.dev_ports),
        "interval_s": interval_s,
        "floor_port_samples_per_s": round(floor, 1),
        "generate_only": gen.as_dict(),
        "generate_publish": pub.as_dict(),
        "port_samples_per_s": round(pub.port_samples_per_s, 1),
        "generate_only_port_samples_per_s": round(gen.port_samples_per_s, 1),
        "ratio_to_floor": round(pub.port_samples_per_s / floor, 2),
        "mb_per_step": round(pub.bytes / max(1, pub.steps) / 1e6, 2),
        "faults": FAULTS,
    }
    if paced is not None:
        figures["paced"] = paced.as_dict()
        figures["paced_behind_steps"] = paced.behind_steps
        figures["paced_max_step_s"] = round(paced.max_step_s, 3)
        figures["paced_slack_fraction"] = round(1 - paced.max_step_s / interval_s, 3)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="100k-port")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--paced-steps", type=int, default=3)
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args()
    command = (f"python benchmarks/sim_bench.py --preset {args.preset} --steps {args.steps} "
               f"--paced-steps {args.paced_steps}")
    gen = asyncio.run(_generate_only(args))
    if args.bootstrap:
        figures = asyncio.run(_phases(args, args.bootstrap, gen))
        figures["broker"] = "external"
    else:
        from fabricwatch.stack import LocalStack
        from fabricwatch.stack_config import free_ports
        from runtime.settings import KafkaSettings, Settings

        with tempfile.TemporaryDirectory(prefix="fw-simbench-") as tmp:
            port, cport = free_ports(2)
            settings = Settings(state_dir=Path(tmp),
                                kafka=KafkaSettings(port=port, controller_port=cport))
            stack = LocalStack(settings, services=["kafka"], timeout=180)
            stack.up()
            try:
                figures = asyncio.run(_phases(args, settings.kafka.bootstrap_servers, gen))
            finally:
                stack.down()
        figures["broker"] = "local Kafka 4 (KRaft, one node, fabricwatch.stack)"
    for state in _STATE_DIRS:
        shutil.rmtree(state, ignore_errors=True)
    name = "sim" if args.preset == "100k-port" else f"sim_{args.preset}"
    path = write_result(name, figures, command)
    print(f"{'phase':<22}{'samples/s':>14}{'step max s':>12}{'behind':>8}")
    for label, key in (("generate only", "generate_only"), ("generate + publish",
                                                            "generate_publish"),
                       ("paced 10 s", "paced")):
        if key in figures:
            f = figures[key]
            print(f"{label:<22}{f['port_samples_per_s']:>14,.0f}{f['max_step_s']:>12.2f}"
                  f"{f['behind_steps']:>8}")
    print(f"floor {figures['floor_port_samples_per_s']:,.0f} samples/s; ratio_to_floor "
          f"{figures['ratio_to_floor']}; wrote {path}")


if __name__ == "__main__":
    main()
