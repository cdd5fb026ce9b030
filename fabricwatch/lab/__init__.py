"""The InfiniBand lab: ibsim with a net file, the real opensm against it, and its console.

``LabStack(state_dir)`` keeps everything in ``<state_dir>/lab``: the net file it was started
with, ``ibsim.log``, ``opensm.log``, opensm's cache and dump files, the console FIFO and
``lab.json`` (pids, process groups, the ibsim socket name, the node-id map, the current
cabling). ``up`` starts ibsim (console on a FIFO opened read-write by the launcher, so ibsim
never sees end-of-file and ``inject`` can write console commands later from any process),
then opensm (``force_log_flush`` on, so the follower sees each line as it is written) and
waits for ``SUBNET UP``. ``down`` stops both process groups (TERM, then KILL).

Tools reach the simulated fabric through ``libumad2sim`` (``LD_PRELOAD``), which finds ibsim by
``IBSIM_SOCKNAME`` (a name per lab folder, so two labs never meet) and writes a fake sysfs
``sys-<pid>`` into its working folder (``<state_dir>/lab/run``, emptied on ``down``).
``tool_runner()`` gives the ``ToolRunner`` the collectors and the opensm adapter use here.

Device names are the contract's (``leaf-su01-r3``, ``node0001/mlx5_0``); the console wants
ibsim's node ids (``"S-fc6a1c0300000100"``), so the net file's nodes are mapped with the pinned
naming rule (``collectors.ibnetdiscover.device_name``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from collectors.ibnetdiscover import NodeType, device_name
from collectors.live.tools import ToolRunner

UMAD2SIM = Path("/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so")
_NODE = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([^"]+)"\s*(?:#\s*"([^"]*)")?')
_GUID_LINE = re.compile(r"^(switchguid|caguid|rtguid|sysimgguid)=(0x[0-9a-fA-F]+)")
_PORT_LINE = re.compile(r'^\[(\d+)\](?:\([0-9a-fA-F]+\))?\s+"([^"]+)"\[(\d+)\]')
COUNTER_NAME = re.compile(r"^(?:(PortCounters|PortCountersExtended)\.)?([A-Za-z][A-Za-z0-9]{1,63})$")
_DEVICE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./:@+-]{0,127}$")
DEFAULT_LIMITS = {"-N": 8192, "-S": 2048, "-P": 65536}


class LabError(RuntimeError):
    """The lab cannot do what was asked (not running, unknown device, a tool missing)."""


@dataclass(frozen=True)
class NetNode:
    ident: str  # ibsim's node id, the quoted name in the net file
    device: str  # the contract's device name
    type: NodeType
    guid: str


def parse_netfile(text: str) -> tuple[dict[str, NetNode], dict[str, list[int]]]:
    """Net file -> (device -> node, links as ``"ID[p]"`` -> ``[peer-id, peer-port]``).

    The links map holds each cable from both ends, keyed ``ident[port]`` -> ``"ident[port]"``.
    """
    nodes: dict[str, NetNode] = {}
    links: dict[str, Any] = {}
    guid = ""
    current: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        gm = _GUID_LINE.match(line)
        if gm:
            if gm.group(1) != "sysimgguid":
                guid = gm.group(2)
            continue
        nm = _NODE.match(line)
        if nm:
            kind, _ports, ident, desc = nm.groups()
            node_type: NodeType = {"Switch": "switch", "Ca": "ca", "Rt": "router"}[kind]  # type: ignore[assignment]
            g = guid or "0x0"
            name = device_name(desc if desc is not None else ident, g, node_type)
            nodes[name] = NetNode(ident, name, node_type, g)
            current = ident
            guid = ""
            continue
        pm = _PORT_LINE.match(line)
        if pm and current is not None:
            port, peer, peer_port = pm.groups()
            links[f"{current}[{int(port)}]"] = f"{peer}[{int(peer_port)}]"
    return nodes, links


def _limits_for(text: str) -> dict[str, int]:
    """ibsim's -N/-S/-P sized to the net file (its defaults stop at 2048 nodes), with room."""
    nodes = switches = ports = 0
    for raw in text.splitlines():
        m = _NODE.match(raw.strip())
        if m:
            nodes += 1
            switches += m.group(1) == "Switch"
            ports += int(m.group(2)) + 1
    room = 1.25
    return {flag: max(DEFAULT_LIMITS[flag], int(count * room) + 16)
            for flag, count in (("-N", nodes), ("-S", switches), ("-P", ports))}


