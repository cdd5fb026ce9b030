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

from schemas.ber_table import TableError, default_table, fec_opcodes, lookup, media_group
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
    """BER by link type, from NVIDIA's field BER table (``schemas.ber_table``, V05).

    Each link is judged against the table's row for its speed, FEC mode and media (from
    the sample; where it does not say, the port's last known values, then ``asic``,
    ``fec`` and ``media`` here and ``degradedLink.expectSpeed``). Pre-FEC (raw) BER is
    corrected FEC errors, post-FEC (effective) BER uncorrectable errors, symbol BER symbol
    errors, each over the bits the link carried. Raw and effective BER are computed over
    ``window`` of event time from the counters' deltas (UFM's PDR plugin reads its counters
    every ``T_ISOLATE`` = 300 s); the tool's own since-clear BER gauge (mlxlink's) is judged
    only while a port has no such window yet or does not report the counter, and the
    evidence says so. Symbol errors are judged over ``errorRates.symbolErrorWindows`` (12 and
    125 min), each window's level being the table's times its entry in
    ``symbol_window_factors``: PDR's 1e-14 over 12 min and 1e-15 over 125 min at NDR.

    Hysteresis: an episode opens above *error* (``action``) and closes only below *normal*;
    above *warning* outside an episode is a ``ber_warning`` detection (``warning_action``),
    closed below *normal* too. ``fire_at: normal`` judges at the normal level alone (the
    return-to-service soak: anything above normal fails the link).
    """

    asic: Literal["7nm", "16nm"] = "7nm"
    fec: Annotated[str, Field(min_length=1, max_length=80)] = "PLR"
    media: Annotated[str, Field(min_length=1, max_length=40)] = "optic"
    window: Seconds = 300.0
    symbol_window_factors: list[Annotated[float, Field(gt=0, le=1)]] = Field(
        default_factory=lambda: [1.0, 0.1])
    fire_at: Literal["error", "normal"] = "error"
    action: PolicyAction = "isolatePort"
    warning_action: PolicyAction = "ticket"

    @model_validator(mode="after")
    def _known_link_type(self) -> Ber:
        if fec_opcodes(self.fec) is None:
            raise ValueError(f"unknown FEC mode {self.fec!r} (an opcode, PLR, KP4, LL, RS, "
                             f"NONE, or the table's name)")
        if media_group(self.media) is None:
            raise ValueError(f"unknown media {self.media!r} (dac, acc, active, active_did, "
                             f"copper, optic)")
        if self.window <= 0:
            raise ValueError("window must be more than 0")
        return self


class DropRate(_Section):
    """Packet drop rate: receive errors over packets received, transmit discards over
    packets sent, per ``Ber.window``, where the port reports its packet counters. The limit
    is UFM's PDR plugin's ``MAX_PDR`` (1e-12, pdr_deterministic.conf). ``ticket`` by default:
    a transmit discard can be congestion rather than a bad cable."""

    max_drop_rate: Annotated[float, Field(gt=0, lt=1)] = 1e-12
    action: PolicyAction = "ticket"


class Congestion(_Section):
    """Congestion: credit waits (IB), hot uplinks, pause storms and ECN/PFC (RoCE).

    Pause storm, SONiC's PFC watchdog rule: a queue paused *and not draining* (no data
    transmitted) for more than ``pause_storm_fraction`` of the interval; its Mellanox
    detection is "paused more than 99 % of the interval". A paused port that still sends
    data is congested, not stormed. SONiC's own storm counters (``pfcwd`` stats) fire it too.

    ``congestion``: PortXmitWait as a share of the interval, each tick
    ``xmit_wait_tick_bytes`` of the port's line rate lost (NVIDIA's ibdiagnet congestion
    assessment: Quantum, Quantum-2 and Quantum-3 count a tick per 8 bytes of a port; older
    Switch-IB counts per 32 bytes per lane). Judged over ``congestion_window`` of event time.
    Above ``congestion_fraction`` (the design's policy: a tenth of the bandwidth lost).

    ``hot_uplink`` (the design's policy): at the same cadence, one uplink of a leaf (from
    the plan) whose transmitted data or credit-wait share is more than ``hot_uplink_factor``
    times the median of its ECMP peers' (the leaf's other uplinks), and busy enough to matter
    (``hot_uplink_min_utilisation`` of its line rate, or waiting over the congestion level).
    """

    pause_storm_fraction: Fraction = 0.99  # of the interval a queue spent paused, not draining
    pause_frames_per_s_storm: Annotated[float, Field(ge=0)] = 50_000.0
    min_pause_frames_per_s: Annotated[float, Field(ge=0)] = 1000.0  # below: no verdict on ECN
    min_ecn_to_pause_ratio: Annotated[float, Field(ge=0)] = 1.0
    xmit_wait_tick_bytes: Annotated[float, Field(gt=0)] = 8.0
    congestion_fraction: Fraction = 0.1
    congestion_window: Annotated[float, BeforeValidator(parse_duration_s),
                                 Field(gt=0)] = 60.0
    hot_uplink_factor: Annotated[float, Field(gt=1)] = 3.0
    hot_uplink_min_utilisation: Fraction = 0.5
    hot_uplink_min_peers: Annotated[int, Field(ge=1)] = 2
    action: PolicyAction = "ticket"


