"""Micro-benchmark: the stale detector's cost per counters message, this tree against another.

Run: .venv/bin/python benchmarks/stale_observer.py [--before REV] [--rounds 5]
Feeds 50 switches x 200 messages of 64 healthy ports (row form and columnar) through
``StaleDetector.step``, the work the stale observer adds to every counters message in the
worker, and reports CPU microseconds per message. With ``--before`` the same messages go,
in alternating rounds of the same run, through ``streams/stale/logic.py`` as it was at
``REV`` (read with ``git show``, loaded as its own module; its imports are this tree's).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import write_result  # noqa: E402
from schemas import CounterColumns, Counters, PortSample  # noqa: E402
from schemas.policy import Policy  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PORTS = 64


def messages(columnar: bool) -> list[Any]:
    out: list[Any] = []
    for t in range(200):
        for d in range(50):
            msg = Counters(id=f"sw{d}/{t}", ts=1_795_000_000_000 + t * 10_000 + d, fabric="bench",
                           source="perfquery", device=f"sw{d}",
                           ports=[PortSample(port=p, symbol_errors=t) for p in range(1, PORTS + 1)])
            out.append(CounterColumns.of(msg) if columnar else msg)
    return out


def logic_at(rev: str) -> ModuleType:
    # a plain revision name only: it goes to git as an argument, never through a shell
    if not rev.replace("-", "").replace("_", "").replace("/", "").replace(".", "").isalnum():
        raise SystemExit(f"not a revision name: {rev!r}")
    git = shutil.which("git")
    if git is None:
        raise SystemExit("--before needs git")
    source = subprocess.run([git, "show", f"{rev}:streams/stale/logic.py"], cwd=ROOT,
                            capture_output=True, check=True, timeout=30).stdout
    path = Path(tempfile.mkdtemp()) / "stale_logic_before.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("stale_logic_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cost_us(detector_cls: Any, msgs: list[Any]) -> float:
    """CPU microseconds per message through a fresh detector."""
    det = detector_cls(Policy())
    state = None
    start = time.process_time()
    for m in msgs:
        state, _ = det.step(state, m, 0, [m])
    return (time.process_time() - start) / len(msgs) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--before", default=None, help="a git revision to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from streams.stale.logic import StaleDetector

    before = logic_at(args.before).StaleDetector if args.before else None
    figures: dict[str, Any] = {"ports_per_message": PORTS, "messages": 10_000,
                               "rounds": args.rounds}
    for form in ("rows", "columnar"):
        msgs = messages(form == "columnar")
        now: list[float] = []
        then: list[float] = []
        for _ in range(args.rounds):
            now.append(cost_us(StaleDetector, msgs))
            if before is not None:
                then.append(cost_us(before, msgs))
        figures[f"{form}_us_per_message"] = round(statistics.median(now), 1)
        if before is not None:
            figures[f"{form}_before_us_per_message"] = round(statistics.median(then), 1)
            figures[f"{form}_speedup"] = round(statistics.median(then)
                                               / statistics.median(now), 2)
    if args.before:
        figures["before"] = args.before
    command = "python benchmarks/stale_observer.py" + (
        f" --before {args.before}" if args.before else "") + f" --rounds {args.rounds}"
    path = write_result("stale_observer", figures, command)
    for key, value in figures.items():
        print(f"{key:<32}{value}")  # noqa: T201
    print(f"wrote {path}")  # noqa: T201


if __name__ == "__main__":
    main()
