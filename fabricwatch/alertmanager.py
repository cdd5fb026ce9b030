"""A local Prometheus Alertmanager: built once from its Go module, started on loopback.

Alertmanager's module on the Go proxy lacks its web UI's assets (npm builds them), so a
plain ``go install`` stops at ``ui/web.go: pattern app/dist: no matching files found``. The
build downloads the module, copies it to a scratch folder, adds placeholder pages for the
two UIs and builds ``cmd/alertmanager`` there: the API is whole, only the UI pages are
empty. The binary lives in the repository's ignored ``.gocache/bin`` (beside the Go test
client's); the module and build caches are the machine's own (``~/go``), so a fresh clone on
the same machine builds it again in seconds, a new machine in about four minutes.

``python -m fabricwatch.alertmanager build`` (the Makefile's ``setup``) builds it;
``find_binary()`` finds it (``FABRICWATCH_ALERTMANAGER_BIN`` first); ``LocalAlertmanager``
runs it with a single null receiver, no clustering, on a given loopback port.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from fabricwatch.gobuild import BIN, BUILD_TIMEOUT_S, CACHE, GoBuild, GoBuildError, binary_from_env
from fabricwatch.procs import ChildProcess

VERSION = "v0.35.0"
MODULE = "github.com/prometheus/alertmanager"
BINARY = BIN / f"alertmanager-{VERSION}"

# one route to a receiver with no integrations: alerts are held and listed, sent nowhere
CONFIG = """\
route:
  receiver: fabricwatch-null
  group_by: [alertname, fabric, fabricwatch_key]
  group_wait: 1s
  group_interval: 5s
  repeat_interval: 4h
receivers:
  - name: fabricwatch-null
"""


class AlertmanagerUnavailable(RuntimeError):
    """No Alertmanager binary, or it cannot be built or started here."""


def find_binary() -> Path | None:
    """The Alertmanager to run: ``FABRICWATCH_ALERTMANAGER_BIN``, else the built one."""
    return binary_from_env("FABRICWATCH_ALERTMANAGER_BIN", BINARY)


def build(*, timeout_s: float = BUILD_TIMEOUT_S, log: bool = False) -> Path:
    """Build Alertmanager ``VERSION`` into ``BINARY`` (nothing to do when it is there)."""
    if BINARY.is_file():
        return BINARY
    try:
        go = GoBuild("Alertmanager", timeout_s=timeout_s)
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="alertmanager-build-", dir=CACHE) as tmp:
            work = Path(tmp)
            info = json.loads(go.run(["mod", "download", "-json", f"{MODULE}@{VERSION}"], work))
            src = work / "src"
            shutil.copytree(info["Dir"], src)
            for dirpath, _dirs, _files in os.walk(src):  # the module cache is read-only
                os.chmod(dirpath, 0o700)
            for ui in ("elm", "mantine"):  # the web UIs' pages, which npm would build
                page = src / "ui" / "app" / "dist" / ui / "index.html"
                page.parent.mkdir(parents=True, exist_ok=True)
                page.write_text("<!doctype html><title>Alertmanager</title>"
                                "<p>web UI not built; the API is at /api/v2</p>\n")
            BINARY.parent.mkdir(parents=True, exist_ok=True)
            out = BINARY.with_suffix(".tmp")
            go.run(["build", "-trimpath", "-ldflags", "-s -w", "-o", str(out),
                    "./cmd/alertmanager"], src)
            out.replace(BINARY)
    except GoBuildError as exc:
        raise AlertmanagerUnavailable(str(exc)) from None
    if log:
        sys.stderr.write(f"built Alertmanager {VERSION} in {go.elapsed_s:.0f} s: {BINARY}\n")
    return BINARY


class LocalAlertmanager:
    """One Alertmanager on ``127.0.0.1:port`` with its config and storage in ``workdir``."""

    def __init__(self, binary: Path, port: int, workdir: Path) -> None:
        self.binary = binary
        self.port = port
        self.workdir = workdir
        self.url = f"http://127.0.0.1:{port}"
        self._child: ChildProcess | None = None

    def start(self, *, ready_timeout_s: float = 60.0) -> LocalAlertmanager:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "alertmanager.yml"
        config.write_text(CONFIG)
        args = [str(self.binary), f"--config.file={config}",
                f"--storage.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",  # one instance: no gossip port
                "--log.level=warn"]
        self._child = ChildProcess("alertmanager", args, self.workdir / "alertmanager.log",
                                   cwd=self.workdir).start()
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if not self._child.running:
                raise AlertmanagerUnavailable("Alertmanager exited at start: "
                                              + self._child.tail(10))
            try:
                ready = f"{self.url}/-/ready"  # http://127.0.0.1:PORT, built above
                with urllib.request.urlopen(ready, timeout=2) as resp:  # noqa: S310
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise AlertmanagerUnavailable(f"Alertmanager not ready within {ready_timeout_s:.0f} s")

    def stop(self) -> None:
        if self._child is not None:
            self._child.stop(grace_s=10)
            self._child = None


def main(argv: list[str]) -> int:
    if argv[:1] != ["build"]:
        sys.stderr.write("usage: python -m fabricwatch.alertmanager build\n")
        return 2
    try:
        build(log=True)
    except AlertmanagerUnavailable as exc:
        sys.stderr.write(f"WARNING: Alertmanager not built ({exc}); its tests will fail in CI "
                         "and be skipped elsewhere, the demo writes alerts to a file\n")
        return 0 if "--optional" in argv else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
