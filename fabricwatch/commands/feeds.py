"""``fabricwatch poll ufm`` and ``fabricwatch consume gnmic``: collectors of what fabrics already run.

``poll ufm`` polls UFM Enterprise's REST API and UFM Telemetry's CSV endpoint
(``collectors.live.poll_ufm``); its place (last event id, unhealthy marks) is kept in
``<state_dir>/poll/ufm-<hash of URL>.json``. The UFM user is ``--user`` or
``FABRICWATCH_SECRETS__UFM_USERNAME``; the password comes only from
``FABRICWATCH_SECRETS__UFM_PASSWORD_FILE`` (or ``__UFM_PASSWORD``), never from the command
line. TLS certificates are verified (``--ca-file`` for a private CA); ``--insecure`` turns
that off, with a warning. ``--once`` does one round, prints its report and exits 1 when a
resource failed.

``consume gnmic --topic T`` reads gnmic's Kafka output (``collectors.live.consume_gnmic``).

Both export the collector metrics (``runtime.metrics.collector_round``, collectors
``ufm`` and ``gnmic``) on ``settings.metrics_port``. Exit 2 on bad input.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import signal
from pathlib import Path
from typing import Any

import click

from collectors.live.consume_gnmic import ConsumeStats, GnmicConsumer
from collectors.live.poll_ufm import UfmConfig, UfmPoller, UfmReport
from collectors.publish import Publisher
from fabricwatch.commands.poll import poll
from runtime.settings import SecretFileError, load_settings, read_secret
from schemas.topics import BY_NAME

_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_BOOTSTRAP = re.compile(r"^[A-Za-z0-9.\[\]:-]+:\d{1,5}(,[A-Za-z0-9.\[\]:-]+:\d{1,5})*$")


def _ufm_report(rep: UfmReport) -> None:
    from runtime.metrics import collector_round

    collector_round("ufm", published=rep.total, failed=len(rep.failed), elapsed_s=rep.elapsed_s)
    click.echo(json.dumps({"ts": rep.ts, "published": rep.published, "failed": rep.failed,
                           "elapsed_s": round(rep.elapsed_s, 3)}))


@poll.command("ufm")
@click.option("--url", required=True, help="UFM, e.g. https://ufm.example.net")
@click.option("--telemetry-url", default=None,
              help="UFM Telemetry CSV, e.g. http://ufm.example.net:9001/csv/xcset/ib_basic_debug")
@click.option("--user", default=None, help="UFM user (default: FABRICWATCH_SECRETS__UFM_USERNAME)")
@click.option("--tz", default="UTC", show_default=True, help="IANA zone of UFM's event times")
@click.option("--every", type=click.FloatRange(1, 86400), default=30.0, show_default=True,
              help="round interval, seconds")
@click.option("--inventory-every", type=click.FloatRange(10, 86400), default=300.0,
              show_default=True, help="ports and links refresh, seconds")
@click.option("--timeout", type=click.FloatRange(0.5, 3600), default=30.0, show_default=True,
              help="per request, seconds")
@click.option("--ca-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="CA bundle to verify UFM's certificate with")
@click.option("--insecure", is_flag=True, help="do not verify UFM's TLS certificate")
@click.option("--backfill", is_flag=True,
              help="on the first start, publish the events UFM already holds")
@click.option("--once", is_flag=True, help="one round, then exit")
def ufm(url: str, telemetry_url: str | None, user: str | None, tz: str, every: float,
        inventory_every: float, timeout: float, ca_file: Path | None, insecure: bool,
        backfill: bool, once: bool) -> None:
    """Poll UFM's events, unhealthy ports and telemetry; publish port events and counters."""
    settings = load_settings()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from collectors.errors import ParseError
    from collectors.smlog import zone

    sec = settings.secrets
    try:
        zone(tz)
        password = read_secret(sec.ufm_password, sec.ufm_password_file, "UFM password")
    except (ParseError, SecretFileError) as exc:
        raise click.UsageError(str(exc)) from None
    username = user or sec.ufm_username
    if not username or password is None:
        raise click.UsageError("UFM needs a user (--user or FABRICWATCH_SECRETS__UFM_USERNAME) "
                               "and a password (FABRICWATCH_SECRETS__UFM_PASSWORD_FILE)")
    if insecure:
        click.echo("fabricwatch poll ufm: WARNING: --insecure: UFM's TLS certificate is not "
                   "verified; anyone on the path can read the UFM password", err=True)
    digest = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]
    try:
        config = UfmConfig(fabric=settings.fabric, base_url=url, username=username,
                           password=password, telemetry_url=telemetry_url, tz=tz,
                           interval_s=every, inventory_every_s=inventory_every,
                           timeout_s=timeout, verify_tls=not insecure, ca_file=ca_file,
                           backfill=backfill,
                           state_file=settings.state_dir / "poll" / f"ufm-{digest}.json")
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if telemetry_url is None:
        logging.warning("no --telemetry-url: UFM port counters are not read")
    if settings.metrics_port is not None and not once:
        from runtime.metrics import start_metrics_server

        start_metrics_server(settings.metrics_port)

    async def main() -> int:
        async with Publisher(settings.kafka.bootstrap_servers,
                             client_id="fabricwatch-poll-ufm",
                             columnar=settings.kafka.columnar_counters) as pub:
            try:
                poller = UfmPoller(config, pub)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None
            try:
                if once:
                    rep = await poller.round()
                    _ufm_report(rep)
                    return 1 if rep.failed else 0
                stop = asyncio.Event()
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, stop.set)
                await poller.run(stop, on_report=_ufm_report)
                return 0
            finally:
                await poller.close()

    raise SystemExit(_run(main()))


