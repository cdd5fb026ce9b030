"""Pydantic v2 models of every contract event (ARCHITECTURE.md, "Wire contract v1").

Field names and units are the contract's. Unknown fields are kept (``extra="allow"``) so a
newer producer's message survives a round trip through an older consumer. Wire values of
enums are fixed forever: add, never rename.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from enum import StrEnum
from operator import itemgetter
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    create_model,
    field_validator,
    model_serializer,
    model_validator,
)

CONTRACT_VERSION = 1
MAX_DEVICE_BYTES = 256
MAX_IB_PORT = 255
MAX_ETH_PORT = 1024
MAX_FUTURE_MS = 24 * 3600 * 1000
# Sources that speak InfiniBand, where a port number is an 8-bit field.
IB_SOURCES = frozenset({"opensm", "ufm", "perfquery", "ibdiags", "ibnetdiscover", "iblinkinfo",
                        "ibqueryerrors"})


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class Action(StrEnum):
    ISOLATE_PORT = "isolate_port"
    TICKET = "ticket"
    PAGE = "page"
    NONE = "none"


class DetectionKind(StrEnum):
    FLAP = "flap"
    DEGRADED_LINK = "degraded_link"
    ERROR_RATE = "error_rate"
    BER = "ber"
    COUNTER_SATURATED = "counter_saturated"
    PAUSE_STORM = "pause_storm"
    ECN_PFC_MISCONFIG = "ecn_pfc_misconfig"
    SLOW_PROBE = "slow_probe"
    PROBE_WRONG = "probe_wrong"
    MISWIRE = "miswire"
    MISSING_LINK = "missing_link"
    UNEXPECTED_LINK = "unexpected_link"
    BREAKER_OPEN = "breaker_open"
    CONFIG_POSTURE = "config_posture"  # a configuration audit finding (fabricwatch audit)
    # A device (port 0: the whole device) or a port that stopped reporting while the rest
    # of the fabric went on; ``stale_end`` closes that episode when it reports again.
    STALE = "stale"
    STALE_END = "stale_end"
    # A detection for a device or port the fabric's inventory does not have: the dispatcher
    # records and pages it once per port and starts no runbook (issue 21).
    UNKNOWN_DEVICE = "unknown_device"
    OPTIC_TEMP = "optic_temp"  # a module over its temperature limit or its own baseline
    OPTIC_POWER = "optic_power"  # Rx power below the module's low threshold or falling fast
    CONGESTION = "congestion"  # a port waiting for credits a large share of the time
    HOT_UPLINK = "hot_uplink"  # one uplink of a leaf carrying a multiple of its ECMP peers
    BER_WARNING = "ber_warning"  # BER above the field table's warning level (a ticket)
    DROP_RATE = "drop_rate"  # errors or discards over packets above the policy's limit
    # The subnet manager (fabric.sm): the master SM changed, a standby SM is gone, heavy
    # sweeps per minute over the policy, a port's traps repeating / babbling port disabled.
    SM_FAILOVER = "sm_failover"
    SM_STANDBY_LOST = "sm_standby_lost"
    SWEEP_STORM = "sweep_storm"
    TRAP_STORM = "trap_storm"


def ts_to_ms(value: Any) -> int:
    """Epoch milliseconds from an int/float of milliseconds or an RFC 3339 string."""
    if isinstance(value, bool):
        raise ValueError("ts must be epoch milliseconds or an RFC 3339 string, not a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("ts must be finite")
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"ts {value[:64]!r} is not RFC 3339") from None
        if parsed.tzinfo is None:
            raise ValueError("an RFC 3339 ts needs a UTC offset (a naive time is ambiguous)")
        return int(parsed.timestamp() * 1000)
    raise ValueError("ts must be epoch milliseconds or an RFC 3339 string")


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def check_device(value: str) -> str:
    if not value:
        raise ValueError("device name is empty")
    if len(value.encode("utf-8")) > MAX_DEVICE_BYTES:
        raise ValueError(f"device name is longer than {MAX_DEVICE_BYTES} bytes")
    # C0 controls, DEL and C1 controls (Unicode category Cc); a regex scans in C (a
    # host message names nine devices, a character loop was 3 % of the worker's time)
    if _CONTROL.search(value):
        raise ValueError("device name contains a control character")
    return value


def port_key(device: str, port: int) -> str:
    """The contract's key of a port: ``device:port``."""
    return f"{device}:{port}"


