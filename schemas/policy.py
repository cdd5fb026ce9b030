"""The policy: thresholds and automation switches, in the operators' own YAML shape.

```yaml
fabricHealth:
  flapDampening: {window: 30m, maxLinkDowns: 2, action: isolatePort}
  degradedLink: {expectWidth: 4X, expectSpeed: NDR, action: isolatePort}
  breaker: {maxIsolatedPortsPerSU: 1%}
  incidents: {switchShare: 50%, spread: 5s, settle: 2m}
  repairLadder: [clean-and-reseat, swap-optic, swap-cable, swap-switch-port]
  returnToService: [ib_write_bw-per-rail, nccl-allreduce-baseline, counters-clean-24h]
```

Every section not given gets its documented default. Durations are ``500ms``, ``60s``,
``30m``, ``24h``, ``7d`` (or a number of seconds); fractions are ``1%`` or ``0.01``.
A file that does not validate raises ``ContractError`` naming the offending path.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from schemas.errors import ContractError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration_s(value: Any) -> float:
    """Seconds from ``30m``-style text or a number of seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or text like 30m, 24h")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNIT_S[m.group(2) or "s"]
    else:
        raise ValueError(f"{value!r} is not a duration (like 500ms, 60s, 30m, 24h, 7d)")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError("a duration must be finite and not negative")
    return seconds


def parse_fraction(value: Any) -> float:
    """A fraction from ``1%`` or ``0.01``."""
    if isinstance(value, bool):
        raise ValueError("a fraction is a number like 0.01 or a percentage like 1%")
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            raise ValueError(f"{value!r} is not a percentage (like 1%) or a fraction") from None
    elif isinstance(value, int | float):
        number = float(value)
    else:
        raise ValueError(f"{value!r} is not a percentage or a fraction")
    if not math.isfinite(number) or not 0 <= number <= 1:
        raise ValueError("a fraction must be between 0 and 1 (0% and 100%)")
    return number


Seconds = Annotated[float, BeforeValidator(parse_duration_s)]
Fraction = Annotated[float, BeforeValidator(parse_fraction)]
PolicyAction = Literal["isolatePort", "ticket", "page", "none"]
Width = Literal["1X", "2X", "4X", "8X", "12X"]
Speed = Literal["SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR"]

# Order of link widths and speeds, lowest first, for "below expectation" checks.
WIDTH_RANK: dict[str, int] = {"1X": 1, "2X": 2, "4X": 4, "8X": 8, "12X": 12}
SPEED_RANK: dict[str, int] = {"SDR": 1, "DDR": 2, "QDR": 3, "FDR10": 4, "FDR": 5, "EDR": 6,
                              "HDR": 7, "NDR": 8, "XDR": 9}


class _Section(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              frozen=True)


class FlapDampening(_Section):
    """Flap: more than ``max_link_downs`` downs in a trailing ``window`` of event time."""

    window: Seconds = 1800.0
    max_link_downs: Annotated[int, Field(ge=0)] = 2
    action: PolicyAction = "isolatePort"


class DegradedLink(_Section):
    """A link trained below what the plan (or, where it is silent, this) expects."""

    expect_width: Width = "4X"
    expect_speed: Speed = "NDR"
    action: PolicyAction = "isolatePort"


class Breaker(_Section):
    """How much of the fabric automation may take out of service.

    Per SU ``max_isolated_ports_per_su`` of its ports; fabric-wide never more than
    max(``fabric_min_ports``, ``fabric_fraction`` of all ports) — the cap NVIDIA's UFM
    port-health plugin applies (max(10, 0.5 %)).
    """

    max_isolated_ports_per_su: Fraction = Field(default=0.01, alias="maxIsolatedPortsPerSU")
    fabric_fraction: Fraction = 0.005
    fabric_min_ports: Annotated[int, Field(ge=0)] = 10


