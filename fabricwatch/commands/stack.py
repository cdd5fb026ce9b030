"""``fabricwatch stack up | down | status | jars``: the local Kafka broker and Temporal server.

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
def up(foreground: bool, only: tuple[str, ...], timeout: float) -> None:
    """Start Kafka and Temporal (idempotent) and wait until they answer."""
    # While the broker elects leaders for new topics aiokafka warns and retries; that is expected.
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    settings = _settings()
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


@stack.command("down")
def down() -> None:
    """Stop the stack started from this state folder (from any process)."""
    settings = _settings()
    with _errors():
        stopped = LocalStack(settings).down()
    click.echo(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@stack.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def status(as_json: bool) -> None:
    """Show each service: ready, running (not answering) or stopped. Exit 3 unless all ready."""
    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # a stopped broker is reported, not logged
    settings = _settings()
    with _errors():
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
