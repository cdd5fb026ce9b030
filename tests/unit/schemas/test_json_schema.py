"""The committed JSON Schema files match the models (regenerate: python -m schemas.jsonschema)."""

from __future__ import annotations

import orjson

from schemas.jsonschema import JSON_DIR, render, schema_documents


def test_json_schema_files_are_current() -> None:
    docs = schema_documents()
    assert set(docs) == {p.name for p in JSON_DIR.glob("*.schema.json")}
    for name, doc in docs.items():
        assert (JSON_DIR / name).read_bytes() == render(doc), (
            f"schemas/json/{name} is stale: run python -m schemas.jsonschema")


def test_port_event_schema_requires_the_contract_fields() -> None:
    doc = orjson.loads((JSON_DIR / "port_event.schema.json").read_bytes())
    assert {"id", "ts", "fabric", "source", "device", "port", "state"} <= set(doc["required"])
    assert doc["additionalProperties"] is True