class ErrorRates(_Section):
    """Per-hour error-rate thresholds (event time), with a per-port baseline.

    A port fires when its rate exceeds the threshold *and* ``baseline_factor`` times its own
    trailing baseline, so a port with a steady known noise floor does not page every hour.
    Symbol errors are judged over the two windows NVIDIA UFM's port-health plugin uses for
    NDR (12 min and 125 min); the other counters over one hour. The baseline is the port's
    own rate decayed with time constant ``baseline_window`` (streams.counters.logic).
    """

    symbol_errors_per_hour: Annotated[float, Field(ge=0)] = 200.0
    link_error_recovery_per_hour: Annotated[float, Field(ge=0)] = 5.0
    rcv_errors_per_hour: Annotated[float, Field(ge=0)] = 200.0
    xmit_discards_per_hour: Annotated[float, Field(ge=0)] = 1000.0
    symbol_error_windows: list[Seconds] = Field(default_factory=lambda: [720.0, 7500.0])
    baseline_factor: Annotated[float, Field(ge=1)] = 3.0
    baseline_window: Seconds = 86400.0
    action: PolicyAction = "ticket"


class Ber(_Section):
    """BER thresholds; defaults are the NDR values UFM's port-health plugin publishes.

    NVIDIA UFM port-health (NDR): pre-FEC (raw) BER above 1e-6 on copper / 1e-5 on optics,
    post-FEC (effective) BER above 1e-11, symbol BER above 1e-14, symbol errors judged over
    12-minute and 125-minute windows (``ErrorRates.symbol_error_windows``). ``media`` is the
    default cable type where a sample does not say (an optional ``media`` field on it).
    """

    raw_ber_copper: Annotated[float, Field(gt=0)] = 1e-6
    raw_ber_optic: Annotated[float, Field(gt=0)] = 1e-5
    effective_ber: Annotated[float, Field(gt=0)] = 1e-11
    symbol_ber: Annotated[float, Field(gt=0)] = 1e-14
    media: Literal["copper", "optic"] = "optic"
    action: PolicyAction = "isolatePort"


class Congestion(_Section):
    """RoCE: pause storms, and ECN/PFC misconfiguration (ECN must act before PFC)."""

    pause_storm_fraction: Fraction = 0.5  # of the interval a queue spent paused
    pause_frames_per_s_storm: Annotated[float, Field(ge=0)] = 50_000.0
    min_pause_frames_per_s: Annotated[float, Field(ge=0)] = 1000.0  # below: no verdict on ECN
    min_ecn_to_pause_ratio: Annotated[float, Field(ge=0)] = 1.0
    action: PolicyAction = "ticket"


class Probes(_Section):
    """Active probes: slower than ``slow_fraction`` of baseline is slow-not-dead.

    Without a ``baseline_gbps`` on the probe or a pinned baseline, the baseline is learned
    per (probe, rail, size, scale): the ``baseline_quantile`` of the last ``baseline_samples``
    healthy results (at least ``healthy_fraction`` of the baseline they were judged
    against, so slightly slow runs never pull it down), judged only once
    ``min_baseline_samples`` exist. Slow probes within ``localise_window`` that are known
    to share a cable (or an endpoint) name it once ``min_failing_probes_to_localise`` agree.
    NCCL's ``#wrong`` > 0 is ``probe_wrong`` with ``wrong_action``. Defaults: the design's
    policy (docs/architecture.md, "Slow-not-dead").
    """

    slow_fraction: Fraction = 0.9
    min_failing_probes_to_localise: Annotated[int, Field(ge=1)] = 2
    baseline_samples: Annotated[int, Field(ge=1)] = 20
    min_baseline_samples: Annotated[int, Field(ge=1)] = 3
    localise_window: Seconds = 600.0
    action: PolicyAction = "isolatePort"
    # a high quantile: a few slow-ish results in the window do not move it
    baseline_quantile: Fraction = 0.9
    healthy_fraction: Fraction = 0.97  # above the jitter of a healthy link's runs (~1 %)
    # corrupted collective results: a person looks now (GPU, NVLink or the fabric)
    wrong_action: PolicyAction = "page"


