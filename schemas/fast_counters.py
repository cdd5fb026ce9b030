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
import time
import types
import typing
from typing import Any, Union

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
ENABLED = (bool(FAST_FIELDS) and _ENVELOPE == _ENVELOPE_FAST
           and _validators(Counters) == _KNOWN_VALIDATORS[Counters]
           and "port" in FAST_FIELDS and FAST_FIELDS["port"][0] == INT)

_new = object.__new__
_set = object.__setattr__


def _device_ok(value: str) -> bool:
    """``check_device`` (and ``min_length=1``) as a yes/no."""
    return (0 < len(value) and len(value.encode("utf-8")) <= MAX_DEVICE_BYTES
            and not any(c < " " or "\x7f" <= c <= "\x9f" for c in value))


def _text(obj: dict[str, Any], name: str, low: int, high: int) -> bool:
    value = obj.get(name)
    return value.__class__ is str and low <= len(value) <= high


def decode_counters(obj: dict[str, Any]) -> Counters | None:
    """``Counters.model_validate(obj)`` for a message surely valid, else None (ask the model)."""
    if not ENABLED:
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
    msg = _new(Counters)
    values = {"v": 1, "id": obj["id"], "ts": ts, "fabric": obj["fabric"], "source": source,
              "kind": "counters", "device": device, "ports": samples}
    _set(msg, "__dict__", values)
    _set(msg, "__pydantic_fields_set__", set(obj))
    _set(msg, "__pydantic_extra__", extra)
    _set(msg, "__pydantic_private__", None)
    return msg


def _samples(ports: list[Any], limit: int) -> list[PortSample] | None:
    kinds = _KIND
    limits = _LIMITS
    model_fields = _MODEL_FIELDS
    defaults = _DEFAULTS
    isfinite = math.isfinite
    out: list[PortSample] = []
    seen: set[tuple[str, int]] | None = None
    for sample in ports:
        if sample.__class__ is not dict:
            return None
        extra: dict[str, Any] | None = None
        for name, value in sample.items():
            kind = kinds.get(name)
            if kind == NN_INT:
                if value is None or (value.__class__ is int and 0 <= value <= _MAX_INT):
                    continue
                return None
            if kind is None:
                if name in model_fields or name in _TAKEN or name.startswith("_"):
                    return None  # a model field the fast path does not know, or a clash
                if extra is None:
                    extra = {}
                extra[name] = value
            elif value is None:
                continue
            elif kind == INT:
                if value.__class__ is not int or not -_MAX_INT <= value <= _MAX_INT:
                    return None
            elif kind == TEXT or kind == DEVICE:
                low, high = limits[name]
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
        values = dict(defaults)
        if extra is None:
            values.update(sample)
            extra = {}
        else:
            for name, value in sample.items():
                if name in model_fields:
                    values[name] = value
        s = _new(PortSample)
        _set(s, "__dict__", values)
        _set(s, "__pydantic_fields_set__", set(sample))  # extras count as set, as in pydantic
        _set(s, "__pydantic_extra__", extra)
        _set(s, "__pydantic_private__", None)
        out.append(s)
    return out


__all__ = ["ENABLED", "FAST_FIELDS", "decode_counters"]
