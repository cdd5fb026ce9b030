"""Counters messages checked without a pydantic validation per sample, by the models' rules.

``decode_counters(obj)`` returns the ``Counters`` that ``Counters.model_validate(obj)`` would
return (equal fields, extras and fields-set, ``PortSample`` objects inside), or None when it
is not sure the message is valid: the codec then runs ``model_validate``, so an invalid
message gets exactly pydantic's error and dead-letter reason. The fast path only ever says
yes to what the model would accept; everything doubtful takes the slow path.

The per-field checks are derived from the models' annotations (``NonNegInt | None``,
``ShortText | None``, ...; see ``_spec``). A field whose type, constraints or validators this
module does not know makes ``FAST_FIELDS`` miss it: a message carrying such a field takes
the slow path, and ``tests/unit/schemas/test_fast_counters.py`` fails until it is taught
here, so a field another change adds is covered or loudly not.
"""

from __future__ import annotations

import math
import os
import time
import types
import typing
from collections.abc import Callable
from functools import partial
from operator import is_not, itemgetter
from typing import Any, NamedTuple, Union

from annotated_types import Ge, MaxLen, MinLen
from pydantic.fields import FieldInfo

from schemas.events import (
    IB_SOURCES,
    MAX_DEVICE_BYTES,
    MAX_ETH_PORT,
    MAX_FUTURE_MS,
    MAX_IB_PORT,
    Counters,
    PortSample,
    checked_model,
    values_at,
)

# Field kinds the hot loop tests inline (no call per value).
NN_INT, INT, NN_FLOAT, FLOAT, TEXT, BITS, DEVICE = range(7)
# Beyond 64 bits orjson and pydantic part ways on big numbers: leave those to the model.
_MAX_INT = (1 << 64) - 1

# The validators the checks below reproduce, per model: any other (a new field_validator or
# model_validator) turns the fast path off for that model until it is taught here.
_KNOWN_VALIDATORS: dict[type, set[str]] = {
    PortSample: {"_device", "_unset_additions_stay_off_the_wire"},
    Counters: {"_device", "_port_range", "_ts"},
}


def _validators(model: type) -> set[str]:
    decorators = model.__pydantic_decorators__  # type: ignore[attr-defined]
    names: set[str] = set()
    for group in (decorators.field_validators, decorators.model_validators,
                  decorators.root_validators, decorators.validators,
                  decorators.model_serializers, decorators.field_serializers):
        names.update(group)
    return names


def _spec(info: FieldInfo) -> tuple[int, int | None, int | None] | None:
    """(kind, min length, max length) of a field the fast path can check, else None.

    Only ``X | None`` with default None (or the required ``port``) and the constraints
    ``strict``, ``ge=0``, ``min_length``, ``max_length`` are understood.
    """
    annotation = info.annotation
    metadata = list(info.metadata)
    nullable = False
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1 or len(typing.get_args(annotation)) != 2:
            return None
        nullable = True
        annotation = args[0]
    if typing.get_origin(annotation) is typing.Annotated:
        base, *extra = typing.get_args(annotation)
        for item in extra:
            if isinstance(item, FieldInfo):
                metadata.extend(item.metadata)
            else:
                metadata.append(item)
        annotation = base
    if nullable != (not info.is_required() and info.default is None):
        return None
    strict = ge0 = False
    min_len = max_len = None
    for item in metadata:
        if getattr(item, "strict", None) is True and type(item).__name__ == "Strict":
            strict = True
        elif isinstance(item, Ge) and item.ge == 0:
            ge0 = True
        elif isinstance(item, MinLen):
            min_len = item.min_length
        elif isinstance(item, MaxLen):
            max_len = item.max_length
        else:
            return None
    if annotation is int and strict and min_len is None and max_len is None:
        return (NN_INT if ge0 else INT), None, None
    if annotation is float and strict and min_len is None and max_len is None:
        return (NN_FLOAT if ge0 else FLOAT), None, None
    if annotation is str and not strict and not ge0:
        return TEXT, min_len, max_len
    if (typing.get_origin(annotation) is dict and not metadata
            and typing.get_args(annotation)[0] is str):
        value_type = typing.get_args(annotation)[1]
        if (typing.get_origin(value_type) is typing.Annotated
                and typing.get_args(value_type)[0] is int
                and all(getattr(m, "strict", None) is True
                        for f in typing.get_args(value_type)[1:]
                        for m in (f.metadata if isinstance(f, FieldInfo) else [f]))):
            return BITS, None, None
    return None


