"""Micro-benchmark: decode + validate a 64-port counters batch (the counters path's first step).

Run: .venv/bin/python benchmarks/contract_decode.py [--seconds 5]
Reports messages/s and port-samples/s for schemas.decode (the counters fast path), beside a
bare orjson.loads of the same bytes (the floor of any Python consumer) and the pydantic
model validation the fast path replaces (``Counters.model_validate``, what decode did
before), all measured in the same run, as ratios.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import write_result  # noqa: E402
from schemas import Counters, decode  # noqa: E402

PORTS = 64


def batch(seq: int) -> bytes:
    ports = [
        {"port": p, "symbol_errors": seq * 3 + p, "link_error_recovery": 0, "link_downed": 1,
         "rcv_errors": p % 7, "rcv_remote_phys_errors": 0, "xmit_discards": 0,
         "xmit_wait": 1_000_000 + seq * 17, "local_link_integrity_errors": 0,
         "excessive_buffer_overrun": 0, "fec_corrected": seq * 1000 + p, "fec_uncorrectable": 0,
         "raw_ber": 1.5e-9, "effective_ber": 1e-15, "width": "4X", "speed": "NDR"}
        for p in range(1, PORTS + 1)
    ]
    return orjson.dumps({"v": 1, "id": f"leaf-su01-r3/{seq}", "ts": 1_795_000_000_000 + seq,
                         "fabric": "bench", "source": "sim", "kind": "counters",
                         "device": "leaf-su01-r3", "ports": ports})


def rate(fn: Callable[[bytes], object], messages: list[bytes], seconds: float) -> float:
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for raw in messages:
            fn(raw)
        done += len(messages)
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    messages = [batch(i) for i in range(200)]
    floor = rate(orjson.loads, messages, args.seconds)
    ours = rate(decode, messages, args.seconds)
    model = rate(lambda raw: Counters.model_validate(orjson.loads(raw)), messages, args.seconds)
    figures = {
        "messages_per_s": round(ours),
        "port_samples_per_s": round(ours * PORTS),
        "floor_orjson_loads_messages_per_s": round(floor),
        "ratio_to_floor": round(ours / floor, 3),
        "model_validate_messages_per_s": round(model),
        "model_validate_ratio_to_floor": round(model / floor, 3),
        "speedup_vs_model_validate": round(ours / model, 2),
        "ports_per_message": PORTS,
        "bytes_per_message": len(messages[0]),
    }
    path = write_result("contract_decode", figures,
                        f"python benchmarks/contract_decode.py --seconds {args.seconds:g}")
    print(f"{'scenario':<28}{'msg/s':>12}{'samples/s':>14}{'ratio_to_floor':>16}")
    print(f"{'contract_decode':<28}{ours:>12,.0f}{ours * PORTS:>14,.0f}{ours / floor:>16.3f}")
    print(f"{'model_validate (before)':<28}{model:>12,.0f}{model * PORTS:>14,.0f}"
          f"{model / floor:>16.3f}")
    print(f"{'floor (orjson.loads only)':<28}{floor:>12,.0f}{floor * PORTS:>14,.0f}{1:>16.3f}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
