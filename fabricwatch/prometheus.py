"""A local Prometheus server and promtool: built once from their Go module, run on loopback.

``go install github.com/prometheus/prometheus/cmd/{prometheus,promtool}@VERSION`` builds both
(module v0.316.0 is the 3.x line; without the web UI's assets the server runs, its API and
``/-/ready`` answer). The binaries live in the ignored ``.gocache/bin`` as
``prometheus-VERSION`` and ``promtool-VERSION`` (``fabricwatch.gobuild``: about 3.5 min cold
on 2 cores, seconds with the machine's Go caches warm).

``python -m fabricwatch.prometheus build`` (the Makefile's ``setup``) builds them;
``find_binaries()`` finds them (``FABRICWATCH_PROMETHEUS_BIN`` / ``FABRICWATCH_PROMTOOL_BIN``
first); ``promtool(args)`` runs promtool; ``LocalPrometheus`` runs the server with a given
configuration on a loopback port. The alert-rule tests (``tests/integration/
test_alert_rules.py``) and ``benchmarks/scrape_vs_stream.py`` use them.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from fabricwatch.gobuild import BIN, BUILD_TIMEOUT_S, CACHE, GoBuild, GoBuildError, binary_from_env
from fabricwatch.procs import ChildProcess

VERSION = "v0.316.0"
MODULE = "github.com/prometheus/prometheus"
PROMETHEUS = BIN / f"prometheus-{VERSION}"
PROMTOOL = BIN / f"promtool-{VERSION}"


class PrometheusUnavailable(RuntimeError):
    """No Prometheus or promtool binary, or they cannot be built or started here."""


def find_binaries() -> tuple[Path | None, Path | None]:
    """(prometheus, promtool) to run: the env's paths first, else the built ones."""
    return (binary_from_env("FABRICWATCH_PROMETHEUS_BIN", PROMETHEUS),
            binary_from_env("FABRICWATCH_PROMTOOL_BIN", PROMTOOL))


def build(*, timeout_s: float = BUILD_TIMEOUT_S, log: bool = False) -> tuple[Path, Path]:
    """Build Prometheus and promtool ``VERSION`` (nothing to do when both are there)."""
    if PROMETHEUS.is_file() and PROMTOOL.is_file():
        return PROMETHEUS, PROMTOOL
    try:
        go = GoBuild("Prometheus", timeout_s=timeout_s)
        CACHE.mkdir(parents=True, exist_ok=True)
        BIN.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="prometheus-build-", dir=CACHE) as tmp:
            out = Path(tmp)
            go.run(["install", "-trimpath", "-ldflags", "-s -w",
                    f"{MODULE}/cmd/prometheus@{VERSION}", f"{MODULE}/cmd/promtool@{VERSION}"],
                   out, GOBIN=str(out))
            (out / "prometheus").replace(PROMETHEUS)
            (out / "promtool").replace(PROMTOOL)
    except GoBuildError as exc:
        raise PrometheusUnavailable(str(exc)) from None
    if log:
        sys.stderr.write(f"built Prometheus and promtool {VERSION} in {go.elapsed_s:.0f} s: "
                         f"{PROMETHEUS}, {PROMTOOL}\n")
    return PROMETHEUS, PROMTOOL


def promtool(args: Sequence[str], *, binary: Path | None = None, cwd: Path | None = None,
             timeout_s: float = 600.0) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS`` (its exit status is the caller's to judge)."""
    tool = binary or find_binaries()[1]
    if tool is None:
        raise PrometheusUnavailable("promtool is not built (python -m fabricwatch.prometheus "
                                    "build)")
    for arg in args:  # our own argv: no option smuggled in through a path
        if not isinstance(arg, str) or "\0" in arg:
            raise ValueError(f"bad promtool argument {arg!r}")
    return subprocess.run([str(tool), *args], cwd=cwd,  # noqa: S603 - argv checked above
                          capture_output=True, text=True, timeout=timeout_s, check=False)


class LocalPrometheus:
    """One Prometheus server on ``127.0.0.1:port``, its config and TSDB in ``workdir``."""

    def __init__(self, binary: Path, port: int, workdir: Path, config: str,
                 rules: dict[str, str] | None = None,
                 extra_args: Sequence[str] = ()) -> None:
        self.binary = binary
        self.port = port
        self.workdir = workdir
        self.config = config
        self.rules = rules or {}
        self.extra_args = list(extra_args)
        self.url = f"http://127.0.0.1:{port}"
        self._child: ChildProcess | None = None

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    def start(self, *, ready_timeout_s: float = 120.0) -> LocalPrometheus:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for name, text in self.rules.items():  # rule files the config names, beside it
            (self.workdir / name).write_text(text)
        config = self.workdir / "prometheus.yml"
        config.write_text(self.config)
        args = [str(self.binary), f"--config.file={config}",
                f"--storage.tsdb.path={self.data_dir}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn", *self.extra_args]
        self._child = ChildProcess("prometheus", args, self.workdir / "prometheus.log",
                                   cwd=self.workdir).start()
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if not self._child.running:
                raise PrometheusUnavailable("Prometheus exited at start: " + self._child.tail(10))
            try:
                ready = f"{self.url}/-/ready"  # http://127.0.0.1:PORT, built above
                with urllib.request.urlopen(ready, timeout=2) as resp:  # noqa: S310
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise PrometheusUnavailable(f"Prometheus not ready within {ready_timeout_s:.0f} s")

    def stop(self) -> None:
        if self._child is not None:
            self._child.stop(grace_s=10)
            self._child = None


def main(argv: list[str]) -> int:
    if argv[:1] != ["build"]:
        sys.stderr.write("usage: python -m fabricwatch.prometheus build [--optional]\n")
        return 2
    try:
        build(log=True)
    except PrometheusUnavailable as exc:
        sys.stderr.write(f"WARNING: Prometheus and promtool not built ({exc}); the alert-rule "
                         "tests will fail in CI and be skipped elsewhere\n")
        return 0 if "--optional" in argv else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