class FieldError(ValueError):
    """A model-level check that knows which field is wrong (pydantic gives those no path):
    the codec reports ``path`` as the contract error's field path."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{FIELD_ERROR_MARK}{path}{FIELD_ERROR_MARK}{reason}")


FIELD_ERROR_MARK = "\x1f"  # unit separator: never in a reason (control characters are refused)

Device = Annotated[str, Field(min_length=1)]
# Strict: a wrong type is a validation error (true, "5" and 5.0 are not counts or ports).
StrictInt = Annotated[int, Field(strict=True)]
# Free text is bounded: one message must not be able to store megabytes in a ledger row.
ShortText = Annotated[str, Field(max_length=64)]  # phys_state, width, speed, a tool's name
Name = Annotated[str, Field(max_length=256)]  # an actor, a step
Ident = Annotated[str, Field(min_length=1, max_length=512)]  # a workflow id
Reason = Annotated[str, Field(max_length=1024)]  # a port event's reason
Note = Annotated[str, Field(max_length=16_384)]  # a runbook record's note
ToolText = Annotated[str, Field(max_length=2 * 1024 * 1024)]  # captured tool output
NonNegInt = Annotated[int, Field(ge=0, strict=True)]
# Floats take ints (JSON has one number type) but not strings or booleans.
StrictFloat = Annotated[float, Field(strict=True)]
NonNegFloat = Annotated[float, Field(ge=0, strict=True)]


class Envelope(BaseModel):
    """Fields every contract message carries."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False,
                              use_enum_values=False)

    v: Literal[1] = 1
    id: Annotated[str, Field(min_length=1, max_length=512)]
    ts: int
    fabric: Annotated[str, Field(min_length=1, max_length=256)]
    source: Annotated[str, Field(min_length=1, max_length=64)]

    @field_validator("ts", mode="before")
    @classmethod
    def _ts(cls, value: Any) -> int:
        ms = ts_to_ms(value)
        if ms < 0:
            raise ValueError("ts is before the Unix epoch")
        if ms > time.time() * 1000 + MAX_FUTURE_MS:
            raise ValueError("ts is more than a day in the future")
        return ms

    def to_wire(self) -> dict[str, Any]:
        """The message as a JSON-ready dict: enums as their wire values, None kept."""
        return self.model_dump(mode="json")


class _PortScoped(Envelope):
    device: Device
    port: StrictInt

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        return check_device(value)

    @model_validator(mode="after")
    def _port_range(self) -> _PortScoped:
        limit = MAX_IB_PORT if self.source in IB_SOURCES else MAX_ETH_PORT
        if not 0 <= self.port <= limit:
            raise FieldError("port", f"port {self.port} is outside 0..{limit} for source "
                             f"{self.source!r}")
        return self

    @property
    def key(self) -> str:
        return port_key(self.device, self.port)


class PortEvent(_PortScoped):
    """A link state change (``fabric.port-events``, key ``device:port``)."""

    kind: Literal["port_event"] = "port_event"
    state: Literal["down", "up"]
    trap: StrictInt | None = None
    phys_state: ShortText | None = None
    reason: Reason | None = None


# Counter name -> its register width in bits where a legacy PMA register is that narrow.
# PortCounters (IBA 16.1.3.5): 16-bit error counters, 8-bit link_downed/recovery and
# 4-bit integrity/overrun; 32-bit xmit_wait. PortCountersExtended and Ethernet are 64-bit.
LEGACY_COUNTER_BITS: dict[str, int] = {
    "symbol_errors": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "rcv_errors": 16,
    "rcv_remote_phys_errors": 16,
    "xmit_discards": 16,
    "xmit_wait": 32,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun": 4,
}

COUNTER_FIELDS: tuple[str, ...] = (
    "symbol_errors", "link_error_recovery", "link_downed", "rcv_errors",
    "rcv_remote_phys_errors", "xmit_discards", "xmit_wait", "local_link_integrity_errors",
    "excessive_buffer_overrun", "fec_corrected", "fec_uncorrectable", "pfc_pause_rx",
    "pfc_pause_tx", "ecn_marked", "cnp_sent", "cnp_handled", "out_of_sequence",
    "local_ack_timeout_err", "rx_discards_phy",
)
GAUGE_FIELDS: tuple[str, ...] = ("raw_ber", "effective_ber", "module_temp_c", "rx_power_dbm")
# Counters added to the contract after its first producers (each left off the wire when
# unset, so earlier producers' bytes and content-hash ids do not change): the PMA data and
# packet counters (data in 4-octet words, as the IB PMA counts them and perfquery prints
# them; an Ethernet collector sends bytes / 4) that congestion, hot-uplink and drop-rate
# rules need, and the PHY's own link-down counter (mlxlink "Link Down Counter"), which is
# not the PMA LinkDowned counter and must not be mixed into ``link_downed``.
TRAFFIC_FIELDS: tuple[str, ...] = ("port_xmit_data", "port_rcv_data", "port_xmit_pkts",
                                   "port_rcv_pkts")
LATER_COUNTER_FIELDS: tuple[str, ...] = (*TRAFFIC_FIELDS, "phy_link_down")
# The link type the field BER table is keyed by, where a collector knows it: the FEC mode
# as the tool prints it (mlxlink "FEC") or its opcode, and the media (``dac``, ``acc``,
# ``active``, ``active_did``, or ``copper`` / ``optic``), each left off the wire when unset.
LINK_TYPE_FIELDS: tuple[str, ...] = ("fec_mode", "media")
_OFF_THE_WIRE_WHEN_UNSET: tuple[str, ...] = ("error", "device", *LATER_COUNTER_FIELDS,
                                             *LINK_TYPE_FIELDS)