def _fast_fields() -> dict[str, tuple[int, int | None, int | None]]:
    if _validators(PortSample) != _KNOWN_VALIDATORS[PortSample]:
        return {}
    fields: dict[str, tuple[int, int | None, int | None]] = {}
    for name, info in PortSample.model_fields.items():
        if info.alias not in (None, name) or info.validation_alias not in (None, name):
            continue
        spec = _spec(info)
        if spec is None:
            continue
        if name == "device":  # check_device after the str checks (its field_validator)
            if spec[0] != TEXT or spec[1] != 1 or spec[2] is not None:
                continue
            spec = (DEVICE, 1, None)
        fields[name] = spec
    return fields


# PortSample's fields the fast path checks; a message with any other model field is slow.
FAST_FIELDS = _fast_fields()
_KIND = {name: spec[0] for name, spec in FAST_FIELDS.items()}
_LIMITS = {name: (spec[1] or 0, spec[2] if spec[2] is not None else -1)
           for name, spec in FAST_FIELDS.items()}
_MODEL_FIELDS = frozenset(PortSample.model_fields)
# An extra whose name is an attribute of the model (a method, a pydantic name) is left to
# pydantic to accept or refuse.
_TAKEN = frozenset(dir(PortSample)) | frozenset(dir(Counters))
_DEFAULTS: dict[str, Any] = {name: info.default for name, info in PortSample.model_fields.items()
                             if not info.is_required()}
_ENVELOPE = frozenset(Counters.model_fields)
_ENVELOPE_FAST = frozenset({"v", "id", "ts", "fabric", "source", "kind", "device", "ports"})
# Whether the models are still the ones the checks here reproduce.
SUPPORTED = (bool(FAST_FIELDS) and _ENVELOPE == _ENVELOPE_FAST
             and _validators(Counters) == _KNOWN_VALIDATORS[Counters]
             and "port" in FAST_FIELDS and FAST_FIELDS["port"][0] == INT)
# FABRICWATCH_FAST_COUNTERS=0 sends every message through model_validate (the same answers,
# slower): an escape hatch, and how the benchmarks measure before and after in one run.
ENABLED = SUPPORTED and os.environ.get("FABRICWATCH_FAST_COUNTERS", "1") != "0"


def _device_ok(value: str) -> bool:
    """``check_device`` (and ``min_length=1``) as a yes/no."""
    return (0 < len(value) and len(value.encode("utf-8")) <= MAX_DEVICE_BYTES
            and not any(c < " " or "\x7f" <= c <= "\x9f" for c in value))


def _text(obj: dict[str, Any], name: str, low: int, high: int) -> bool:
    value = obj.get(name)
    return value.__class__ is str and low <= len(value) <= high


def decode_counters(obj: dict[str, Any]) -> Counters | None:
    """``Counters.model_validate(obj)`` for a message surely valid, else None (ask the model)."""
    if not ENABLED or obj.get("kind") != "counters":
        return None
    v = obj.get("v", 1)
    ts = obj.get("ts")
    device = obj.get("device")
    ports = obj.get("ports")
    source = obj.get("source")
    if (v.__class__ is not int or v != 1 or ts.__class__ is not int
            or not 0 <= ts <= time.time() * 1000 + MAX_FUTURE_MS
            or not _text(obj, "id", 1, 512) or not _text(obj, "fabric", 1, 256)
            or source.__class__ is not str or not 0 < len(source) <= 64
            or device.__class__ is not str or not _device_ok(device)
            or ports.__class__ is not list):
        return None
    extra: dict[str, Any] = {}
    for name in obj:
        if name not in _ENVELOPE:
            if name in _TAKEN or name.startswith("_"):
                return None
            extra[name] = obj[name]
    limit = MAX_IB_PORT if source in IB_SOURCES else MAX_ETH_PORT
    samples = _samples(ports, limit)
    if samples is None:
        return None
    values = {"v": 1, "id": obj["id"], "ts": ts, "fabric": obj["fabric"], "source": source,
              "kind": "counters", "device": device, "ports": samples}
    return checked_model(Counters, values, set(obj), extra)