def _sock_name(lab_dir: Path) -> str:
    return "fwlab-" + hashlib.sha256(str(lab_dir.resolve()).encode()).hexdigest()[:12]


def _alive(pid: int, marker: str) -> bool:
    """The pid runs and is still the program we started (pids are reused)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    try:
        st = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        if st[0] == "Z":
            return False
    except (OSError, IndexError):
        return False
    return bool(cmd) and Path(cmd[0].decode(errors="replace")).name == marker


class LabStack:
    """ibsim + opensm with state in ``<state_dir>/lab``."""

    def __init__(self, state_dir: Path, *, ibsim: str = "ibsim", opensm: str = "opensm",
                 umad2sim: Path = UMAD2SIM) -> None:
        self.dir = Path(state_dir) / "lab"
        self.ibsim = ibsim
        self.opensm = opensm
        self.umad2sim = umad2sim
        self.state_file = self.dir / "lab.json"
        self.console_path = self.dir / "console"
        self.opensm_log = self.dir / "opensm.log"
        self.ibsim_log = self.dir / "ibsim.log"
        self.run_dir = self.dir / "run"
        self.net_path = self.dir / "fabric.net"
        # The Popen objects of what this instance started, so that ``down`` reaps them
        # (another process's ``lab down`` finds them by pid in lab.json instead).
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # ------------------------------------------------------------------ state

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise LabError(f"no lab in {self.dir} (run `fabricwatch lab up` first)") from None
        if not isinstance(data, dict):
            raise LabError(f"{self.state_file} is not a lab state file")
        return data

    def _save(self, data: dict[str, Any]) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.state_file)

    def env(self, sock: str | None = None) -> dict[str, str]:
        """The environment a tool needs to reach this lab's ibsim."""
        sock = sock or str(self._load()["socket"])
        return {"LD_PRELOAD": str(self.umad2sim), "IBSIM_SOCKNAME": sock,
                "OSM_TMP_DIR": str(self.dir), "OSM_CACHE_DIR": str(self.dir)}

    def tool_runner(self) -> ToolRunner:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        return ToolRunner(env=self.env(), cwd=self.run_dir)

    # ------------------------------------------------------------------ lifecycle

    def up(self, netfile: Path, *, timeout_s: float = 60.0,
           limits: dict[str, int] | None = None, m_key: SecretStr | None = None,
           m_key_protection_level: int = 2) -> dict[str, Any]:
        """Start ibsim and opensm; return the status once opensm logged SUBNET UP.

        With ``m_key``, opensm sets that M_Key on every port with the protection level given
        (2: a Get answers with the key zeroed, a Set without the key is dropped), as a fabric
        that passes the audit's OSM001 runs. opensm.conf holds the key, so it is mode 0600.
        """
        if m_key is not None:
            if not re.fullmatch(r"0x[0-9a-fA-F]{1,16}", m_key.get_secret_value()):
                raise LabError("the M_Key is 0x followed by up to 16 hex digits")
            if m_key_protection_level not in (0, 1, 2, 3):
                raise LabError("m_key_protection_level is 0..3")
        for tool in (self.ibsim, self.opensm):
            if shutil.which(tool) is None:
                raise LabError(f"{tool} is not installed (make lab-deps installs ibsim-utils, "
                               "opensm and infiniband-diags)")
        if not self.umad2sim.exists():
            raise LabError(f"{self.umad2sim} is missing (Debian package ibsim-utils)")
        text = Path(netfile).read_text(encoding="utf-8")
        nodes, links = parse_netfile(text)
        if not nodes:
            raise LabError(f"{netfile}: no Switch/Ca node found; not an ibnetdiscover net file")
        with contextlib.suppress(LabError):
            if self.status()["running"]:
                raise LabError(f"a lab is already running in {self.dir}; `lab down` first")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.down()  # leftovers of a crashed lab
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.run_dir.mkdir(parents=True)
        self.net_path.write_text(text, encoding="utf-8")
        for old in (self.opensm_log, self.ibsim_log):
            old.unlink(missing_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.console_path.unlink()
        os.mkfifo(self.console_path, 0o600)
        sock = _sock_name(self.dir)
        env = dict(os.environ)
        env["IBSIM_SOCKNAME"] = sock
        lim = {**DEFAULT_LIMITS, **_limits_for(text), **(limits or {})}
        argv = [self.ibsim, "-s"]
        for flag, value in lim.items():
            argv += [flag, str(int(value))]
        argv.append(str(self.net_path))
        # O_RDWR: the FIFO always has a writer (ibsim itself), so it never reads EOF and
        # `inject` can open it for writing later without blocking.
        console = os.open(self.console_path, os.O_RDWR)
        try:
            with open(self.ibsim_log, "wb") as log:
                ibsim = subprocess.Popen(argv, stdin=console, stdout=log,  # noqa: S603 - fixed argv
                                         stderr=subprocess.STDOUT, cwd=self.run_dir, env=env,
                                         start_new_session=True)
        finally:
            os.close(console)
        self._procs["ibsim"] = ibsim
        state: dict[str, Any] = {
            "socket": sock, "netfile": str(Path(netfile).resolve()), "started": time.time(),
            "ibsim": {"pid": ibsim.pid, "pgid": ibsim.pid, "exe": Path(self.ibsim).name},
            "nodes": {n.device: {"id": n.ident, "type": n.type, "guid": n.guid}
                      for n in nodes.values()},
            "links": links,
        }
        self._save(state)
        try:
            self._wait_for(self.ibsim_log, b"sim>", ibsim, timeout_s, "ibsim")
            conf = self.dir / "opensm.conf"
            lines = ["# fabricwatch lab: flush each line so the follower sees it now",
                     "force_log_flush TRUE"]
            if m_key is not None:
                lines += [f"m_key {m_key.get_secret_value()}",
                          f"m_key_protection_level {int(m_key_protection_level)}",
                          "m_key_lease_period 0"]
            fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out_conf:
                out_conf.write("\n".join(lines) + "\n")
            tool_env = dict(os.environ)
            tool_env.update(self.env(sock))
            with open(self.dir / "opensm.out", "wb") as out:
                opensm = subprocess.Popen(  # noqa: S603 - fixed argv
                    [self.opensm, "-F", str(conf), "-f", str(self.opensm_log)],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    cwd=self.run_dir, env=tool_env, start_new_session=True)
            self._procs["opensm"] = opensm
            state["opensm"] = {"pid": opensm.pid, "pgid": opensm.pid,
                               "exe": Path(self.opensm).name}
            self._save(state)
            self._wait_for(self.opensm_log, b"SUBNET UP", opensm, timeout_s, "opensm")
        except BaseException:
            self.down()
            raise
        return self.status()

    def _wait_for(self, path: Path, needle: bytes, proc: subprocess.Popen[bytes],
                  timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError):
                if needle in path.read_bytes():
                    return
            if proc.poll() is not None:
                tail = path.read_bytes()[-2000:].decode(errors="replace") if path.exists() else ""
                raise LabError(f"{what} exited with {proc.returncode} before it was ready; "
                               f"see {path}:\n{tail}")
            time.sleep(0.05)
        raise LabError(f"{what} not ready after {timeout_s:g} s; see {path}")

    def down(self, *, grace_s: float = 5.0) -> list[str]:
        """Stop opensm then ibsim (their whole process groups); return what was stopped."""
        try:
            state = self._load()
        except LabError:
            return []
        stopped = []
        for name in ("opensm", "ibsim"):
            proc = state.get(name)
            if not isinstance(proc, dict):
                continue
            pid, pgid, exe = int(proc["pid"]), int(proc["pgid"]), str(proc["exe"])
            if not _alive(pid, exe):
                _reap(pid)
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while _alive(pid, exe) and time.monotonic() < deadline:
                _reap(pid)
                time.sleep(0.05)
            if _alive(pid, exe):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
            _reap(pid)
            stopped.append(name)
        for name, popen in list(self._procs.items()):
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=grace_s)
            del self._procs[name]
        self.state_file.unlink(missing_ok=True)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        return stopped

    def status(self) -> dict[str, Any]:
        state = self._load()
        procs = {}
        for name in ("ibsim", "opensm"):
            proc = state.get(name)
            procs[name] = bool(isinstance(proc, dict) and _alive(int(proc["pid"]),
                                                                 str(proc["exe"])))
        return {"dir": str(self.dir), "running": all(procs.values()), **procs,
                "socket": state["socket"], "netfile": state["netfile"],
                "nodes": len(state["nodes"]), "opensm_log": str(self.opensm_log),
                "subnet_up": self.opensm_log.exists()
                and b"SUBNET UP" in self.opensm_log.read_bytes()}

    # ------------------------------------------------------------------ console

    def node_id(self, device: str) -> str:
        if not _DEVICE.match(device):
            raise LabError(f"device {device!r} is not a device name")
        nodes = self._load()["nodes"]
        node = nodes.get(device)
        if node is None:
            raise LabError(f"device {device!r} is not in the lab's net file")
        return str(node["id"])

    def _end(self, device: str, port: int) -> str:
        if isinstance(port, bool) or not 0 <= int(port) <= 254:
            raise LabError(f"port {port!r} is not a port number")
        return f'"{self.node_id(device)}"[{int(port)}]'

    def console(self, command: str) -> None:
        """Write one console line to ibsim (the lab must be running)."""
        if "\n" in command or "\r" in command:
            raise LabError("one console command per call")
        try:
            fd = os.open(self.console_path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno in (errno.ENXIO, errno.ENOENT):
                raise LabError("ibsim is not running (no console reader)") from None
            raise
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                raise LabError(f"{self.console_path} is not the lab's console FIFO")
            os.write(fd, (command + "\n").encode())
        finally:
            os.close(fd)

    def unlink(self, device: str, port: int) -> str:
        cmd = f"Unlink {self._end(device, port)}"
        self.console(cmd)
        return cmd

    def relink(self, device: str, port: int) -> str:
        cmd = f"ReLink {self._end(device, port)}"
        self.console(cmd)
        return cmd

    def reseat(self, device: str, port: int) -> list[str]:
        """Unplug and replug (Unlink + ReLink): what brings a port enabled after
        ``ibportstate disable``/``enable`` back to LinkUp in ibsim, which does not retrain."""
        cmds = [self.unlink(device, port)]
        time.sleep(0.2)
        cmds.append(self.relink(device, port))
        return cmds

    def flap(self, device: str, port: int, *, count: int = 3, every_s: float = 2.0) -> list[str]:
        """``count`` down/up cycles, one every ``every_s`` seconds (down for half of it)."""
        if not 1 <= count <= 1000 or not 0.05 <= every_s <= 3600:
            raise LabError("flap wants 1..1000 cycles, 0.05..3600 s apart")
        done = []
        for i in range(count):
            done.append(self.unlink(device, port))
            time.sleep(every_s / 2)
            done.append(self.relink(device, port))
            if i + 1 < count:
                time.sleep(every_s / 2)
        return done

    def peer(self, device: str, port: int) -> tuple[str, int] | None:
        """The other end of ``device:port`` as cabled now (after any swaps), by device name."""
        state = self._load()
        key = f"{self.node_id(device)}[{int(port)}]"
        far = state["links"].get(key)
        if far is None:
            return None
        ident, p = far[:-1].split("[")
        for name, node in state["nodes"].items():
            if node["id"] == ident:
                return name, int(p)
        return None

    def swap(self, a: str, a_port: int, b: str, b_port: int) -> list[str]:
        """Swap the cables on ``a:a_port`` and ``b:b_port`` (a miswire, as a technician makes)."""
        state = self._load()
        ka, kb = f"{self.node_id(a)}[{int(a_port)}]", f"{self.node_id(b)}[{int(b_port)}]"
        pa, pb = state["links"].get(ka), state["links"].get(kb)
        if pa is None or pb is None:
            raise LabError(f"{a}:{a_port} and {b}:{b_port} must both be cabled to swap them")
        if ka == pb:
            raise LabError("those two ports are the two ends of one cable")
        cmds = [f"Unlink \"{ka.split('[')[0]}\"[{a_port}]",
                f"Unlink \"{kb.split('[')[0]}\"[{b_port}]",
                f"Link \"{ka.split('[')[0]}\"[{a_port}] \"{pb.split('[')[0]}\"[{pb[:-1].split('[')[1]}]",
                f"Link \"{kb.split('[')[0]}\"[{b_port}] \"{pa.split('[')[0]}\"[{pa[:-1].split('[')[1]}]"]
        for cmd in cmds:
            self.console(cmd)
            time.sleep(0.05)
        links = state["links"]
        links[ka], links[pb] = pb, ka
        links[kb], links[pa] = pa, kb
        self._save(state)
        return cmds

    def set_counters(self, device: str, port: int, values: dict[str, int]) -> list[str]:
        """``PerformanceSet`` each ``NAME=VALUE`` (``PortCounters.`` is the default group)."""
        end = self._end(device, port)
        cmds = []
        for name, value in values.items():
            m = COUNTER_NAME.match(name)
            if m is None:
                raise LabError(f"{name!r} is not a PortCounters / PortCountersExtended field")
            if isinstance(value, bool) or not 0 <= int(value) < 1 << 64:
                raise LabError(f"{name}={value!r}: a counter value is 0..2^64-1")
            group = m.group(1) or "PortCounters"
            cmds.append(f"PerformanceSet {end} {group}.{m.group(2)}={int(value)}")
        for cmd in cmds:
            self.console(cmd)
        return cmds


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
