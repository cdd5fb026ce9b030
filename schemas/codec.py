"""The one codec for every byte on the wire: orjson out, orjson + pydantic in.

Counters messages, the bulk of the traffic, are checked by ``schemas.fast_counters`` against
the same rules without a pydantic validation per sample; whatever that check is not sure of
goes through ``model_validate``, so every error and dead-letter reason is pydantic's own.

``decode`` raises only ``ContractError``, whatever the bytes: the consumer then dead-letters
the message with ``dead_letter(...)`` and carries on.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from schemas.errors import ContractError
from schemas.events import EVENT_MODELS, FIELD_ERROR_MARK, Counters, DeadLetter, Event
from schemas.fast_counters import decode_counters

_OPTS = orjson.OPT_NON_STR_KEYS


def encode(event: BaseModel) -> bytes:
    """A model as contract JSON bytes (enums as wire values, ``ts`` as epoch milliseconds)."""
    return orjson.dumps(event.model_dump(mode="json"), option=_OPTS)


def dumps(obj: Any) -> bytes:
    """Plain data (dicts, lists, models inside) as JSON bytes, for CLI output and records."""
    return orjson.dumps(obj, default=_default, option=_OPTS)


def _default(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def loads(raw: bytes | str) -> Any:
    """Parse JSON, raising ``ContractError`` on malformed input."""
    try:
        return orjson.loads(raw)
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise ContractError(f"not valid JSON: {exc}") from None


def decode(raw: bytes | str) -> Event:
    """Validate one contract message; the only exception it raises is ``ContractError``."""
    return decode_obj(loads(raw))


def decode_obj(obj: Any) -> Event:
    """Validate an already parsed JSON object as a contract event."""
    if not isinstance(obj, dict):
        raise ContractError(f"a message must be a JSON object, not {type(obj).__name__}")
    kind = obj.get("kind")
    model = EVENT_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ContractError(f"unknown kind {str(kind)[:64]!r}; expected one of "
                            f"{', '.join(EVENT_MODELS)}", "kind")
    if model is Counters:  # the hot path: no model validation per sample when surely valid
        fast = decode_counters(obj)
        if fast is not None:
            return fast
    try:
        return model.model_validate(obj)  # type: ignore[return-value]
    except ValidationError as exc:
        raise contract_error(exc) from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise ContractError(f"invalid message: {exc}") from None


def contract_error(exc: ValidationError) -> ContractError:
    """The first pydantic error as a ``ContractError`` with a dotted field path."""
    first = exc.errors(include_url=False)[0]
    path = ".".join(str(part) for part in first.get("loc", ()))
    reason = str(first.get("msg", "invalid"))
    reason = reason.removeprefix("Value error, ")
    if reason.startswith(FIELD_ERROR_MARK):  # a FieldError: its own path, after the model's
        inner, _, reason = reason[1:].partition(FIELD_ERROR_MARK)
        path = f"{path}.{inner}" if path else inner
    return ContractError(reason, path)


def dead_letter(raw: bytes, error: ContractError, *, source_topic: str | None = None,
                partition: int | None = None, offset: int | None = None,
                now_ms: int | None = None) -> DeadLetter:
    """The ``fabric.dlq`` record for a message that failed validation."""
    return DeadLetter(
        ts=now_ms if now_ms is not None else int(time.time() * 1000),
        reason=error.reason,
        path=error.path,
        source_topic=source_topic,
        partition=partition,
        offset=offset,
        raw_b64=base64.b64encode(raw).decode("ascii"),
    )
