"""Machine facts recorded beside every benchmark result, so figures can be compared honestly."""

from __future__ import annotations

import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson
import psutil

RESULTS = Path(__file__).with_name("results")
PACKAGES = ("orjson", "pydantic", "aiokafka", "faust-streaming", "chdb", "temporalio")


def machine_facts() -> dict[str, Any]:
    memory_gib = round(psutil.virtual_memory().total / 2**30, 1)
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "cores": os.cpu_count(),
        "memory_gib": memory_gib,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "versions": versions,
        "when_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def command_line() -> str:
    """How this benchmark was invoked, as the result records it."""
    return " ".join(["python", f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]])


def save_and_print(scenario: str, figures: dict[str, Any]) -> Path:
    """Write the result with the command that made it, and show it."""
    path = write_result(scenario, figures, command_line())
    print(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())  # noqa: T201
    print(f"wrote {path}")  # noqa: T201
    return path


def write_result(scenario: str, figures: dict[str, Any], command: str) -> Path:
    """Write ``benchmarks/results/<scenario>.json`` under the stable keys."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{scenario}.json"
    doc = {"scenario": scenario, "command": command, **figures, "machine": machine_facts()}
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    return path