class Counters(_Section):
    """Counter bookkeeping."""

    saturation_action: PolicyAction = "ticket"


class Stream(_Section):
    """Stream semantics."""

    allowed_lateness: Seconds = 60.0
    # Event time is bounded by the time the broker received the message (topics use
    # LogAppendTime): a ``ts`` further ahead than this is a dead letter, so one message from
    # a skewed or forged clock cannot move a port's notion of "newest" and blind it.
    max_clock_skew: Seconds = 300.0
    # and a ``ts`` older than this before its arrival is refused too (beyond the ledger's
    # raw-counter retention it could only be stored to be dropped, and ts=0 is a bug)
    max_event_age: Seconds = 30 * 86400.0
    # Within the skew, a ``ts`` more than this ahead of its arrival is taken at its arrival
    # plus this (``schemas.acceptance.at_arrival``): one message stamped ahead cannot move a
    # detector's "newest" past the broker's clock (by more than this). At most the lateness,
    # so a real event stamped after the message arrived is never late; the slack leaves
    # alone clocks a few seconds ahead and the simulator, which stamps a step's messages up
    # to one interval (10 s) ahead of publishing them.
    arrival_slack: Seconds = 10.0

    @model_validator(mode="after")
    def _slack_within_lateness(self) -> Stream:
        if self.arrival_slack > self.allowed_lateness:
            raise ValueError("arrivalSlack must not exceed allowedLateness (a real event "
                             "after a message stamped ahead would look late)")
        return self


class Staleness(_Section):
    """Silence is a state: a device or port that stops reporting becomes ``stale``.

    Each device's expected reporting interval is learned from its own history (a smoothed
    gap between its messages) or, before it has one, ``default_interval`` when set. It is
    stale once the rest of the fabric's event time has moved more than ``interval_factor``
    of its intervals past its last message (a port: past its last good sample while its
    device went on reporting). ``min_interval`` keeps a burst of back-to-back messages from
    teaching a tiny interval. ``ticket`` by default: a silent port is unknown, not broken,
    so it is never isolated on silence alone.
    """

    interval_factor: Annotated[float, Field(gt=1)] = 3.0
    default_interval: Seconds | None = None
    min_interval: Seconds = 0.5
    action: Literal["ticket", "page", "none"] = "ticket"


class Shadow(_Section):
    """Dry-run: runbooks decide and record but change nothing, per fabric or detection kind."""

    all: bool = False
    fabrics: list[str] = Field(default_factory=list)
    detections: list[str] = Field(default_factory=list)

    def applies(self, fabric: str, detection: str) -> bool:
        return self.all or fabric in self.fabrics or detection in self.detections


class Runbook(_Section):
    """Timers of the remediation runbook."""

    clean_counters_wait: Seconds = 86400.0
    step_reminder: Seconds = 4 * 3600.0
    step_escalation: Seconds = 24 * 3600.0
    approval_timeout: Seconds = 7 * 86400.0
    # A cable returned to service this often within ``repeat_window`` starts its next runbook
    # at the rung after the one that last fixed it; ``repeat_human_after`` returns and a human
    # decides instead (UFM's port-health plugin stops re-admitting after the 2nd-3rd time).
    repeat_window: Seconds = 30 * 86400.0
    repeat_next_rung_after: int = Field(default=2, ge=1)
    repeat_human_after: int = Field(default=3, ge=1)


class CheckCommand(_Section):
    """One return-to-service check as an argument template for the real tool (never a shell).

    ``prefix`` is the launcher (``srun -N2 -w {node},{peer} --`` or ``mpirun -H ...``) put
    before ``argv``. Placeholders, each validated before substitution: ``{hca}`` (the host
    HCA, ``mlx5_1``), ``{hca_port}``, ``{node}`` (the host behind the link), ``{peer}`` (the
    probe partner on the same rail, or the other end's host for a reverse run), ``{rail}``,
    ``{device}``, ``{port}`` (the isolated switch end). ``size`` is the message size whose
    bandwidth is judged (default: the largest in the output), ``scale`` the ranks the probe
    spans (the baseline's key: a 2-rank ib_write_bw and a 16-rank all-reduce differ).
    """

    argv: Annotated[list[str], Field(min_length=1)]
    prefix: list[str] = Field(default_factory=list)
    size: Annotated[int, Field(ge=0)] | None = None
    scale: Annotated[int, Field(ge=1)] = 2
    timeout: Seconds = 900.0
    both_directions: bool = False  # run it again with node and peer swapped