def _run(coro: Any) -> int:
    """Run a collector; a broker that refuses what it published is exit 1 with the reason."""
    from collectors.publish import PublishError

    try:
        return int(asyncio.run(coro) or 0)
    except PublishError as exc:
        click.echo(f"fabricwatch: publishing failed: {exc}", err=True)
        return 1


@click.group("consume")
def consume() -> None:
    """Consumers of other tools' Kafka output."""


@consume.command("gnmic")
@click.option("--topic", required=True, help="the topic gnmic's Kafka output writes")
@click.option("--group", default=None, help="consumer group (default fabricwatch-gnmic-TOPIC)")
@click.option("--bootstrap", default=None,
              help="the Kafka cluster gnmic writes to (default: fabricwatch's)")
def gnmic(topic: str, group: str | None, bootstrap: str | None) -> None:
    """Map gnmic's event/json messages to counters and port events; dead-letter the rest."""
    if not _TOPIC.match(topic):
        raise click.UsageError(f"{topic[:80]!r} is not a Kafka topic name")
    if topic in BY_NAME:
        raise click.UsageError(f"{topic} is a fabricwatch contract topic, not gnmic's output")
    if group is not None and not _TOPIC.match(group):
        raise click.UsageError(f"{group[:80]!r} is not a consumer group name")
    if bootstrap is not None and not _BOOTSTRAP.match(bootstrap):
        raise click.UsageError(f"{bootstrap[:80]!r} is not HOST:PORT[,HOST:PORT...]")
    settings = load_settings()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from collectors.gnmic_map import GnmicMapper
    from runtime.metrics import dead_lettered

    if settings.metrics_port is not None:
        from runtime.metrics import start_metrics_server

        start_metrics_server(settings.metrics_port)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with Publisher(settings.kafka.bootstrap_servers,
                             client_id="fabricwatch-consume-gnmic",
                             columnar=settings.kafka.columnar_counters) as pub:
            consumer = GnmicConsumer(bootstrap or settings.kafka.bootstrap_servers, topic, pub,
                                     GnmicMapper(settings.fabric), group_id=group,
                                     on_dead_letter=dead_lettered)
            metrics = asyncio.create_task(export_stats(consumer.stats, stop))
            try:
                await consumer.run(stop)
            finally:
                stop.set()
                metrics.cancel()

    raise SystemExit(_run(main()))


async def export_stats(stats: ConsumeStats, stop: asyncio.Event, every_s: float = 5.0) -> None:
    """The consumer's totals as collector metrics; a round only while it reads the topic."""
    from runtime.metrics import collector_round

    seen = (0, 0, 0)
    while not stop.is_set():
        await asyncio.sleep(every_s)
        if stats.polls == seen[2]:
            continue  # not reading: the stalled-collector alert should see it
        collector_round("gnmic", published=stats.events - seen[0],
                        failed=stats.dead_letters - seen[1])
        seen = (stats.events, stats.dead_letters, stats.polls)


COMMANDS: list[click.Command] = [consume]