class PortSample(BaseModel):
    """One port's counters at one reading. Every counter is optional: null = not reported.

    Counters are the raw cumulative values as read. ``counter_bits`` (optional, beyond the
    contract's list) says how wide the register was where a collector knows it, so that a
    value at the register maximum can be told from a real count.
    """

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    port: StrictInt
    symbol_errors: NonNegInt | None = None
    link_error_recovery: NonNegInt | None = None
    link_downed: NonNegInt | None = None
    rcv_errors: NonNegInt | None = None
    rcv_remote_phys_errors: NonNegInt | None = None
    xmit_discards: NonNegInt | None = None
    xmit_wait: NonNegInt | None = None
    local_link_integrity_errors: NonNegInt | None = None
    excessive_buffer_overrun: NonNegInt | None = None
    fec_corrected: NonNegInt | None = None
    fec_uncorrectable: NonNegInt | None = None
    raw_ber: NonNegFloat | None = None
    effective_ber: NonNegFloat | None = None
    width: ShortText | None = None
    speed: ShortText | None = None
    pfc_pause_rx: NonNegInt | None = None
    pfc_pause_tx: NonNegInt | None = None
    ecn_marked: NonNegInt | None = None
    cnp_sent: NonNegInt | None = None
    cnp_handled: NonNegInt | None = None
    out_of_sequence: NonNegInt | None = None
    local_ack_timeout_err: NonNegInt | None = None
    rx_discards_phy: NonNegInt | None = None
    module_temp_c: StrictFloat | None = None
    rx_power_dbm: StrictFloat | None = None
    counter_bits: dict[str, StrictInt] | None = None
    port_xmit_data: NonNegInt | None = None
    port_rcv_data: NonNegInt | None = None
    port_xmit_pkts: NonNegInt | None = None
    port_rcv_pkts: NonNegInt | None = None
    phy_link_down: NonNegInt | None = None
    fec_mode: ShortText | None = None
    media: ShortText | None = None
    # Set when the collector could not read this port this time (a NIC that disappeared, an
    # unreadable file, a value that is not a number, a tool that timed out): the port is
    # named, its counters are whatever could be read (often none), and it is not healthy.
    error: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    # The sample's own device where it is not the message's: a host agent sends one
    # message per host (``device`` = the host) whose samples are its HCAs' ports
    # (``node0042/mlx5_3``). ``Counters.split`` gives consumers one message per device.
    device: Device | None = None

    @field_validator("device")
    @classmethod
    def _device(cls, value: str | None) -> str | None:
        return None if value is None else check_device(value)

    @model_serializer(mode="wrap")
    def _unset_additions_stay_off_the_wire(self, handler: SerializerFunctionWrapHandler
                                           ) -> dict[str, Any]:
        # These came after contract v1's first producers: left out when unset, every other
        # producer's bytes and content-hash ids stay what they were.
        data: dict[str, Any] = handler(self)
        for name in _OFF_THE_WIRE_WHEN_UNSET:
            if data.get(name, 0) is None:
                del data[name]
        return data


class Counters(Envelope):
    """A batch of port samples of one device (``fabric.counters``, key ``device``)."""

    kind: Literal["counters"] = "counters"
    device: Device
    ports: list[PortSample]

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        return check_device(value)

    @model_validator(mode="after")
    def _port_range(self) -> Counters:
        limit = MAX_IB_PORT if self.source in IB_SOURCES else MAX_ETH_PORT
        seen: set[tuple[str, int]] = set()
        for i, sample in enumerate(self.ports):
            if not 0 <= sample.port <= limit:
                raise FieldError(f"ports.{i}.port",
                                 f"ports.{i}.port {sample.port} is outside 0..{limit}")
            if sample.device is not None:
                where = (sample.device, sample.port)
                if where in seen:
                    raise FieldError(f"ports.{i}", f"ports.{i} repeats port {sample.port} "
                                     f"of device {sample.device!r}")
                seen.add(where)
        return self

    def port_errors(self) -> Iterable[tuple[int, str | None]]:
        """(port, the collector's error reading it or None), per sample."""
        return ((s.port, s.error) for s in self.ports)

    def good_ports(self) -> list[int] | None:
        """The ports, in order, when no sample carries an error; else None."""
        if any(s.error is not None for s in self.ports):
            return None
        return [s.port for s in self.ports]

    def split(self) -> list[Counters]:
        """One message per device: itself when no sample names its own device.

        A part's id is ``{id}/{device}`` (deterministic, so a redelivery splits the same);
        its samples keep their order (and their ``device``, now the part's own).
        """
        if all(s.device is None for s in self.ports):
            return [self]
        groups: dict[str, list[PortSample]] = {}
        for s in self.ports:
            groups.setdefault(s.device or self.device, []).append(s)
        # model_copy(update=...) without its per-copy overhead (a host agent's message
        # is split on the hot path): the same values, fields set and extras
        values, extra = self.__dict__, self.__pydantic_extra__
        fields_set = {"id", "device", "ports", *self.__pydantic_fields_set__}
        return [checked_model(Counters, {**values, "id": f"{self.id}/{name}", "device": name,
                                         "ports": samples},
                              set(fields_set), dict(extra) if extra is not None else None)
                for name, samples in groups.items()]


