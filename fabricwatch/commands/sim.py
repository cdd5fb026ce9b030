"""``fabricwatch sim``: run the fabric simulator, write its topology, drive its controller.

``sim run`` publishes the simulated fabric's telemetry to the contract topics (or prints it
with ``--print``); ``sim topology`` writes ibnetdiscover output and the cable plan;
``sim isolate|unisolate|reset-counters|repair|status`` act on the simulated controller the
way the runbook's adapter does, and ``sim inject SPEC`` queues a fault, so a running
``sim run`` on the same state folder changes what it emits.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from datetime import datetime
from pathlib import Path

import click
import orjson

from runtime.settings import Settings, load_settings
from schemas.policy import parse_duration_s
from sim.controller import ControllerError, SimController
from sim.faults import KINDS, Fault, FaultError, check_all, load_file, parse_spec
from sim.topology import PRESETS, Params, TopologyError, generate, resolve_params

SIM_STATE = "sim"  # sub-folder of the state folder that holds the controller's state


def _duration(value: str, name: str) -> float:
    try:
        seconds = parse_duration_s(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=name) from None
    return seconds


def _params(preset: str, transport: str | None, fabric: str | None) -> Params:
    try:
        params = resolve_params(preset)
    except TopologyError as exc:
        raise click.BadParameter(str(exc), param_hint="--preset") from None
    changes = {}
    if transport:
        changes["transport"] = transport
    if fabric:
        changes["fabric"] = fabric
    if changes:
        from dataclasses import replace

        params = replace(params, **changes)  # type: ignore[arg-type]
    return params


def _faults(specs: tuple[str, ...], files: tuple[Path, ...]) -> list[Fault]:
    out: list[Fault] = []
    try:
        for path in files:
            out.extend(load_file(path))
        out.extend(parse_spec(spec) for spec in specs)
    except FaultError as exc:
        raise click.UsageError(str(exc)) from None
    return out


def _state_dir(settings: Settings, override: Path | None) -> Path:
    return override if override is not None else settings.state_dir / SIM_STATE


@click.group("sim")
def sim() -> None:
    """The fabric simulator: topology, telemetry, faults and a controller."""


_preset = click.option("--preset", default="lab", show_default=True,
                       help=f"Fabric preset: {', '.join(PRESETS)}.")
_fault = click.option("--fault", "specs", multiple=True, metavar="SPEC",
                      help="A fault, KIND:DEVICE[:PORT][,key=value...] "
                           "(e.g. flap:leaf-su01-r3:5,count=4,every=60s,at=30s). Repeatable.")
_faults_file = click.option("--faults", "files", multiple=True,
                            type=click.Path(dir_okay=False, path_type=Path),
                            help="A YAML or JSON file of faults. Repeatable.")
_transport = click.option("--transport", type=click.Choice(["ib", "roce"]), default=None,
                          help="Override the preset's transport (RoCE faults need roce).")
_state = click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
                      default=None, help="Controller state folder [default: STATE_DIR/sim].")


@sim.command("run")
@_preset
@click.option("--interval", default="10s", show_default=True, help="Sampling interval.")
@_faults_file
@_fault
@click.option("--duration", default=None, help="Simulated time to run (default: forever).")
@click.option("--speedup", default=1.0, show_default=True, type=float,
              help="Simulated seconds per wall second; 0 = as fast as possible.")
@click.option("--seed", default=0, show_default=True, type=int)
@_transport
@click.option("--fabric", default=None, help="Fabric name in the events [default: preset's].")
@click.option("--start", default=None,
              help="Simulated start time, RFC 3339 [default: now, or now - duration when "
                   "running faster than real time].")
@click.option("--probe-every", default=6, show_default=True, type=int,
              help="Probe round every N steps (0 = no probes).")
@click.option("--topology-every", default=30, show_default=True, type=int,
              help="Topology snapshot every N steps (0 = none).")
@_state
@click.option("--bootstrap", default=None, help="Kafka bootstrap [default: settings].")
@click.option("--print", "to_stdout", is_flag=True,
              help="Write the messages as JSON lines to stdout instead of Kafka.")
@click.option("--jobs", "job_count", default=0, show_default=True, type=click.IntRange(0, 3),
              help="Place this many simulated jobs on the fabric (fabric.jobs, with each "
                   "topology snapshot).")
@click.option("--job", "job_specs", multiple=True, metavar="NAME=HOSTLIST",
              help="Place job NAME on the nodes of a Slurm host list, e.g. "
                   "train=node[0001-0008]; repeatable.")
@click.option("--fix-chance", multiple=True, metavar="RUNG=P",
              help="Chance (0..1) that a repair-ladder rung fixes a fault, e.g. "
                   "clean-and-reseat=0.3; repeatable [default: per rung, see sim.controller].")
def run_cmd(preset: str, interval: str, files: tuple[Path, ...], specs: tuple[str, ...],
            duration: str | None, speedup: float, seed: int, transport: str | None,
            fabric: str | None, start: str | None, probe_every: int, topology_every: int,
            state_dir: Path | None, bootstrap: str | None, to_stdout: bool, job_count: int,
            job_specs: tuple[str, ...], fix_chance: tuple[str, ...]) -> None:
    """Run the simulated fabric and publish its telemetry."""
    from collectors.errors import ParseError
    from collectors.jobs import expand_hostlist
    from sim.jobs import place_jobs, placements
    from sim.run import RunStats, WriterSink, run, run_to_kafka, start_ms_for
    from sim.telemetry import Simulator

    # faults injected into this run from other processes that it refuses are said here
    logging.basicConfig(level=logging.WARNING, format="sim: %(message)s")
    chances = _fix_chances(fix_chance)
    settings = load_settings()
    interval_s = _duration(interval, "--interval")
    if interval_s <= 0:
        raise click.BadParameter("must be positive", param_hint="--interval")
    duration_s = _duration(duration, "--duration") if duration is not None else None
    if speedup < 0:
        raise click.BadParameter("must be 0 or positive", param_hint="--speedup")
    if probe_every < 0 or topology_every < 0:
        raise click.UsageError("--probe-every and --topology-every must not be negative")
    params = _params(preset, transport, fabric)
    faults = _faults(specs, files)
    named_jobs: list[tuple[str, list[str]]] = []
    for spec in job_specs:
        name, sep, hosts = spec.partition("=")
        try:
            nodes = expand_hostlist(hosts) if sep and name.strip() else []
        except ParseError as exc:
            raise click.BadParameter(f"{spec!r}: {exc.reason}", param_hint="--job") from None
        if not nodes:
            raise click.BadParameter(f"{spec!r} is not NAME=HOSTLIST", param_hint="--job")
        named_jobs.append((name.strip(), nodes))
    now_ms = int(time.time() * 1000)
    if start is not None:
        try:
            parsed = datetime.fromisoformat(start.replace("Z", "+00:00"))
        except ValueError:
            raise click.BadParameter(f"{start!r} is not RFC 3339", param_hint="--start") from None
        if parsed.tzinfo is None:
            raise click.BadParameter("needs a UTC offset", param_hint="--start")
        start_ms = int(parsed.timestamp() * 1000)
    else:
        start_ms = start_ms_for(now_ms, int(interval_s * 1000), duration_s=duration_s,
                                speedup=speedup)
    if speedup != 1 and duration_s is None:
        # Consumers refuse events more than a day ahead of their clock (the contract's ts rule).
        click.echo("sim: warning: running faster than real time without --duration; events "
                   "more than a day ahead of the wall clock will be refused downstream",
                   err=True)
    try:
        fab = generate(params)
        check_all(faults, fab)
        controller = SimController(_state_dir(settings, state_dir), seed=seed)
        controller.record_fabric(fab.fabric, [f"{p.device}:{p.port}" for p in fab.ports()],
                                 chances)
        simulator = Simulator(fab, faults=faults, controller=controller, seed=seed,
                              columnar=settings.kafka.columnar_counters,
                              start_ms=start_ms, interval_s=interval_s,
                              probe_every=probe_every, topology_every=topology_every,
                              jobs=placements(fab, [(j.job, j.nodes) for j in place_jobs(
                                  fab, job_count, start_ms)] + named_jobs, start_ms))
    except (FaultError, TopologyError, ControllerError) as exc:
        raise click.UsageError(str(exc)) from None
    target = bootstrap or settings.kafka.bootstrap_servers

    async def main() -> RunStats:
        # SIGINT/SIGTERM end the run after the current step, flushed, with the stats printed.
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        if to_stdout:
            return await run(simulator, WriterSink(sys.stdout.buffer), duration_s=duration_s,
                             speedup=speedup, stop=stop)
        click.echo(f"sim: {params.name} ({fab.port_count()} ports, {len(faults)} faults) "
                   f"-> {target} every {interval_s:g}s", err=True)
        return await run_to_kafka(simulator, target, duration_s=duration_s, speedup=speedup,
                                  stop=stop)

    stats = asyncio.run(main())
    click.echo(orjson.dumps(stats.as_dict()).decode(), err=True)


@sim.command("topology")
@_preset
@click.option("--out", "out_dir", required=True,
              type=click.Path(file_okay=False, path_type=Path), help="Folder to write into.")
@_faults_file
@_fault
@_transport
@click.option("--fabric", default=None)
def topology_cmd(preset: str, out_dir: Path, files: tuple[Path, ...], specs: tuple[str, ...],
                 transport: str | None, fabric: str | None) -> None:
    """Write ibnetdiscover.txt and plan.csv (and discovered.txt with the faults applied)."""
    params = _params(preset, transport, fabric)
    faults = _faults(specs, files)
    try:
        fab = generate(params)
        check_all(faults, fab)
    except (FaultError, TopologyError) as exc:
        raise click.UsageError(str(exc)) from None
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ibnetdiscover.txt").write_text(fab.to_ibnetdiscover(), encoding="utf-8")
    (out_dir / "plan.csv").write_text(fab.to_plan_csv(), encoding="utf-8")
    written = ["ibnetdiscover.txt", "plan.csv"]
    if faults:
        (out_dir / "discovered.txt").write_text(fab.discovered(faults), encoding="utf-8")
        (out_dir / "faults.txt").write_text("".join(f.spec() + "\n" for f in faults),
                                            encoding="utf-8")
        written += ["discovered.txt", "faults.txt"]
    click.echo(f"{params.name}: {len(fab.nodes)} nodes, {len(fab.switches)} switches, "
               f"{len(fab.links)} links, {fab.port_count()} ports -> "
               f"{', '.join(str(out_dir / w) for w in written)}")


@sim.command("presets")
def presets_cmd() -> None:
    """List the fabric presets and their sizes."""
    for name in PRESETS:
        fab = generate(name)
        click.echo(f"{name:10} {fab.params.sus:3} SU x {fab.params.nodes_per_su} nodes x "
                   f"{fab.params.rails} rails: {len(fab.nodes)} nodes, {len(fab.switches)} "
                   f"switches, {fab.port_count()} ports")


@sim.command("faults")
def faults_cmd() -> None:
    """List the fault kinds."""
    for kind in KINDS:
        click.echo(kind)


def _controller(state_dir: Path | None) -> SimController:
    return SimController(_state_dir(load_settings(), state_dir))


def _fix_chances(items: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        rung, sep, value = item.partition("=")
        try:
            chance = float(value)
        except ValueError:
            chance = -1.0
        if not sep or not rung.strip() or not 0.0 <= chance <= 1.0:
            raise click.BadParameter(f"{item!r} is not RUNG=P with P in 0..1",
                                     param_hint="--fix-chance")
        out[rung.strip()] = chance
    return out


def _port_command(name: str, doc: str) -> click.Command:
    @click.command(name, help=doc)
    @click.argument("device")
    @click.argument("port", type=click.IntRange(0, 1024))
    @_state
    def command(device: str, port: int, state_dir: Path | None) -> None:
        ctl = _controller(state_dir)
        try:
            ctl.check_port(device, port)
            if name == "isolate":
                result: object = ctl.isolate(device, port)
            elif name == "unisolate":
                result = ctl.unisolate(device, port)
            else:
                result = ctl.reset_counters(device, port)
        except ControllerError as exc:
            raise click.UsageError(str(exc)) from None
        click.echo(orjson.dumps({"command": name, "device": device, "port": port,
                                 "result": result}).decode())

    return command


for _name, _doc in (("isolate", "Isolate a port on the simulated fabric."),
                    ("unisolate", "Return an isolated port to service."),
                    ("reset-counters", "Zero a port's counters.")):
    sim.add_command(_port_command(_name, _doc))


@sim.command("repair")
@click.argument("device")
@click.argument("port", type=click.IntRange(0, 1024))
@click.argument("rung")
@_state
def repair_cmd(device: str, port: int, rung: str, state_dir: Path | None) -> None:
    """Carry out one repair-ladder rung on a port; prints whether it fixed the fault."""
    ctl = _controller(state_dir)
    try:
        ctl.check_port(device, port)
        if rung not in ctl.rungs():
            raise ControllerError(f"unknown repair rung {rung!r}; expected one of "
                                  f"{', '.join(sorted(ctl.rungs()))}")
        fixed = ctl.repair_step(device, port, rung)
    except ControllerError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(orjson.dumps({"command": "repair", "device": device, "port": port,
                             "rung": rung, "fixed": fixed}).decode())


@sim.command("inject")
@click.argument("spec")
@_state
def inject_cmd(spec: str, state_dir: Path | None) -> None:
    """Queue a fault for a running `sim run` on the same state folder (its at= counts from
    the simulator's next step)."""
    try:
        fault = parse_spec(spec)  # refuse a bad spec here, not in the running simulator
        ctl = _controller(state_dir)
        ctl.check_port(fault.device, fault.port)
        seq = ctl.inject(spec)
    except (FaultError, ControllerError) as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(orjson.dumps({"command": "inject", "spec": spec, "seq": seq}).decode())


@sim.command("status")
@_state
def status_cmd(state_dir: Path | None) -> None:
    """Show the simulated controller's isolated ports."""
    ctl = _controller(state_dir)
    click.echo(orjson.dumps({"state_file": str(ctl.path), "isolated": ctl.isolated_ports(),
                             "injected": [spec for _, spec in ctl.injected()]}).decode())


COMMANDS: list[click.Command] = [sim]