class _Shape(NamedTuple):
    """How to check samples with one exact key order (a collector sends one shape)."""

    counts: Callable[[dict[str, Any]], tuple[Any, ...]] | None  # the NN_INT values
    others: tuple[tuple[str, int, int, int], ...]  # (name, kind, min len, max len)
    extras: tuple[str, ...]  # names that are not model fields (kept as extras)
    # A whole message of this shape checked column by column (None: sample by sample):
    # the getter of every field value in ``kinds`` order.
    columns: Callable[[dict[str, Any]], tuple[Any, ...]] | None
    kinds: tuple[tuple[int, int, int], ...]  # (kind, min len, max len) per column


_SHAPES: dict[tuple[str, ...], _Shape | None] = {}
_MAX_SHAPES = 4096  # beyond that a new shape is judged each time (no unbounded cache)


def _shape(keys: tuple[str, ...]) -> _Shape | None:
    """The check plan for samples with these keys, None when one needs the model."""
    counts: list[str] = []
    others: list[tuple[str, int, int, int]] = []
    extras: list[str] = []
    for name in keys:
        kind = _KIND.get(name)
        if kind is None:
            if name in _MODEL_FIELDS or name in _TAKEN or name.startswith("_"):
                return None  # a model field the fast path does not know, or a clash
            extras.append(name)
        elif kind == NN_INT:
            counts.append(name)
        elif name != "port":
            low, high = _LIMITS[name]
            others.append((name, kind, low, high))
    getter = values_at(counts) if counts else None
    # Columns for messages of one shape: only the kinds a column check covers (a sample's
    # own device and counter_bits need the sample-by-sample check).
    fields = [name for name in keys if name in _KIND]
    columns: Callable[[dict[str, Any]], tuple[Any, ...]] | None = None
    kinds: tuple[tuple[int, int, int], ...] = ()
    if len(fields) > 1 and not extras and all(
            _KIND[name] in (NN_INT, INT, NN_FLOAT, FLOAT, TEXT) for name in fields):
        columns = itemgetter(*fields)
        kinds = tuple((_KIND[name], *_LIMITS[name]) for name in fields)
    return _Shape(getter, tuple(others), tuple(extras), columns, kinds)


def _plan(keys: tuple[str, ...]) -> _Shape | None:
    try:
        return _SHAPES[keys]
    except KeyError:
        shape = _shape(keys)
        if len(_SHAPES) < _MAX_SHAPES:
            _SHAPES[keys] = shape
        return shape


_COUNT_TYPES = frozenset({int, type(None)})
_INT_TYPE = frozenset({int})


_FLOAT_TYPES = frozenset({float, type(None)})
_TEXT_TYPES = frozenset({str, type(None)})
_not_none = partial(is_not, None)


def _samples(ports: list[Any], limit: int) -> list[PortSample] | None:
    """The samples as PortSample objects, or None when one of them needs the model."""
    if not ports:
        return []
    first = ports[0]
    if first.__class__ is not dict:
        return None
    keys = tuple(first)
    shape = _SHAPES.get(keys) or _plan(keys)
    if shape is None:
        return None
    if shape.columns is None or not _columns_ok(ports, keys, shape, limit):
        return _each(ports, limit)
    defaults = _DEFAULTS
    # field order, as pydantic's __dict__; extras count as set, as in pydantic
    return [checked_model(PortSample, {**defaults, **sample}, set(keys), {})
            for sample in ports]