def _column_annotation(name: str) -> Any:
    """``list[T]`` for a sample field of type ``T`` (its constraints kept per element)."""
    info = PortSample.model_fields[name]
    element = (Annotated[(info.annotation, *info.metadata)]
               if info.metadata else info.annotation)
    return list[element] if name == "port" else list[element] | None  # type: ignore[valid-type]


class _ColumnsBase(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    @field_validator("device", check_fields=False)
    @classmethod
    def _device(cls, value: list[str | None] | None) -> list[str | None] | None:
        if value is None:
            return None
        names = [d for d in value if d is not None]
        if (all(names) and max(map(len, names), default=0) * 4 <= MAX_DEVICE_BYTES
                and not _CONTROL.search("".join(names))):
            return value  # every name passes check_device (UTF-8: at most 4 bytes a char)
        return [None if d is None else check_device(d) for d in value]

    @model_serializer(mode="wrap")
    def _absent_columns_stay_off_the_wire(self, handler: SerializerFunctionWrapHandler
                                          ) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


# One list per PortSample field, each element validated as the row's field would be (so a
# column's values follow exactly the rules of the samples they stand for); unknown columns
# are kept like a sample's unknown fields, and must be lists too (``CounterColumns``).
_COLUMN_FIELDS: dict[str, Any] = {
    name: (_column_annotation(name), ... if name == "port" else None)
    for name in PortSample.model_fields}
SampleColumns = create_model("SampleColumns", __base__=_ColumnsBase, **_COLUMN_FIELDS)


def columns_wire(message: dict[str, Any]) -> dict[str, Any]:
    """A ``counters`` message as JSON (``ports``: one object per sample) turned into its
    ``counter_columns`` form: one list per field that any sample reports, the field's
    order of first appearance, ``port`` first. A field no sample reports stays off."""
    samples: list[dict[str, Any]] = message["ports"]
    names: dict[str, None] = {"port": None}
    for sample in samples:
        names.update(dict.fromkeys(sample))
    columns = {}
    for name in names:
        col = [sample.get(name) for sample in samples]
        if name == "port" or col.count(None) != len(col):
            columns[name] = col
    out = {k: v for k, v in message.items() if k != "ports"}
    out["kind"] = "counter_columns"
    out["columns"] = columns
    return out


# Every PortSample field's value where a sample does not carry it (all None but ``port``,
# which every sample carries): a columnar message's samples are built as pydantic's
# ``model_construct`` would build them, without its per-field default lookups.
_SAMPLE_NONE: dict[str, None] = dict.fromkeys(PortSample.model_fields)
assert all(info.default is None for name, info in PortSample.model_fields.items()  # noqa: S101
           if name != "port"), "a PortSample field's default is not None"
assert list(Counters.model_fields) == ["v", "id", "ts", "fabric", "source", "kind",  # noqa: S101
                                       "device", "ports"], "CounterColumns.rows needs this"


def values_at(keys: Sequence[Any]) -> Callable[[Any], tuple[Any, ...]]:
    """The values at ``keys`` (indices of a row, names of a dict) as a tuple, in C
    (``itemgetter`` of one key gives the value, not a tuple)."""
    if len(keys) == 1:
        only = keys[0]
        return lambda values: (values[only],)
    if not keys:
        return lambda values: ()
    return itemgetter(*keys)


_new_object = object.__new__
_set_attr = object.__setattr__
M = TypeVar("M", bound=BaseModel)


def checked_model(cls: type[M], values: dict[str, Any], fields_set: set[str],
                  extra: dict[str, Any] | None) -> M:
    """An instance of ``cls`` from ``values`` its own rules already checked, without
    pydantic's validation: the one place the hot paths (``schemas.fast_counters``, the
    columnar messages' samples) build models. ``values`` in field order, as pydantic's
    ``__dict__``; ``extra`` the unknown fields kept."""
    obj = _new_object(cls)
    _set_attr(obj, "__dict__", values)
    _set_attr(obj, "__pydantic_fields_set__", fields_set)
    _set_attr(obj, "__pydantic_extra__", extra)
    _set_attr(obj, "__pydantic_private__", None)
    return obj


def column_port_errors(ports: list[int], errors: list[str | None] | None
                       ) -> Iterable[tuple[int, str | None]]:
    """(port, its error or None) from a ports column and an error column (None: absent)."""
    return zip(ports, errors if errors is not None else [None] * len(ports), strict=True)


def column_good_ports(ports: list[int], errors: list[str | None] | None) -> list[int] | None:
    """The ports column when the error column names no error; else None."""
    if errors is not None and errors.count(None) != len(errors):
        return None
    return ports


class CounterColumns(Envelope):
    """A device's port samples as columns (``fabric.counters``, key ``device``).

    The same content as a ``Counters`` message, one list per sample field instead of one
    object per port: ``columns.port`` names the ports and every other column is as long,
    its element ``i`` the value for port ``i`` (null: not reported for that port, an absent
    column: not reported at all). A producer that sends many ports per message (a switch's
    64, a 100k-port poller) spends far less to encode it and every consumer far less to
    decode it. ``rows()`` is the equal ``Counters`` message.
    """

    kind: Literal["counter_columns"] = "counter_columns"
    device: Device
    columns: SampleColumns

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        return check_device(value)

    @model_validator(mode="after")
    def _shape(self) -> CounterColumns:
        cols = self.column_map()
        n = len(cols["port"])
        values = cols.values()
        # (the common message in C: lists, all as long as the ports; else the first bad one)
        if not ({*map(type, values)} == {list} and {*map(len, values)} == {n}):
            self._refuse_columns(cols, n)
        limit = MAX_IB_PORT if self.source in IB_SOURCES else MAX_ETH_PORT
        ports = cols["port"]
        if ports and not (0 <= min(ports) and max(ports) <= limit):
            i = next(i for i, p in enumerate(ports) if not 0 <= p <= limit)
            raise FieldError(f"columns.port.{i}",
                             f"columns.port.{i} {ports[i]} is outside 0..{limit}")
        devices = cols.get("device")
        if devices is not None:
            seen: set[tuple[str, int]] = set()
            for i, (dev, port) in enumerate(zip(devices, ports, strict=True)):
                if dev is not None:
                    if (dev, port) in seen:
                        raise FieldError(f"columns.port.{i}", f"columns.port.{i} repeats port "
                                         f"{port} of device {dev!r}")
                    seen.add((dev, port))
        return self

    @staticmethod
    def _refuse_columns(cols: dict[str, Any], n: int) -> None:
        """The first column that is not a list of ``n`` values, refused."""
        for name, col in cols.items():
            if not isinstance(col, list):
                raise FieldError(f"columns.{name}",
                                 f"columns.{name} must be a list, not {type(col).__name__}")
            if len(col) != n:
                raise FieldError(f"columns.{name}", f"columns.{name} has {len(col)} values "
                                 f"for {n} ports")

    @property
    def port_count(self) -> int:
        return len(self.columns.port)  # type: ignore[attr-defined]

    def unknown_columns(self) -> Iterable[str]:
        """The names of the columns that are not sample fields."""
        return self.columns.__pydantic_extra__ or ()

    def column_map(self) -> dict[str, list[Any]]:
        """The columns present (declared and unknown ones), by field name."""
        cols: BaseModel = self.columns
        present = {k: v for k, v in cols.__dict__.items() if v is not None}
        if cols.__pydantic_extra__:
            present.update(cols.__pydantic_extra__)
        return present

    def samples(self, indices: Iterable[int] | None = None) -> list[PortSample]:
        """The ``PortSample`` of each port (or of the ports at ``indices``), with every
        column's value for it (an unknown column's null left out, as a sample would not
        carry it). The columns were validated by the samples' own rules."""
        cols = self.column_map()
        names = list(cols)
        if indices is None:
            rows: Iterable[Sequence[Any]] = zip(*cols.values(), strict=True)
        else:
            rows = ([cols[n][i] for n in names] for i in indices)
        known = [n for n in names if n in _SAMPLE_NONE]
        fields_set = set(known)
        out = []
        if len(known) == len(names):  # the common shape: a dict per sample, no pydantic call
            for values in rows:
                values_of = dict(_SAMPLE_NONE)
                values_of.update(zip(known, values, strict=True))
                out.append(checked_model(PortSample, values_of, set(fields_set), {}))
            return out
        # Unknown columns (a host agent's vendor counters) become each sample's extras, its
        # nulls left out: what ``PortSample.model_construct`` makes of the same dict, fields
        # set and extras alike, without its per-field default lookups.
        unknown = [n for n in names if n not in _SAMPLE_NONE]
        pick_known = values_at([i for i, n in enumerate(names) if n in _SAMPLE_NONE])
        pick_unknown = values_at([i for i, n in enumerate(names) if n not in _SAMPLE_NONE])
        for values in rows:
            values_of = dict(_SAMPLE_NONE)
            values_of.update(zip(known, pick_known(values), strict=True))
            extra = {n: v for n, v in zip(unknown, pick_unknown(values), strict=True)
                     if v is not None}
            out.append(checked_model(PortSample, values_of, set(fields_set), extra))
        return out

    def rows(self, samples: list[PortSample] | None = None) -> Counters:
        """The equal row-form message (with ``samples`` instead: its envelope only)."""
        d = self.__dict__
        return checked_model(Counters, {
            "v": d["v"], "id": d["id"], "ts": d["ts"], "fabric": d["fabric"],
            "source": d["source"], "kind": "counters", "device": d["device"],
            "ports": self.samples() if samples is None else samples},
            {"ports", "kind", *self.__pydantic_fields_set__} - {"columns"},
            dict(self.__pydantic_extra__ or {}))

    def port_errors(self) -> Iterable[tuple[int, str | None]]:
        """(port, the collector's error reading it or None), per port."""
        cols: Any = self.columns
        return column_port_errors(cols.port, cols.error)

    def good_ports(self) -> list[int] | None:
        """The ports column when no port carries an error; else None."""
        cols: Any = self.columns
        return column_good_ports(cols.port, cols.error)

    def names_devices(self) -> bool:
        """Whether some port names its own device (a host agent's HCAs)."""
        devices: list[str | None] | None = self.columns.device  # type: ignore[attr-defined]
        return devices is not None and devices.count(None) != len(devices)

    def split(self) -> list[CounterColumns]:
        """One message per device, as ``Counters.split``: itself when no port names its
        own device; a part's id is ``{id}/{device}``, its columns those ports' values."""
        if not self.names_devices():
            return [self]
        cols: Any = self.columns
        devices: list[str | None] = cols.device
        groups: dict[str, list[int]] = {}
        for i, name in enumerate(devices):
            groups.setdefault(name or self.device, []).append(i)
        full = self.column_map()
        parts = []
        for name, at in groups.items():
            part_cols = type(cols).model_construct(**{
                k: [col[i] for i in at] for k, col in full.items()})
            parts.append(self.model_copy(update={"id": f"{self.id}/{name}", "device": name,
                                                 "columns": part_cols}))
        return parts

    @classmethod
    def of(cls, counters: Counters) -> CounterColumns:
        """The columnar form of a row-form message (its samples' fields as columns)."""
        return cls.model_validate(columns_wire(counters.model_dump(mode="json",
                                                                   exclude_none=True)))


class Probe(Envelope):
    """An active probe result (``fabric.probes``, key ``rail``)."""

    kind: Literal["probe"] = "probe"
    probe: Literal["ib_write_bw", "nccl_allreduce"]
    src: Annotated[str, Field(min_length=1, max_length=512)]
    dst: Annotated[str, Field(min_length=1, max_length=512)]
    rail: NonNegInt
    size_bytes: NonNegInt
    bw_gbps: NonNegFloat
    baseline_gbps: NonNegFloat | None = None


class TopologyLink(BaseModel):
    """One cable as discovered: both ends, and how it trained."""

    model_config = ConfigDict(extra="allow", frozen=True)

    a_device: Device
    a_port: Annotated[int, Field(ge=0, le=MAX_ETH_PORT, strict=True)]
    b_device: Device
    b_port: Annotated[int, Field(ge=0, le=MAX_ETH_PORT, strict=True)]
    width: ShortText | None = None
    speed: ShortText | None = None

    @field_validator("a_device", "b_device")
    @classmethod
    def _device(cls, value: str) -> str:
        return check_device(value)


class Topology(Envelope):
    """A discovered topology snapshot (``fabric.topology``, key ``fabric``)."""

    kind: Literal["topology"] = "topology"
    links: list[TopologyLink]


class Detection(_PortScoped):
    """Something wrong with a port (``fabric.detections``, key ``device:port``)."""

    kind: Literal["detection"] = "detection"
    detection: DetectionKind
    severity: Severity
    action: Action
    evidence: dict[str, Any] = Field(default_factory=dict)
    episode: Annotated[str, Field(min_length=1, max_length=512)]
    # Set when the detection belongs to an open incident / falls in a maintenance window:
    # it is recorded and starts no port runbook (fabric.incidents, fabric.maintenance).
    incident: Ident | None = None
    maintenance: Ident | None = None


class ActionRecord(_PortScoped):
    """One thing a runbook did or, in shadow mode, would have done (``fabric.actions``)."""

    kind: Literal["action"] = "action"
    workflow_id: Ident
    step: Name  # evidence | budget | isolate | ticket | ladder:<rung> | check:<name> | return | abort
    actor: Name  # "fabricwatch" or the human who signalled
    outcome: Literal["done", "refused", "failed", "skipped", "dry_run"]
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    note: Note | None = None
    dry_run: StrictBool = False


class EvidenceRecord(_PortScoped):
    """Tool output captured before anything changes (``fabric.actions``)."""

    kind: Literal["evidence"] = "evidence"
    workflow_id: Ident
    tool: ShortText  # perfquery | mlxlink | iblinkinfo | cable_info | ...
    output: ToolText
    exit_code: StrictInt | None = None


MAX_JOB_NODES = 65_536


class JobPlacement(Envelope):
    """Where a job runs (``fabric.jobs``, key ``job``): its nodes and its time.

    ``nodes`` are host names as the fabric names them (the part of an HCA's device name
    before the ``/``: ``node0042`` of ``node0042/mlx5_3``), in the scheduler's order.
    ``start`` / ``end`` are epoch ms; ``end`` None = still running (or no limit known); a
    running job's ``end`` is the scheduler's expected end. The latest message of a job (by
    ``ts``) says where it is now: a requeued job comes back with new nodes.
    """

    kind: Literal["job"] = "job"
    job: Annotated[str, Field(min_length=1, max_length=256)]
    nodes: Annotated[list[Device], Field(max_length=MAX_JOB_NODES)]
    start: NonNegInt | None = None
    end: NonNegInt | None = None
    gpus_per_node: Annotated[int, Field(ge=0, le=1024, strict=True)] | None = None
    state: Annotated[str, Field(min_length=1, max_length=64)] = "running"
    name: Annotated[str, Field(max_length=512)] | None = None

    @field_validator("job")
    @classmethod
    def _job(cls, value: str) -> str:
        return check_device(value)  # the same rules: printable, bounded

    @field_validator("nodes")
    @classmethod
    def _nodes(cls, value: list[str]) -> list[str]:
        for i, node in enumerate(value):
            try:
                check_device(node)
            except ValueError as exc:
                raise FieldError(f"nodes.{i}", str(exc)) from None
            if "/" in node:
                raise FieldError(f"nodes.{i}", f"node {node[:64]!r} is a host name, not an "
                                 "HCA (no '/')")
        if len(set(value)) != len(value):
            raise ValueError("a node is listed twice")
        return value

    @model_validator(mode="after")
    def _times(self) -> JobPlacement:
        if self.start is not None and self.end is not None and self.end < self.start:
            raise FieldError("end", f"end {self.end} is before start {self.start}")
        return self

    @property
    def key(self) -> str:
        return self.job


MAX_INCIDENT_MEMBERS = 65_536


class IncidentCause(StrEnum):
    """Why many detections are one event. Wire values are fixed forever: add, never rename."""

    SWITCH_REBOOT = "switch_reboot"  # many ports of one switch down within seconds (or power)
    NODE_REBOOT = "node_reboot"  # every rail of one host down together
    SM_EVENT = "sm_event"  # master SM change, heavy-sweep storm, SM-reported subnet error
    MAINTENANCE = "maintenance"  # a maintenance window or exclusion in scope
    BREAKER = "breaker"  # an SU's isolation budget refused: stop and page, not per port


class Incident(Envelope):
    """One root cause and the ports it took with it (``fabric.incidents``, key ``fabric``).

    The stream's correlator publishes an incident when it opens (``state="open"``), again when
    its members change (``"update"``, the whole member list each time) and when its cause has
    cleared and stayed clear for the policy's settle time (``"closed"``, with ``ended``). The
    latest message of an ``incident`` id (by ``ts``) is its state now. ``members`` are port
    keys (``device:port``); a detection of a member while the incident is open carries
    ``incident: <id>`` and starts no port runbook.
    """

    kind: Literal["incident"] = "incident"
    incident: Annotated[str, Field(min_length=1, max_length=512)]
    cause: IncidentCause
    root: Device  # the switch, the host, the SM's node, or the window's scope
    state: Literal["open", "update", "closed"]
    started: NonNegInt  # epoch ms of the first member's event
    ended: NonNegInt | None = None
    members: Annotated[list[Annotated[str, Field(min_length=1, max_length=512)]],
                       Field(max_length=MAX_INCIDENT_MEMBERS)] = Field(default_factory=list)
    su: Annotated[str, Field(max_length=256)] | None = None
    reason: Reason | None = None
    evidence: dict[str, Any] = Field(default_factory=dict)

    @field_validator("root")
    @classmethod
    def _root(cls, value: str) -> str:
        return check_device(value)

    @model_validator(mode="after")
    def _times(self) -> Incident:
        if self.ended is not None and self.ended < self.started:
            raise FieldError("ended", f"ended {self.ended} is before started {self.started}")
        if self.state == "closed" and self.ended is None:
            raise FieldError("ended", "a closed incident says when it ended")
        return self

    @property
    def key(self) -> str:
        return self.fabric


class Maintenance(Envelope):
    """A maintenance window or an exclusion (``fabric.maintenance``, key ``fabric``).

    Scope is one of ``device`` (a switch or host name; a port key ``device:port`` for one
    port), ``su`` or the whole ``fabric``. Detections in scope between ``start`` and ``end``
    are recorded with ``maintenance: <window>`` and start nothing. ``state="ended"`` ends a
    window early; the latest message of a ``window`` id (by ``ts``) is its state now.
    ``exclusion=True`` marks an exclusion-list entry (a port left alone until its TTL ends).
    """

    kind: Literal["maintenance"] = "maintenance"
    window: Annotated[str, Field(min_length=1, max_length=512)]
    scope: Literal["device", "su", "fabric"]
    target: Annotated[str, Field(min_length=1, max_length=512)]  # device, device:port, SU, fabric
    start: NonNegInt
    end: NonNegInt
    state: Literal["active", "ended"] = "active"
    reason: Reason
    actor: Name
    exclusion: StrictBool = False

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        return check_device(value)

    @model_validator(mode="after")
    def _window(self) -> Maintenance:
        if self.end <= self.start:
            raise FieldError("end", f"end {self.end} is not after start {self.start}")
        return self

    @property
    def key(self) -> str:
        return self.fabric


MAX_SM_PORTS = 4096


class SmEvent(Envelope):
    """What the subnet manager did or is (``fabric.sm``, key ``fabric``).

    ``event`` says which:

    * ``sweep``: one heavy sweep, ``start``..``end`` (epoch ms; ``end`` is the ``SUBNET UP``
      that closed it; ``start`` None where the log level showed no sign of its beginning,
      so its duration is unknown, not zero), ``trigger`` what forced it (``trap 128``,
      ``signal HUP``, ``start-up``, ``became master``; None: the log did not say), ``ports`` the port
      keys (``device:port``) whose change the sweep was for, ``devices`` the devices that
      sent the traps;
    * ``state``: the SM ``sm`` is in ``state`` (its own log's "Entering MASTER state", or
      ``sminfo``'s answer about the master); ``priority`` where known;
    * ``standby``: the SMs the fabric has other than the master (``saquery -s``): ``sms``
      (each ``sm`` identity), the whole list each time;
    * ``trap_storm``: the same trap from one port again and again within opensm's aging
      window (``count`` times; opensm logs 10, 20, 50, 100, ...), ``trap`` its number,
      ``device``/``port`` where opensm names them; ``disabled`` when opensm took the
      babbling port down (``babbling_port_policy``).

    ``sm`` names the SM (its port GUID ``0x...`` or node name) the message is about; the
    SM whose log or answer it came from is the ``source``.
    """

    kind: Literal["sm_event"] = "sm_event"
    event: Literal["sweep", "state", "standby", "trap_storm"]
    sm: Annotated[str, Field(min_length=1, max_length=256)]
    # sweep
    start: NonNegInt | None = None
    end: NonNegInt | None = None
    trigger: Annotated[str, Field(max_length=256)] | None = None
    ports: Annotated[list[Annotated[str, Field(min_length=1, max_length=512)]],
                     Field(max_length=MAX_SM_PORTS)] = Field(default_factory=list)
    devices: Annotated[list[Device], Field(max_length=MAX_SM_PORTS)] = Field(
        default_factory=list)
    # state
    state: Literal["master", "standby", "discovering", "not_active"] | None = None
    priority: Annotated[int, Field(ge=0, le=15, strict=True)] | None = None
    # standby
    sms: Annotated[list[Annotated[str, Field(min_length=1, max_length=256)]],
                   Field(max_length=64)] | None = None
    # trap_storm
    trap: NonNegInt | None = None
    count: NonNegInt | None = None
    device: Device | None = None
    port: Annotated[int, Field(ge=0, le=MAX_IB_PORT, strict=True)] | None = None
    disabled: StrictBool = False

    @field_validator("sm")
    @classmethod
    def _sm(cls, value: str) -> str:
        return check_device(value)

    @field_validator("device")
    @classmethod
    def _device(cls, value: str | None) -> str | None:
        return None if value is None else check_device(value)

    @model_validator(mode="after")
    def _shape(self) -> SmEvent:
        if self.event == "sweep":
            if self.end is None:
                raise FieldError("end", "a sweep says when it ended (its SUBNET UP)")
            if self.start is not None and self.end < self.start:
                raise FieldError("end", f"end {self.end} is before start {self.start}")
        elif self.event == "state" and self.state is None:
            raise FieldError("state", "a state event says which state (master, standby, "
                             "discovering, not_active)")
        elif self.event == "standby" and self.sms is None:
            raise FieldError("sms", "a standby event lists the standby SMs (maybe none)")
        elif self.event == "trap_storm" and self.count is None and not self.disabled:
            raise FieldError("count", "a trap storm says how many times the trap came, or "
                             "that the port was disabled")
        return self

    @property
    def duration_ms(self) -> int | None:
        return None if self.start is None or self.end is None else self.end - self.start

    @property
    def key(self) -> str:
        return self.fabric


class DeadLetter(BaseModel):
    """A message that failed validation, kept whole (``fabric.dlq``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    v: Literal[1] = 1
    kind: Literal["dead_letter"] = "dead_letter"
    ts: int  # when it was dead-lettered, epoch ms
    reason: str
    path: str
    source_topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    raw_b64: str  # the bytes exactly as received, base64


AnyEvent = Annotated[
    PortEvent | Counters | CounterColumns | Probe | Topology | Detection | ActionRecord | EvidenceRecord
    | JobPlacement | Incident | Maintenance | SmEvent,
    Field(discriminator="kind"),
]
EVENT_MODELS: dict[str, type[Envelope]] = {
    "port_event": PortEvent,
    "counters": Counters,
    "counter_columns": CounterColumns,
    "probe": Probe,
    "topology": Topology,
    "detection": Detection,
    "action": ActionRecord,
    "evidence": EvidenceRecord,
    "job": JobPlacement,
    "incident": Incident,
    "maintenance": Maintenance,
    "sm_event": SmEvent,
}
EVENT_KINDS = tuple(EVENT_MODELS)
# A counters message in either form (``fabric.counters``).
CountersMessage = Counters | CounterColumns
Event = (PortEvent | Counters | CounterColumns | Probe | Topology | Detection | ActionRecord
         | EvidenceRecord | JobPlacement | Incident | Maintenance | SmEvent)


def message_key(event: Event) -> str:
    """The Kafka key the contract assigns to ``event``."""
    if isinstance(event, Counters | CounterColumns):
        return event.device
    if isinstance(event, Probe):
        return str(event.rail)
    if isinstance(event, Topology):
        return event.fabric
    if isinstance(event, JobPlacement):
        return event.job
    if isinstance(event, Incident | Maintenance | SmEvent):
        return event.fabric
    return event.key
