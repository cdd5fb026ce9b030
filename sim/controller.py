"""The simulated fabric controller: what the runbook's adapter calls instead of UFM or opensm.

``SimController(state_dir)`` keeps its state in ``state_dir/sim-controller.json`` and is the
command channel between processes: the runbook's worker isolates, un-isolates, resets and
repairs through it; the running simulator (``sim.run``) re-reads the file each step and
changes what it emits (an isolated port goes down and stays down, carries no traffic and
stops flapping; a reset zeroes the port's counters; a successful repair clears the faults
on that cable).

A command that changes a port (isolate, un-isolate, reset, repair) is refused with
``ControllerError`` when a simulator has recorded its fabric (``record_fabric``) and the port
is not in it: nothing changes, and the command log has a ``refused`` line. With no fabric
recorded (a controller used without a running simulator) every well-formed port is taken.

Every command is idempotent, because Temporal retries activities: isolating an isolated
port changes nothing, and a repair step asked twice for the same rung in the same
isolation episode returns the answer it gave the first time. Whether a rung fixes the
fault is drawn from a seeded hash of (seed, port, rung, episode), so runs are repeatable;
the chance per rung is configurable. Writes are atomic (temp file + rename) under an
exclusive lock so several worker threads or processes can share one state folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

STATE_FILE = "sim-controller.json"
HEALTH_FILE = "sim-health.json"  # written by the running simulator, read by is_healthy
# Written by each running simulator: its fabric's ports and the repair chances it was given
# (``sim run --fix-chance``), so that commands from other processes can be checked.
FABRIC_FILE_PREFIX = "sim-fabric-"
LOCK_FILE = "sim-controller.lock"
# Every command, appended under the lock: what a drill counts (one isolate, one un-isolate).
COMMAND_LOG = "sim-commands.jsonl"
STATE_VERSION = 1
# Rough field experience: a reseat fixes about half of bad links, a new optic or cable
# most of the rest, a different switch port nearly all. Configurable per controller.
DEFAULT_FIX_CHANCE: dict[str, float] = {
    "clean-and-reseat": 0.5,
    "swap-optic": 0.6,
    "swap-cable": 0.75,
    "swap-switch-port": 0.95,
}
DEFAULT_UNKNOWN_RUNG_CHANCE = 0.5


class ControllerError(ValueError):
    """A command with arguments that cannot name a port, or an unreadable state file."""


@dataclass(frozen=True, slots=True)
class ControllerView:
    """A read-only snapshot of the controller state, for the simulator's step."""

    isolated: frozenset[str]
    resets: Mapping[str, int]  # port key -> reset sequence number (grows by 1 per reset)
    repaired: Mapping[str, int]  # port key -> wall ms of the last successful repair
    serial: int  # grows by one with every change
    faults: tuple[tuple[int, str], ...] = ()  # (seq, spec) queued with inject()


