"""``fabricwatch stack up | down | status | jars``: the local Kafka broker and Temporal server.

``stack up --cluster`` runs the production-shaped stack instead (``fabricwatch.cluster``).

Exit codes: 0 done (``status``: every service ready), 1 the stack failed (the message says why
and names the log), 2 bad input or settings, 3 ``status`` found a service not ready.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import click
from pydantic import ValidationError

from fabricwatch.stack import (
    SERVICES,
    LocalStack,
    ServiceStatus,
    StackError,
    describe_ledger,
    ensure_kafka_jars,
)
from fabricwatch.stack_config import StackConfigError
from runtime.settings import Settings, load_settings


class _Stopped(Exception):
    """SIGTERM in the foreground: leave the wait loop and stop the stack like Ctrl-C does."""


@contextmanager
def _errors() -> Iterator[None]:
    """Stack failures as click errors: exit 1 with the message, bad settings exit 2."""
    try:
        yield
    except (StackConfigError, ValidationError) as exc:
        raise click.UsageError(f"bad setting: {exc}") from exc
    except StackError as exc:
        raise click.ClickException(str(exc)) from exc


def _settings() -> Settings:
    with _errors():
        return load_settings()


def _print(statuses: list[ServiceStatus]) -> None:
    for st in statuses:
        pid = f"pid {st.pid}" if st.pid else ""
        click.echo(f"{st.name:<9} {st.state:<11} {st.address:<22} {pid:<11} {st.detail}")
        if st.log is not None and st.state != "ready":
            click.echo(f"{'':<9} log: {st.log}")


@click.group("stack")
def stack() -> None:
    """Start, stop and check the local stack (Kafka broker, Temporal server) on 127.0.0.1.

    Data, logs and pid files live in the state folder (FABRICWATCH_STATE_DIR, default
    .fabricwatch/). The ledger needs no service: chdb runs inside the process that owns it.
    """


@stack.command("up")
@click.option("--foreground", is_flag=True,
              help="Stay attached: stop the stack on Ctrl-C or SIGTERM (default: detach).")
@click.option("--only", "only", type=click.Choice(SERVICES), multiple=True,
              help="Start only this service (repeatable).")
@click.option("--timeout", type=click.FloatRange(min=1), default=120.0, show_default=True,
              help="Seconds to wait for every service to answer.")
@click.option("--cluster", is_flag=True,
              help="The production-shaped run: 3 Kafka brokers (replication 3, min ISR 2), "
                   "Temporal, the ledger endpoint and its ingest, 2 stream workers, 2 runbook "
                   "workers and the simulator.")
@click.option("--preset", default=None, help="--cluster: the simulated fabric [10k-port].")
@click.option("--interval", default="10s", show_default=True,
              help="--cluster: the simulator's sampling interval.")
@click.option("--seed", default=0, show_default=True, type=int, help="--cluster: sim seed.")
@click.option("--fault", "faults", multiple=True, metavar="SPEC",
              help="--cluster: a simulator fault (`fabricwatch sim faults`). Repeatable.")
def up(foreground: bool, only: tuple[str, ...], timeout: float, cluster: bool,
       preset: str | None, interval: str, seed: int, faults: tuple[str, ...]) -> None:
    """Start Kafka and Temporal (idempotent) and wait until they answer."""
    # While the broker elects leaders for new topics aiokafka warns and retries; that is expected.
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    settings = _settings()
    if cluster:
        if only:
            raise click.UsageError("--only and --cluster do not go together")
        _cluster_up(settings, foreground, timeout, preset, interval, seed, faults)
        return
    if preset or faults:
        raise click.UsageError("--preset and --fault need --cluster")
    with _errors():
        local = LocalStack(settings, services=only or SERVICES, detach=not foreground,
                           timeout=timeout)
        began = time.monotonic()
        statuses = local.up()
    click.echo(f"stack ready in {time.monotonic() - began:.1f} s (state: {local.state_dir})")
    _print(statuses)
    click.echo(f"ledger    {describe_ledger(settings)}")
    if not foreground:
        click.echo("stop it with: fabricwatch stack down")
        return

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise _Stopped

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        click.echo("running in the foreground; Ctrl-C stops the stack")
        while True:
            time.sleep(1)
            stopped = [name for name, alive in local.running().items() if not alive]
            if stopped:
                raise click.ClickException(f"{', '.join(stopped)} exited; see {local.logs_dir}")
    except (KeyboardInterrupt, _Stopped):
        click.echo("stopping")
    finally:
        signal.signal(signal.SIGTERM, previous)
        local.down()


def _cluster_up(settings: Settings, foreground: bool, timeout: float, preset: str | None,
                interval: str, seed: int, faults: tuple[str, ...]) -> None:
    from fabricwatch.cluster import DEFAULT_PRESET, ClusterOptions, LocalCluster
    from schemas.policy import parse_duration_s
    from sim.faults import FaultError, check_all, parse_spec
    from sim.topology import TopologyError, generate

    try:
        parse_duration_s(interval)
        fabric = generate(preset or DEFAULT_PRESET)
        check_all([parse_spec(f) for f in faults], fabric)
    except (ValueError, FaultError, TopologyError) as exc:
        raise click.UsageError(str(exc)) from None
    with _errors():
        local = LocalCluster(settings, ClusterOptions(preset=preset or DEFAULT_PRESET,
                                                      interval=interval, seed=seed,
                                                      faults=faults),
                             detach=not foreground, timeout=max(timeout, 240.0))
        began = time.monotonic()
        running = local.up()
    click.echo(f"cluster ready in {time.monotonic() - began:.1f} s (state: {local.state_dir}); "
               f"bootstrap {local.bootstrap}, Temporal {settings.temporal.target}, "
               f"ledger endpoint http://{settings.ledger.http_host}:{settings.ledger.http_port}")
    for name, alive in running.items():
        click.echo(f"{name:<11} {'running' if alive else 'stopped':<8} log: {local.log_path(name)}")
    if not foreground:
        click.echo("stop it with: fabricwatch stack down")
        return

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise _Stopped

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        click.echo("running in the foreground; Ctrl-C stops the cluster")
        while True:
            time.sleep(1)
            stopped = [name for name, alive in local.running().items() if not alive]
            if stopped:
                raise click.ClickException(f"{', '.join(stopped)} exited; see {local.logs_dir}")
    except (KeyboardInterrupt, _Stopped):
        click.echo("stopping")
    finally:
        signal.signal(signal.SIGTERM, previous)
        local.down()


@stack.command("down")
def down() -> None:
    """Stop the stack (or the --cluster run) started from this state folder (from any process)."""
    from fabricwatch.cluster import LocalCluster

    settings = _settings()
    with _errors():
        stopped = []
        cluster = LocalCluster(settings)
        if cluster.has_records():
            stopped += cluster.down()
        stopped += LocalStack(settings).down()
    click.echo(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@stack.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def status(as_json: bool) -> None:
    """Show each service: ready, running (not answering) or stopped. Exit 3 unless all ready."""
    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # a stopped broker is reported, not logged
    settings = _settings()
    from fabricwatch.cluster import LocalCluster

    with _errors():
        cluster = LocalCluster(settings)
        if cluster.has_records():  # the --cluster run: each process, alive or not
            running = cluster.running()
            for name, alive in running.items():
                click.echo(json.dumps({"name": name, "state": "running" if alive else "stopped"})
                           if as_json else f"{name:<11} {'running' if alive else 'stopped'}")
            if not all(running.values()):
                raise SystemExit(3)
            return
        statuses = LocalStack(settings).status()
    if as_json:
        for st in statuses:
            click.echo(json.dumps(st.as_dict()))
    else:
        _print(statuses)
        click.echo(f"ledger    {describe_ledger(settings)}")
    if any(st.state not in ("ready", "external") for st in statuses):
        raise SystemExit(3)


@stack.command("jars")
def jars() -> None:
    """Gather the Kafka broker's jars with Maven (quick when already there)."""
    with _errors():
        libs = ensure_kafka_jars()
    click.echo(f"Kafka jars in {libs}")


COMMANDS: list[click.Command] = [stack]