# The documented defaults an operator starts from (workflows/README.md); they are not
# configured checks until written into ``probation.checks`` (or given to the worker as
# ``--check NAME=default``), since the launcher and the partner hosts are the site's own.
DEFAULT_CHECK_TEMPLATES: dict[str, dict[str, Any]] = {
    "ib_write_bw-per-rail": {
        "argv": ["ib_write_bw", "-d", "{hca}", "-i", "{hca_port}", "-F", "--report_gbits",
                 "-D", "10", "{peer}"],
        "prefix": ["srun", "-N1", "-w", "{node}", "--"], "size": 65536, "scale": 2,
        "bothDirections": True},
    "nccl-allreduce-baseline": {
        "argv": ["all_reduce_perf", "-b", "8", "-e", "1G", "-f", "2", "-g", "1"],
        "prefix": ["srun", "-N2", "-w", "{node},{peer}", "--ntasks-per-node=8", "--"],
        "size": 1073741824, "scale": 16},
}


class NormalThresholds(_Section):
    """Hysteresis: a link leaves probation only below these (not the error thresholds) for
    the whole soak, like UFM's port-health plugin's de-isolation. Rates per hour."""

    symbol_errors_per_hour: Annotated[float, Field(ge=0)] = 20.0
    link_error_recovery_per_hour: Annotated[float, Field(ge=0)] = 0.0
    rcv_errors_per_hour: Annotated[float, Field(ge=0)] = 20.0
    xmit_discards_per_hour: Annotated[float, Field(ge=0)] = 100.0
    raw_ber_copper: Annotated[float, Field(gt=0)] = 1e-7
    raw_ber_optic: Annotated[float, Field(gt=0)] = 1e-6
    effective_ber: Annotated[float, Field(gt=0)] = 1e-12
    symbol_ber: Annotated[float, Field(gt=0)] = 5e-15  # 7 symbol errors an hour at NDR 4X
    max_link_downs: Annotated[int, Field(ge=0)] = 0


class Probation(_Section):
    """Return to service under traffic: the link re-enabled with the node's rail still
    fenced, probes against pinned baselines, then the clean-counter soak
    (``runbook.cleanCountersWait``) with the probes repeating every ``probeInterval``.

    ``waive`` lists checks that are not run (recorded as waived, with ``waivedBy``, on every
    runbook they affect); any other check without a configured command fails closed.
    """

    slo_fraction: Fraction = 0.9  # of the pinned baseline (the fabric's health SLO)
    probe_interval: Seconds = 3600.0
    waive: list[str] = Field(default_factory=list)
    waived_by: str | None = None
    waive_reason: str | None = None
    checks: dict[str, CheckCommand] = Field(default_factory=dict)
    # the probe partner per rail: a host known healthy whose HCA on that rail answers the
    # ib_write_bw / all-reduce of a link in probation ({peer} in the templates)
    partners: dict[int, str] = Field(default_factory=dict)
    normal: NormalThresholds = NormalThresholds()

    @model_validator(mode="after")
    def _waiver_has_owner(self) -> Probation:
        if self.waive and not (self.waived_by or "").strip():
            raise ValueError("waive needs waivedBy: who decided these checks are not run")
        if self.probe_interval <= 0:
            raise ValueError("probeInterval must be more than 0")
        return self

    def waived(self) -> dict[str, str]:
        """check -> who waived it (and why), for the runbook's records."""
        why = f" ({self.waive_reason})" if self.waive_reason else ""
        return {c: f"{self.waived_by}{why}" for c in self.waive}


