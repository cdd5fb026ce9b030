"""Build the runbook's adapters and activities from settings and a few options.

The entry points (``fabricwatch runbook-worker``, test harnesses) call ``build_activities``
once; nothing below reads the environment. Secrets come from ``settings.secrets`` (or the
``*_file`` path beside them) and are handed to the adapters as ``SecretStr``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr

from fabricwatch.settings import SecretFileError, Settings, read_secret
from workflows.adapters.base import Checker, Controller, EvidenceSource, NodeFencer, RecordSink
from workflows.remediation.activities import FabricActivities

ControllerKind = Literal["sim", "ufm", "sonic", "opensm"]
RecordsKind = Literal["ledger", "kafka"]


class WiringError(ValueError):
    """An option combination that cannot work (missing URL or credentials)."""


@dataclass
class WiringOptions:
    controller: ControllerKind = "sim"
    records: RecordsKind = "ledger"
    sim_state_dir: Path | None = None  # default: settings.state_dir / "sim"
    ufm_url: str | None = None
    sonic_url: str | None = None
    sonic_interface_template: str = "Ethernet{port}"
    ticket_webhook: str | None = None
    kubeconfig: str | None = None
    k8s: bool = False
    verify_tls: bool = True
    ca: str | None = None  # the local HCA for perfquery (-C)
    check_commands: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # judge the clean-counter wait from the ledger's counter deltas (else the controller's view)
    counters_from_ledger: bool = False


def _secret(value: SecretStr | None, path: Path | None, what: str) -> SecretStr:
    try:
        found = read_secret(value, path, what)
    except SecretFileError as exc:
        raise WiringError(str(exc)) from None
    if found is None:
        raise WiringError(f"{what} is not configured")
    return found


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
        checker = CommandChecker(opts.check_commands)
        sec = settings.secrets
        if opts.controller == "opensm":
            from collectors.live.tools import ToolRunner
            from workflows.adapters.opensm import OpensmChecker, OpensmController, OpensmEvidence

            runner = ToolRunner(ca=opts.ca)
            opensm = OpensmController(runner, records=records)
            controller, evidence = opensm, OpensmEvidence(runner)
            checker = OpensmChecker(opensm, checker)
        elif opts.controller == "ufm":
            from workflows.adapters.ufm import UfmController

            if not opts.ufm_url or not sec.ufm_username:
                raise WiringError("--controller ufm needs --ufm-url and "
                                  "FABRICWATCH_SECRETS__UFM_USERNAME")
            ufm = UfmController(opts.ufm_url, sec.ufm_username,
                                _secret(sec.ufm_password, sec.ufm_password_file, "UFM password"),
                                verify_tls=opts.verify_tls)
            stack.push_async_callback(ufm.aclose)
            controller = ufm
        else:
            from workflows.adapters.sonic import SonicController

            if not opts.sonic_url or not sec.sonic_username:
                raise WiringError("--controller sonic needs --sonic-url and "
                                  "FABRICWATCH_SECRETS__SONIC_USERNAME")
            sonic = SonicController(opts.sonic_url, sec.sonic_username,
                                    _secret(sec.sonic_password, None, "SONiC password"),
                                    interface_template=opts.sonic_interface_template,
                                    verify_tls=opts.verify_tls)
            stack.push_async_callback(sonic.aclose)
            controller = sonic
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
    ticketing: Any
    if opts.ticket_webhook:
        from workflows.adapters.ticket import WebhookTicketing

        ticketing = WebhookTicketing(opts.ticket_webhook, settings.secrets.ticket_token)
        stack.push_async_callback(ticketing.aclose)
    else:
        from workflows.adapters.ticket import LogTicketing

        ticketing = LogTicketing()
    return FabricActivities(records=records, controller=controller, evidence=evidence,
                            checker=checker, fencer=fencer, ticketing=ticketing)


async def _records(settings: Settings, opts: WiringOptions, stack: AsyncExitStack
                   ) -> tuple[RecordSink, Any]:
    """The record sink, and the ledger when this process opened one."""
    if opts.records == "kafka":
        from collectors.publish import Publisher
        from workflows.adapters.records import KafkaSink

        publisher = Publisher(settings.kafka.bootstrap_servers, client_id="fabricwatch-runbooks")
        await stack.enter_async_context(publisher)
        return KafkaSink(publisher), None
    from ledger import open_ledger
    from workflows.adapters.records import LedgerSink

    ledger = open_ledger(settings)
    stack.callback(ledger.close)
    return LedgerSink(ledger), ledger
