"""Build the runbook's adapters and activities from settings and a few options.

The entry points (``fabricwatch runbook-worker``, test harnesses) call ``check`` (every
configuration error, before anything connects) and ``build_activities`` once; nothing below
reads the environment. Secrets come from ``settings.secrets`` (or the ``*_file`` path beside
them) and the device inventory's credential files, and are handed to the adapters as
``SecretStr``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import SecretStr

from runtime.settings import SecretFileError, Settings, read_secret
from schemas.policy import CheckCommand
from workflows.adapters.base import Checker, Controller, EvidenceSource, NodeFencer, RecordSink
from workflows.adapters.notify import Notifier
from workflows.remediation.activities import FabricActivities

if TYPE_CHECKING:
    from workflows.adapters.device_inventory import DeviceInventory
    from workflows.adapters.opensm import PortDirectory

ControllerKind = Literal["sim", "ufm", "sonic", "opensm"]
RecordsKind = Literal["ledger", "kafka"]


class WiringError(ValueError):
    """An option combination that cannot work (missing URL or credentials)."""


@dataclass
class WiringOptions:
    controller: ControllerKind = "sim"
    records: RecordsKind = "ledger"
    sim_state_dir: Path | None = None  # default: settings.state_dir / "sim"
    # the device inventory file (YAML or JSON): which UFM / SONiC switch answers for a device,
    # its GUID or interface names, credentials by reference (workflows/adapters/device_inventory)
    inventory_path: Path | None = None
    # the fabric's ports as the worker knows them (the dispatcher's topology inventory): the
    # opensm controller refuses a port it does not have
    topology: PortDirectory | None = None
    ticket_webhook: str | None = None
    kubeconfig: str | None = None
    k8s: bool = False
    verify_tls: bool = True
    ca: str | None = None  # the local HCA for perfquery (-C)
    # return-to-service checks: argument templates (the policy's probation.checks, then
    # runbook-worker --check), and the probe partner host per rail; a check without a
    # command fails closed (the runbook holds for a human) unless the policy waives it
    check_commands: Mapping[str, CheckCommand | Sequence[str]] = field(default_factory=dict)
    probe_partners: Mapping[int, str] = field(default_factory=dict)
    # judge the clean-counter wait from the ledger's counter deltas (else the controller's view)
    counters_from_ledger: bool = False
    # alert receivers beside the settings' (settings.notify): an Alertmanager URL, PagerDuty
    # and Slack on (their secrets from the settings), another alerts file
    alertmanager_url: str | None = None
    pagerduty: bool = False
    slack: bool = False
    alerts_file: Path | None = None


def _secret(value: SecretStr | None, path: Path | None, what: str) -> SecretStr | None:
    try:
        return read_secret(value, path, what)
    except SecretFileError as exc:
        raise WiringError(str(exc)) from None


def _settings_login(user: str | None, password: SecretStr | None, path: Path | None,
                    what: str) -> tuple[str, SecretStr] | None:
    """The settings' login for a product (the inventory's credentials take precedence)."""
    found = _secret(password, path, f"{what} password")
    return (user, found) if user and found is not None else None


def device_inventory(opts: WiringOptions) -> DeviceInventory:
    """The inventory a UFM or SONiC controller needs; WiringError when absent or invalid."""
    from workflows.adapters.device_inventory import InventoryError, load_device_inventory

    if opts.inventory_path is None:
        raise WiringError(f"--controller {opts.controller} needs --inventory FILE (which "
                          "management endpoint answers for each device, and its ports)")
    try:
        inv = load_device_inventory(opts.inventory_path)
    except InventoryError as exc:
        raise WiringError(f"--inventory {exc}") from None
    kind = opts.controller
    if not any(getattr(e, kind) is not None for e in inv.devices.values()):
        raise WiringError(f"--inventory {opts.inventory_path}: no device has a {kind} entry")
    return inv


def build_controller(settings: Settings, opts: WiringOptions, records: RecordSink | None
                     ) -> Controller:
    """The UFM, SONiC or opensm controller (not the simulator's), secrets read now.

    Called by ``check`` before anything connects, so a bad inventory or an unreadable
    secret file is a clear start-up error, never a runbook's failure an hour later.
    """
    from workflows.adapters.device_inventory import InventoryError

    sec = settings.secrets
    try:
        if opts.controller == "opensm":
            from collectors.live.tools import ToolRunner
            from workflows.adapters.opensm import OpensmController

            m_key = _secret(sec.m_key, sec.m_key_file, "M_Key")
            try:
                return OpensmController(ToolRunner(ca=opts.ca), records=records, m_key=m_key,
                                        topology=opts.topology)
            except ValueError as exc:
                raise WiringError(str(exc)) from None
        inv = device_inventory(opts)
        if opts.controller == "ufm":
            from workflows.adapters.ufm import UfmController

            return UfmController(inv, default_login=_settings_login(
                sec.ufm_username, sec.ufm_password, sec.ufm_password_file, "UFM"))
        from workflows.adapters.sonic import SonicController

        return SonicController(inv, default_login=_settings_login(
            sec.sonic_username, sec.sonic_password, sec.sonic_password_file, "SONiC"))
    except InventoryError as exc:
        raise WiringError(str(exc)) from None


def build_notifier(settings: Settings, opts: WiringOptions | None = None) -> Notifier:
    """Every configured alert receiver (a fan-out), or the alerts file when none is.

    The file also gets every alert when ``notify.file`` / ``--alerts-file`` is given. A
    receiver switched on without its secret is a WiringError at start-up.
    """
    from workflows.adapters.notify import (
        AlertmanagerNotifier,
        FanoutNotifier,
        FileNotifier,
        PagerDutyNotifier,
        SlackNotifier,
    )

    opts = opts or WiringOptions()
    conf = settings.notify
    receivers: list[Notifier] = []
    am_url = opts.alertmanager_url or conf.alertmanager_url
    if am_url:
        if not am_url.startswith(("http://", "https://")):
            raise WiringError(f"the Alertmanager URL must be http(s)://, not {am_url!r}")
        receivers.append(AlertmanagerNotifier(am_url, generator_url=conf.generator_url))
    if opts.pagerduty or conf.pagerduty:
        try:
            key = settings.pagerduty_routing_key()
        except SecretFileError as exc:
            raise WiringError(str(exc)) from None
        if key is None or not key.get_secret_value():
            raise WiringError("PagerDuty is on but no routing key is set "
                              "(FABRICWATCH_SECRETS__PAGERDUTY_ROUTING_KEY_FILE)")
        receivers.append(PagerDutyNotifier(key, url=conf.pagerduty_url))
    if opts.slack or conf.slack:
        try:
            url = settings.slack_webhook_url()
        except SecretFileError as exc:
            raise WiringError(str(exc)) from None
        if url is None or not url.get_secret_value().startswith(("http://", "https://")):
            raise WiringError("Slack is on but no webhook URL (http/https) is set "
                              "(FABRICWATCH_SECRETS__SLACK_WEBHOOK_URL_FILE)")
        receivers.append(SlackNotifier(url))
    explicit_file = opts.alerts_file or conf.file
    if explicit_file is not None or not receivers:
        receivers.append(FileNotifier(explicit_file or settings.alerts_file))
    return receivers[0] if len(receivers) == 1 else FanoutNotifier(receivers)


async def check(settings: Settings, opts: WiringOptions) -> None:
    """Build (and close) the controller and the notifier once: every WiringError before the
    worker starts."""
    notifier = build_notifier(settings, opts)
    close_notifier = getattr(notifier, "aclose", None)
    if close_notifier is not None:
        await close_notifier()
    if opts.controller == "sim":
        return
    controller = build_controller(settings, opts, None)
    close = getattr(controller, "aclose", None)
    if close is not None:
        await close()


async def build_activities(settings: Settings, opts: WiringOptions, stack: AsyncExitStack
                           ) -> FabricActivities:
    """The activities with their adapters; resources are closed when ``stack`` closes."""
    records, ledger = await _records(settings, opts, stack)
    controller: Controller
    evidence: EvidenceSource
    checker: Checker
    if opts.controller == "sim":
        from workflows.adapters.sim import (
            SimChecker,
            SimControllerAdapter,
            SimEvidence,
            open_sim_controller,
        )

        state = opts.sim_state_dir or settings.state_dir / "sim"
        sim = SimControllerAdapter(open_sim_controller(state), state)
        controller, evidence, checker = sim, SimEvidence(sim), SimChecker(sim)
    else:
        from workflows.adapters.tools import CommandChecker, FabricToolsEvidence

        evidence = FabricToolsEvidence(ca=opts.ca)
        checker = CommandChecker(opts.check_commands, partners=opts.probe_partners)
        controller = build_controller(settings, opts, records)
        close = getattr(controller, "aclose", None)
        if close is not None:
            stack.push_async_callback(close)
        from workflows.adapters.opensm import OpensmChecker, OpensmController, OpensmEvidence

        if isinstance(controller, OpensmController):
            evidence = OpensmEvidence(controller.runner)
            checker = OpensmChecker(controller, checker)
    if opts.counters_from_ledger:
        from workflows.adapters.ledger_checks import LedgerCountersChecker

        if ledger is None:
            from ledger.server import ServerLedger

            url = settings.clickhouse_url or (
                f"http://{settings.ledger.http_host}:{settings.ledger.http_port}")
            ledger = ServerLedger(url, password=settings.clickhouse_password()
                                  if settings.clickhouse_url else None)
            stack.callback(ledger.close)
        checker = LedgerCountersChecker(ledger, checker)
    fencer: NodeFencer
    if opts.k8s:
        from workflows.adapters.k8s import K8sNodeFencer

        fencer = K8sNodeFencer.from_kubeconfig(opts.kubeconfig)
    else:
        from workflows.adapters.k8s import NoFencer

        fencer = NoFencer()
    from workflows.adapters.ticket import NotifierTicketing, WebhookTicketing

    # pages go through the notifier; tickets to the webhook, else the runbook's own records
    tickets = (WebhookTicketing(opts.ticket_webhook, settings.secrets.ticket_token)
               if opts.ticket_webhook else None)
    ticketing = NotifierTicketing(build_notifier(settings, opts), tickets)
    stack.push_async_callback(ticketing.aclose)
    from workflows.adapters.jobs import LedgerJobs

    def connect_jobs_ledger() -> Any:
        # the ledger this process opened, else a server or a running owner's endpoint (never
        # the embedded folder: another process owns it)
        if ledger is not None:
            return ledger
        from ledger.http import advertised_endpoint, endpoint_client

        if settings.clickhouse_url:
            from ledger.server import ServerLedger

            handle: Any = ServerLedger(settings.clickhouse_url,
                                       password=settings.clickhouse_password())
        else:
            url = advertised_endpoint(settings.state_dir, other_process=True)
            if url is None:
                return None
            handle = endpoint_client(url, settings)
        stack.callback(handle.close)
        return handle

    from workflows.adapters.baselines import LedgerBaselines

    return FabricActivities(records=records, controller=controller, evidence=evidence,
                            checker=checker, fencer=fencer, ticketing=ticketing,
                            jobs=LedgerJobs(connect_jobs_ledger),
                            baselines=LedgerBaselines(connect_jobs_ledger))


async def _records(settings: Settings, opts: WiringOptions, stack: AsyncExitStack
                   ) -> tuple[RecordSink, Any]:
    """The record sink, and the ledger when this process opened one."""
    from collectors.publish import Publisher

    # no linger: a runbook waits for each record's acknowledgement (flush does not cut a
    # batch's linger short), and the records before the isolate are on its critical path
    publisher = Publisher(settings.kafka.bootstrap_servers, client_id="fabricwatch-runbooks",
                          linger_ms=0)
    await stack.enter_async_context(publisher)
    if opts.records == "kafka":
        from workflows.adapters.records import KafkaSink

        return KafkaSink(publisher), None
    from ledger import open_ledger
    from workflows.adapters.records import LedgerSink

    ledger = open_ledger(settings)
    stack.callback(ledger.close)
    # the breaker and the correlator read fabric.actions: the action records go there too
    return LedgerSink(ledger, actions=publisher), ledger