class Optics(_Section):
    """Optical modules, from their DDM readings (mlxlink, the host agent).

    Temperature: NVIDIA UFM's port-health (PDR) plugin isolates a port whose module is above
    ``temp_limit_c`` (70 °C) or ``temp_rise_c`` (10 °C) above the port's own baseline. The
    baseline is the port's temperature averaged with time constant ``baseline_window``,
    updated every ``baseline_every`` of event time and not while an optic episode is open (a
    heating module does not teach itself its heat). An episode ends ``hysteresis_c`` below
    the level that opened it, so readings jittering around the limit are one episode.

    Rx power (the design's policy): below the module's own low threshold where the collector
    reports it (mlxlink prints the module's range after the value: ``rx_power_low_dbm``),
    else below ``rx_power_low_dbm`` (about the low alarm of 400G DR4/SR4 modules; the
    fixture's CX7 DR4 module says -9.9 dBm), or more than ``rx_power_drop_db`` below the
    port's baseline (a fast fall: a slow drift moves the baseline with it). It ends
    ``hysteresis_db`` above the opening level.
    """

    temp_limit_c: float = 70.0
    temp_rise_c: Annotated[float, Field(gt=0)] = 10.0
    hysteresis_c: Annotated[float, Field(ge=0)] = 2.0
    rx_power_low_dbm: float = -10.0
    rx_power_drop_db: Annotated[float, Field(gt=0)] = 3.0
    hysteresis_db: Annotated[float, Field(ge=0)] = 0.5
    baseline_window: Annotated[float, BeforeValidator(parse_duration_s), Field(gt=0)] = 86400.0
    baseline_every: Annotated[float, BeforeValidator(parse_duration_s), Field(gt=0)] = 600.0
    temp_action: PolicyAction = "isolatePort"
    power_action: PolicyAction = "ticket"


