"""JSON Schema files for every contract message, generated from the models.

Producers in other languages validate against ``schemas/json/<kind>.schema.json``.
Regenerate with ``python -m schemas.jsonschema``; a unit test fails when the files are stale.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson

from schemas.events import EVENT_MODELS, DeadLetter

JSON_DIR = Path(__file__).with_name("json")


def schema_documents() -> dict[str, dict[str, Any]]:
    """File name -> JSON Schema document, one per message kind."""
    models: dict[str, Any] = dict(EVENT_MODELS)
    models["dead_letter"] = DeadLetter
    docs: dict[str, dict[str, Any]] = {}
    for kind, model in sorted(models.items()):
        doc = model.model_json_schema(mode="validation")
        doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        doc["$id"] = f"https://fabricwatch.dev/schemas/v1/{kind}.schema.json"
        docs[f"{kind}.schema.json"] = doc
    return docs


def render(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def write(directory: Path = JSON_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, doc in schema_documents().items():
        path = directory / name
        path.write_bytes(render(doc))
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write():
        sys.stdout.write(f"{path}\n")