def _key(device: str, port: int) -> str:
    if not isinstance(device, str) or not device or any(ord(c) < 0x20 for c in device):
        raise ControllerError(f"bad device name {device!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 1024:
        raise ControllerError(f"bad port {port!r} (expected an integer 0..1024)")
    return f"{device}:{port}"


def _empty() -> dict[str, Any]:
    return {"version": STATE_VERSION, "serial": 0, "isolated": {}, "epochs": {},
            "resets": {}, "repairs": {}, "repaired": {}, "faults": []}


def _checked_chances(chances: Mapping[str, float] | None) -> dict[str, float]:
    """Repair chances per rung, each in 0..1."""
    for rung, chance in (chances or {}).items():
        if not 0.0 <= chance <= 1.0:
            raise ControllerError(f"fix chance of rung {rung!r} must be in 0..1")
    return dict(chances or {})


class SimController:
    """Isolate / un-isolate / reset counters / repair steps on the simulated fabric."""

    def __init__(self, state_dir: Path, *, fix_chance: Mapping[str, float] | None = None,
                 seed: int = 0, clock: Callable[[], float] = time.time) -> None:
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.state_dir / STATE_FILE
        self._lock_path = self.state_dir / LOCK_FILE
        chances = dict(DEFAULT_FIX_CHANCE)
        chances.update(_checked_chances(fix_chance))
        self.fix_chance = chances
        self._given_chance = dict(fix_chance or {})
        self.seed = seed
        self._clock = clock
        self._cache: tuple[int, int, dict[str, Any]] | None = None  # (mtime_ns, size, state)
        self._health_written: bytes | None = None
        # recorded fabric file -> ((inode, mtime_ns, size), ports, fix chances)
        self._fabrics: dict[Path, tuple[tuple[int, int, int], frozenset[str],
                                        dict[str, float]]] = {}

    # -- commands --------------------------------------------------------------------------

    def isolate(self, device: str, port: int, by: str | None = None) -> bool:
        """Take the port out of service. Returns True if it was not isolated before.

        ``by`` names who isolated it (another tool, a human); ``isolated_by`` tells it back.
        """
        key = self._cabled(device, port)
        with self._update() as state:
            if key in state["isolated"]:
                self._log("isolate", key, changed=False)
                return False
            epoch = int(state["epochs"].get(key, 0)) + 1
            state["epochs"][key] = epoch
            state["isolated"][key] = {"since_ms": self._now_ms(), "epoch": epoch,
                                      **({"by": by} if by else {})}
            self._log("isolate", key, changed=True, by=by)
            return True

    def unisolate(self, device: str, port: int) -> bool:
        """Return the port to service. Returns True if it was isolated."""
        key = self._cabled(device, port)
        with self._update() as state:
            changed = state["isolated"].pop(key, None) is not None
            self._log("unisolate", key, changed=changed)
            return changed

    def isolated_by(self, device: str, port: int) -> str | None:
        entry = self._read()["isolated"].get(_key(device, port))
        return entry.get("by") if isinstance(entry, dict) else None

    def commands(self, op: str | None = None) -> list[dict[str, Any]]:
        """The command log, oldest first (``op`` filters: isolate, unisolate, ...)."""
        try:
            lines = (self.state_dir / COMMAND_LOG).read_bytes().splitlines()
        except FileNotFoundError:
            return []
        rows = [orjson.loads(line) for line in lines if line.strip()]
        return [r for r in rows if op is None or r.get("op") == op]

    def _log(self, op: str, key: str, **extra: Any) -> None:
        # called under the exclusive lock, so lines never interleave; fsync'd, so a process
        # killed right after the command still leaves its line
        line = orjson.dumps({"ts_ms": self._now_ms(), "op": op, "key": key, "pid": os.getpid(),
                             **{k: v for k, v in extra.items() if v is not None}})
        with open(self.state_dir / COMMAND_LOG, "ab") as handle:
            handle.write(line + b"\n")
            handle.flush()
            os.fsync(handle.fileno())

    def reset_counters(self, device: str, port: int) -> int:
        """Ask for the port's counters to be zeroed; returns the reset sequence number."""
        key = self._cabled(device, port)
        with self._update() as state:
            seq = int(state["resets"].get(key, 0)) + 1
            state["resets"][key] = seq
            self._log("reset_counters", key, seq=seq)
            return seq

    def repair_step(self, device: str, port: int, rung: str | int) -> bool:
        """Carry out one rung of the repair ladder; True if it fixed the cable's fault.

        The same rung asked again in the same isolation episode returns the recorded
        answer (an activity retry must not roll the dice twice).
        """
        key = self._cabled(device, port)
        rung_name = str(rung)
        if not rung_name or len(rung_name) > 128:
            raise ControllerError(f"bad rung {rung!r}")
        with self._update() as state:
            epoch = int(state["epochs"].get(key, 0))
            history: list[dict[str, Any]] = state["repairs"].setdefault(key, [])
            for entry in history:
                if entry["rung"] == rung_name and entry["epoch"] == epoch:
                    return bool(entry["fixed"])
            fixed = self._draw(key, rung_name, epoch) < self.chance(rung_name)
            now = self._now_ms()
            history.append({"rung": rung_name, "epoch": epoch, "fixed": fixed, "ts_ms": now})
            self._log("repair_step", key, rung=rung_name, fixed=fixed)
            if fixed:
                state["repaired"][key] = now
            return fixed

    def inject(self, spec: str) -> int:
        """Queue a fault spec for the running simulator (its ``at`` counts from when the
        simulator picks it up, at its next step); returns the fault's sequence number."""
        if not isinstance(spec, str) or not spec.strip() or len(spec) > 1024:
            raise ControllerError("a fault spec is a non-empty string of at most 1024 chars")
        with self._update() as state:
            faults: list[dict[str, Any]] = state.setdefault("faults", [])
            seq = len(faults) + 1
            faults.append({"seq": seq, "spec": spec.strip(), "ts_ms": self._now_ms()})
            return seq

    def injected(self) -> list[tuple[int, str]]:
        """(sequence number, spec) of every fault queued with ``inject``."""
        return [(int(f["seq"]), str(f["spec"])) for f in self._read().get("faults", [])]

    def is_isolated(self, device: str, port: int) -> bool:
        return _key(device, port) in self._read()["isolated"]

    # -- reading ---------------------------------------------------------------------------

    def chance(self, rung: str) -> float:
        if rung in self._given_chance:
            return self._given_chance[rung]
        recorded = self.recorded_fabrics()[1]
        if rung in recorded:
            return recorded[rung]
        return self.fix_chance.get(rung, DEFAULT_UNKNOWN_RUNG_CHANCE)

    def rungs(self) -> set[str]:
        """The rung names with a configured chance (defaults, given, recorded)."""
        return set(self.fix_chance) | set(self.recorded_fabrics()[1])

    # -- the fabric the running simulators report --------------------------------------------

    def record_fabric(self, name: str, ports: list[str],
                      fix_chance: Mapping[str, float] | None = None) -> None:
        """What a starting simulator tells other processes: its ports and repair chances."""
        chances = _checked_chances(fix_chance)
        safe = hashlib.sha256(name.encode()).hexdigest()[:16]
        self._atomic_write(self.state_dir / f"{FABRIC_FILE_PREFIX}{safe}.json",
                           orjson.dumps({"fabric": name, "ports": ports,
                                         "fix_chance": chances}))

    def recorded_fabrics(self) -> tuple[set[str] | None, dict[str, float]]:
        """Every recorded fabric's ports (None: no simulator has recorded one) and the
        repair chances they were given."""
        ports: set[str] | None = None
        chances: dict[str, float] = {}
        for found_ports, found_chances in self._fabric_files():
            ports = (ports or set()) | found_ports
            chances.update(found_chances)
        return ports, chances

    def _fabric_files(self) -> list[tuple[frozenset[str], dict[str, float]]]:
        """Each readable recorded fabric's (ports, repair chances), in file-name order."""
        paths = sorted(self.state_dir.glob(f"{FABRIC_FILE_PREFIX}*.json"))
        for gone in set(self._fabrics) - set(paths):
            del self._fabrics[gone]
        return [found for found in map(self._fabric_file, paths) if found is not None]

    def _fabric_file(self, path: Path) -> tuple[frozenset[str], dict[str, float]] | None:
        """One recorded fabric's ports and chances, parsed again only when the file changed:
        a 100k-port fabric's file is megabytes, and every command checks its port."""
        try:
            st = path.stat()
            cached = self._fabrics.get(path)
            if cached is not None and cached[0] == (st.st_ino, st.st_mtime_ns, st.st_size):
                return cached[1], cached[2]
            data = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        found = (frozenset(data.get("ports", ())), dict(data.get("fix_chance") or {}))
        self._fabrics[path] = ((st.st_ino, st.st_mtime_ns, st.st_size), *found)
        return found

    def check_port(self, device: str, port: int | None) -> None:
        """Refuse a port (or, with ``port`` None, a device) that a running simulator's
        recorded fabric does not have; with no fabric recorded, accept it."""
        fabrics = [ports for ports, _ in self._fabric_files()]
        if not fabrics:
            return
        if port is not None:
            key = _key(device, port)
            if not any(key in known for known in fabrics):
                raise ControllerError(f"{key} is not a cabled port of the simulated fabric")
        elif not any(k.startswith(f"{device}:") for known in fabrics for k in known):
            raise ControllerError(f"{device} is not a device of the simulated fabric")

    def _cabled(self, device: str, port: int) -> str:
        """The port's key, for a command that changes it: a port that a running simulator's
        fabric does not have is refused before anything changes (logged as refused)."""
        key = _key(device, port)
        try:
            self.check_port(device, port)
        except ControllerError:
            with open(self._lock_path, "a+b") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    self._log("refused", key)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
            raise
        return key

    def view(self) -> ControllerView:
        """The current state; re-reads the file only when it changed on disk."""
        state = self._read()
        return ControllerView(
            isolated=frozenset(state["isolated"]),
            resets={k: int(v) for k, v in state["resets"].items()},
            repaired={k: int(v) for k, v in state["repaired"].items()},
            serial=int(state["serial"]),
            faults=tuple((int(f["seq"]), str(f["spec"])) for f in state.get("faults", [])),
        )

    def is_healthy(self, device: str, port: int) -> bool | None:
        """Whether the running simulator finds no fault on the port. None: no simulator has
        reported yet, or its report is from before the port's last successful repair (the
        simulator applies a repair at its next step: until then its report says nothing
        about the repaired cable, and the repair's own result is the answer).
        This is what a return-to-service check measures on the sim."""
        key = _key(device, port)
        try:
            raw = (self.state_dir / HEALTH_FILE).read_bytes()
            health = orjson.loads(raw)
        except (FileNotFoundError, orjson.JSONDecodeError):
            return None
        faulty = health.get("faulty") if isinstance(health, dict) else None
        if not isinstance(faulty, list):
            return None
        repaired = self._read()["repaired"].get(key)
        applied = health.get("repaired")
        if repaired is not None and (not isinstance(applied, dict)
                                     or applied.get(key) != repaired):
            return None
        return key not in faulty

    def write_health(self, fabric: str, ts: int, faulty: list[str],
                     repaired: Mapping[str, int] | None = None) -> None:
        """The simulator's report of the ports that have a fault now, and the repairs it
        has applied (port key -> the repair's time, as ``view().repaired`` gave it); atomic,
        written only on change."""
        body = {"fabric": fabric, "faulty": faulty, "repaired": dict(repaired or {})}
        data = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        if data == self._health_written:
            return
        self._atomic_write(self.state_dir / HEALTH_FILE, orjson.dumps({**body, "ts": ts}))
        self._health_written = data

    def isolated_ports(self) -> list[str]:
        return sorted(self._read()["isolated"])

    def repairs(self, device: str, port: int) -> list[dict[str, Any]]:
        return list(self._read()["repairs"].get(_key(device, port), []))

    # -- internals -------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _draw(self, key: str, rung: str, epoch: int) -> float:
        digest = hashlib.blake2b(f"{self.seed}|{key}|{rung}|{epoch}".encode(),
                                 digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64

    def _read(self) -> dict[str, Any]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return _empty()
        if self._cache is not None and self._cache[:2] == (st.st_mtime_ns, st.st_size):
            return self._cache[2]
        state = self._load()
        self._cache = (st.st_mtime_ns, st.st_size, state)
        return state

    def _load(self) -> dict[str, Any]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return _empty()
        try:
            state = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ControllerError(f"{self.path} is not valid JSON: {exc}") from None
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ControllerError(f"{self.path} is not a version {STATE_VERSION} state file")
        base = _empty()
        base.update(state)
        return base

    @contextlib.contextmanager
    def _update(self) -> Iterator[dict[str, Any]]:
        with open(self._lock_path, "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                state = self._load()
                before = orjson.dumps(state, option=orjson.OPT_SORT_KEYS)
                yield state
                if orjson.dumps(state, option=orjson.OPT_SORT_KEYS) != before:
                    state["serial"] = int(state["serial"]) + 1
                    self._write(state)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _write(self, state: dict[str, Any]) -> None:
        data = orjson.dumps(state, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
        self._atomic_write(self.path, data)
        self._cache = None

    def _atomic_write(self, path: Path, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".sim-controller.", dir=self.state_dir)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