class Probes(_Section):
    """Active probes: slower than ``slow_fraction`` of baseline is slow-not-dead.

    Without a ``baseline_gbps`` on the probe or a pinned baseline, the baseline is learned
    per (probe, rail, size, scale): the ``baseline_quantile`` of the last ``baseline_samples``
    healthy results (at least ``healthy_fraction`` of the baseline they were judged
    against, so slightly slow runs never pull it down), judged only once
    ``min_baseline_samples`` exist. Slow probes within ``localise_window`` that are known
    to share a cable (or an endpoint) name it once ``min_failing_probes_to_localise`` agree;
    a cable named by routes gets ``action`` after ``localise_confirm`` unless
    ``common_mode_cables`` of its switch are named with it (then one ticket for the switch).
    NCCL's ``#wrong`` > 0 is ``probe_wrong`` with ``wrong_action``. Defaults: the design's
    policy (docs/architecture.md, "Slow-not-dead").
    """

    slow_fraction: Fraction = 0.9
    min_failing_probes_to_localise: Annotated[int, Field(ge=1)] = 2
    baseline_samples: Annotated[int, Field(ge=1)] = 20
    min_baseline_samples: Annotated[int, Field(ge=1)] = 3
    localise_window: Seconds = 600.0
    # A cable the routes name is acted on only once it has stayed named this long (event
    # time) with fewer than ``common_mode_cables`` cables of its switch named beside it:
    # slow pairs across many cables of one switch are the switch's or a congestion's (an
    # ECN misconfiguration slows every pair through it), one ticket, not a cable each.
    localise_confirm: Seconds = 60.0
    common_mode_cables: Annotated[int, Field(ge=2)] = 3
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
    the whole soak, like UFM's port-health plugin's de-isolation. Rates per hour. BER is
    judged at the field BER table's *normal* level for the link's type (``Ber``)."""

    symbol_errors_per_hour: Annotated[float, Field(ge=0)] = 20.0
    link_error_recovery_per_hour: Annotated[float, Field(ge=0)] = 0.0
    rcv_errors_per_hour: Annotated[float, Field(ge=0)] = 20.0
    xmit_discards_per_hour: Annotated[float, Field(ge=0)] = 100.0
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
    its last change whatever is still down (those links are then judged on their own), and
    at most ``max_open`` after it started (a member that keeps bouncing is a change each
    time: its own flapping is judged from then). An
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


class SmHealth(_Section):
    """The subnet manager's health (``fabric.sm``, ``streams.sm``).

    Defaults are the design's policy, except where opensm sets the number itself
    (opensm/osm_trap_rcv.c): it reports a trap repeating from 10 receipts within its aging
    window ("Received trap %u times consecutively") and disables a babbling port at 250.

    * ``sweep_storm``: more than ``max_heavy_sweeps`` heavy sweeps within ``sweep_window``
      (every link flap forces one; each stalls the whole fabric's routing for its duration);
    * ``sm_failover``: the master SM changed (another SM entered MASTER, or ``sminfo``
      answers with another master);
    * ``sm_standby_lost``: a standby SM that ``saquery -s`` listed is gone, or fewer than
      ``min_standbys`` remain;
    * ``trap_storm``: a port's trap repeating at least ``trap_storm_count`` times, or
      opensm disabling it as babbling.
    """

    max_heavy_sweeps: Annotated[int, Field(ge=1)] = 3
    sweep_window: Seconds = 60.0
    min_standbys: Annotated[int, Field(ge=0)] = 1
    trap_storm_count: Annotated[int, Field(ge=1)] = 10
    failover_action: PolicyAction = "page"
    standby_lost_action: PolicyAction = "ticket"
    sweep_storm_action: PolicyAction = "page"
    trap_storm_action: PolicyAction = "ticket"


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
    drop_rate: DropRate = DropRate()
    congestion: Congestion = Congestion()
    optics: Optics = Optics()
    probes: Probes = Probes()
    counters: Counters = Counters()
    stream: Stream = Stream()
    staleness: Staleness = Staleness()
    shadow: Shadow = Shadow()
    runbook: Runbook = Runbook()
    isolate_end: IsolateEnd = IsolateEnd()
    probation: Probation = Probation()
    incidents: Incidents = Incidents()
    sm_health: SmHealth = SmHealth()
    repair_ladder: Annotated[list[str], Field(min_length=1)] = Field(
        default_factory=lambda: ["clean-and-reseat", "swap-optic", "swap-cable",
                                 "swap-switch-port"])
    return_to_service: list[str] = Field(
        default_factory=lambda: ["ib_write_bw-per-rail", "nccl-allreduce-baseline",
                                 "counters-clean-24h"])

    @model_validator(mode="after")
    def _ber_link_type_in_table(self) -> FabricHealth:
        windows = self.error_rates.symbol_error_windows
        if len(self.ber.symbol_window_factors) != len(windows):
            raise ValueError(f"ber.symbolWindowFactors needs one factor per "
                             f"errorRates.symbolErrorWindows window ({len(windows)})")
        # The link type a port that says nothing of itself is judged as: the table's row for
        # expectSpeed, or (a speed the table lacks: an SDR lab, XDR) its strictest row for
        # the media; a FEC mode or media the table does not know at all is refused.
        speeds = sorted({r.speed for r in default_table() if r.asic == self.ber.asic})
        if not speeds:
            raise ValueError(f"ber.asic {self.ber.asic!r} has no row in the field BER table")
        speed: str = self.degraded_link.expect_speed
        if speed.upper() not in speeds:
            speed = speeds[-1]
        try:
            lookup(speed, self.ber.fec, self.ber.media, self.ber.asic)
        except TableError as exc:
            raise ValueError(f"ber: the default link type is not in the field BER table: "
                             f"{exc}") from None
        return self


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