class Incidents(_Section):
    """Correlation: many downs with one cause are one incident, not many port runbooks.

    A switch reboot (or power loss): at least ``switch_share`` of the switch's connected
    ports (from the topology; never fewer than ``switch_min_ports``) go down within
    ``spread`` of each other, whatever the peers report. A node reboot: ``node_share`` of a
    host's rails (at least ``node_min_rails``) down within ``spread``. An incident closes
    once every member link is back and has stayed up for ``settle``, or ``max_open`` after
    its last change whatever is still down (those links are then judged on their own). An
    SM event: downs the subnet manager itself reported (source opensm or UFM) on at least
    ``sm_min_links`` links of at least ``sm_min_devices`` devices within ``spread``, no one
    device on more than half of them (a heavy sweep or a failover, not one switch). A
    down fabricwatch or a technician caused (an isolation, a ladder rung) is excused from
    ``self_grace`` before its action record to ``self_grace`` after its end.
    """

    switch_share: Fraction = 0.5
    switch_min_ports: Annotated[int, Field(ge=1)] = 4
    spread: Seconds = 5.0
    node_share: Fraction = 1.0
    node_min_rails: Annotated[int, Field(ge=1)] = 2
    settle: Seconds = 120.0
    max_open: Seconds = 3600.0
    self_grace: Seconds = 10.0
    sm_min_links: Annotated[int, Field(ge=2)] = 16
    sm_min_devices: Annotated[int, Field(ge=2)] = 8


class IsolateEnd(_Section):
    """Which end of a cable the runbook isolates."""

    host_link: Literal["switch", "host"] = "switch"  # a host link: the switch (leaf) port
    switch_link: Literal["lower", "upper"] = "lower"  # leaf-spine: the lower-tier (leaf) end


class FabricHealth(_Section):
    flap_dampening: FlapDampening = FlapDampening()
    degraded_link: DegradedLink = DegradedLink()
    breaker: Breaker = Breaker()
    error_rates: ErrorRates = ErrorRates()
    ber: Ber = Ber()
    congestion: Congestion = Congestion()
    probes: Probes = Probes()
    counters: Counters = Counters()
    stream: Stream = Stream()
    staleness: Staleness = Staleness()
    shadow: Shadow = Shadow()
    runbook: Runbook = Runbook()
    isolate_end: IsolateEnd = IsolateEnd()
    probation: Probation = Probation()
    incidents: Incidents = Incidents()
    repair_ladder: Annotated[list[str], Field(min_length=1)] = Field(
        default_factory=lambda: ["clean-and-reseat", "swap-optic", "swap-cable",
                                 "swap-switch-port"])
    return_to_service: list[str] = Field(
        default_factory=lambda: ["ib_write_bw-per-rail", "nccl-allreduce-baseline",
                                 "counters-clean-24h"])


class Policy(_Section):
    """The whole policy file."""

    fabric_health: FabricHealth = FabricHealth()

    @classmethod
    def from_mapping(cls, data: Any) -> Policy:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ContractError("a policy file must be a YAML mapping with fabricHealth at the top")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            path = ".".join(str(p) for p in first.get("loc", ()))
            reason = str(first.get("msg", "invalid")).removeprefix("Value error, ")
            raise ContractError(reason, path) from None

    @classmethod
    def from_yaml(cls, text: str) -> Policy:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ContractError(f"not valid YAML: {exc}") from None
        return cls.from_mapping(data)

    @classmethod
    def load(cls, path: Path | None) -> Policy:
        """The policy in ``path``, or the defaults when ``path`` is None."""
        if path is None:
            return cls()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ContractError(f"cannot read policy file {path}: {exc.strerror}") from None
        return cls.from_yaml(text)

    def to_yaml(self) -> str:
        """The effective policy, every default filled in, in the file's own shape."""
        return yaml.safe_dump(self.model_dump(by_alias=True, mode="json"), sort_keys=False)