def _columns_ok(ports: list[Any], keys: tuple[str, ...], shape: _Shape, limit: int) -> bool:
    """Whether every sample has exactly ``keys`` and every column passes its field's check,
    each check one C-level pass over the column. False: check sample by sample instead."""
    for sample in ports:
        if sample.__class__ is not dict or tuple(sample) != keys:
            return False
    assert shape.columns is not None  # noqa: S101 - the caller checked
    counts: list[Any] = []
    for column, (kind, low, high) in zip(zip(*map(shape.columns, ports), strict=True), shape.kinds,
                                         strict=True):
        if kind == NN_INT:
            counts.extend(column)
        elif kind == INT:  # the port: required, so never None
            if not (_INT_TYPE.issuperset(map(type, column)) and min(column) >= 0
                    and max(column) <= limit):
                return False
        elif kind == TEXT:
            if not _TEXT_TYPES.issuperset(map(type, column)):
                return False
            lengths = list(map(len, filter(_not_none, column)))
            if lengths and (min(lengths) < low or (high >= 0 and max(lengths) > high)):
                return False
        else:  # NN_FLOAT, FLOAT: a JSON integer there is converted, sample by sample
            if not _FLOAT_TYPES.issuperset(map(type, column)):
                return False
            present = list(filter(_not_none, column))
            # a sum of finite floats is finite unless it overflows: then ask sample by sample
            if present and (not math.isfinite(sum(present))
                            or (kind == NN_FLOAT and min(present) < 0)):
                return False
    return not counts or (_COUNT_TYPES.issuperset(map(type, counts))
                          and min(filter(None, counts), default=0) >= 0
                          and max(filter(None, counts), default=0) <= _MAX_INT)


def _each(ports: list[Any], limit: int) -> list[PortSample] | None:
    """Sample by sample: mixed shapes, a sample's own device, counter_bits, extras."""
    defaults = _DEFAULTS
    isfinite = math.isfinite
    out: list[PortSample] = []
    counts: list[Any] = []  # every NN_INT value of the message, checked at once below
    seen: set[tuple[str, int]] | None = None
    for sample in ports:
        if sample.__class__ is not dict:
            return None
        keys = tuple(sample)
        shape = _SHAPES.get(keys) or _plan(keys)
        if shape is None:
            return None
        if shape.counts is not None:
            counts.extend(shape.counts(sample))
        for name, kind, low, high in shape.others:
            value = sample[name]
            if value is None:
                continue
            if kind == TEXT or kind == DEVICE:
                if (value.__class__ is not str or len(value) < low
                        or (high >= 0 and len(value) > high)
                        or (kind == DEVICE and not _device_ok(value))):
                    return None
            elif kind == NN_FLOAT or kind == FLOAT:
                # strict floats take JSON's integers, which pydantic keeps as floats
                if value.__class__ is int:
                    if not -_MAX_INT <= value <= _MAX_INT:
                        return None
                    value = float(value)
                    sample = dict(sample)  # a copy: the caller's object stays as parsed
                    sample[name] = value
                elif value.__class__ is not float or not isfinite(value):
                    return None
                if kind == NN_FLOAT and not value >= 0:
                    return None
            elif kind == BITS:
                if value.__class__ is not dict:
                    return None
                for k, bits in value.items():
                    if k.__class__ is not str or bits.__class__ is not int \
                            or not -_MAX_INT <= bits <= _MAX_INT:
                        return None
            elif kind == INT:
                if value.__class__ is not int or not -_MAX_INT <= value <= _MAX_INT:
                    return None
            else:
                return None
        port = sample.get("port")
        if port.__class__ is not int or not 0 <= port <= limit:
            return None
        own = sample.get("device")
        if own is not None:
            where = (own, port)
            if seen is None:
                seen = set()
            elif where in seen:
                return None
            seen.add(where)
        extra: dict[str, Any]
        if shape.extras:
            values = dict(defaults)
            extra = {name: sample[name] for name in shape.extras}
            for name, value in sample.items():
                if name not in extra:
                    values[name] = value
        else:
            values = {**defaults, **sample}  # field order, as pydantic's __dict__
            extra = {}
        out.append(checked_model(PortSample, values, set(keys), extra))  # extras count as set
    # The counters of the whole message at once, in C: each None or an int in 0..2**64-1
    # (bool is not int here: its class is bool). filter(None) drops None and zeros.
    if counts and not (_COUNT_TYPES.issuperset(map(type, counts))
                       and min(filter(None, counts), default=0) >= 0
                       and max(filter(None, counts), default=0) <= _MAX_INT):
        return None
    return out


__all__ = ["ENABLED", "FAST_FIELDS", "SUPPORTED", "decode_counters"]
