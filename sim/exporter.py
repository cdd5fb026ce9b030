"""The simulator's port counters on a Prometheus ``/metrics`` endpoint, the way the
InfiniBand exporters show a fabric (for the scrape-versus-stream benchmark, not a product).

The families follow treydock/infiniband_exporter's naming: one counter family per PMA
counter and device kind, ``infiniband_switch_port_<counter>_total`` with labels ``guid``,
``port`` and ``switch`` for switch ports, ``infiniband_hca_port_<counter>_total`` with
``guid``, ``port`` and ``hca`` for host ports. ``render(sim)`` writes the text exposition of
the simulator's cumulative counters (``Simulator.cnt``) as they are after its last step;
``Exporter`` keeps the last rendering and serves it from a thread, so a scrape reads the
counters of the last simulator step (at most one sampling interval old, as an exporter that
runs ``perfquery`` on a schedule would).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from schemas.events import COUNTER_FIELDS
from sim.telemetry import Simulator

# (simulator counter, exporter counter name, help): the PMA error counters and link_downed
FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("link_downed", "link_downed",
     "Times the port training state machine failed link error recovery and downed the link"),
    ("link_error_recovery", "link_error_recovery",
     "Times the port training state machine completed link error recovery"),
    ("symbol_errors", "symbol_error", "Minor link errors detected on one or more lanes"),
    ("rcv_errors", "port_rcv_errors", "Packets with errors received on the port"),
    ("rcv_remote_phys_errors", "port_rcv_remote_physical_errors",
     "Packets received marked with the EBP delimiter"),
    ("xmit_discards", "port_xmit_discards", "Outbound packets discarded by the port"),
    ("local_link_integrity_errors", "local_link_integrity_errors",
     "Times the count of local physical errors exceeded the threshold"),
    ("excessive_buffer_overrun", "excessive_buffer_overrun_errors",
     "Times consecutive flow control update periods had buffer overruns"),
)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def family(kind: str, counter: str) -> str:
    """``infiniband_{switch|hca}_port_<counter>_total``."""
    return f"infiniband_{kind}_port_{counter}_total"


def render(sim: Simulator) -> bytes:
    """The text exposition of every port's counters after the simulator's last step."""
    index = {name: i for i, name in enumerate(COUNTER_FIELDS)}
    labels: list[tuple[str, str]] = []  # per port: (kind, label text)
    for pi, device in enumerate(sim.p_dev):
        dev = sim.fabric.device(device)
        kind, name_label = ("hca", "hca") if sim.p_hca[pi] else ("switch", "switch")
        labels.append((kind, f'guid="0x{dev.guid:016x}",port="{sim.p_port[pi]}",'
                             f'{name_label}="{device}"'))
    out: list[str] = []
    for field, counter, help_text in FAMILIES:
        fi = index[field]
        for kind in ("switch", "hca"):
            name = family(kind, counter)
            rows = [f"{name}{{{lab}}} {sim.cnt[pi][fi]}"
                    for pi, (k, lab) in enumerate(labels) if k == kind]
            if rows:
                out.append(f"# HELP {name} {help_text}.")
                out.append(f"# TYPE {name} counter")
                out.extend(rows)
    return ("\n".join(out) + "\n").encode()


class Exporter:
    """Serves the last ``update(sim)``'s exposition on ``GET /metrics`` (127.0.0.1:port)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._body = b""
        self._lock = threading.Lock()
        self.scrapes = 0
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404)
                    return
                body = exporter.body()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                with exporter._lock:
                    exporter.scrapes += 1

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return  # a scrape every 15 s is no news

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self.url = f"http://{host}:{self.port}/metrics"
        self._thread = threading.Thread(target=self._server.serve_forever, name="sim-exporter",
                                        daemon=True)

    def update(self, sim: Simulator) -> None:
        body = render(sim)
        with self._lock:
            self._body = body

    def body(self) -> bytes:
        with self._lock:
            return self._body

    def start(self) -> Exporter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
