"""Building the Prometheus tools from their Go modules into the ignored ``.gocache/bin``.

Alertmanager (``fabricwatch.alertmanager``) and Prometheus with promtool
(``fabricwatch.prometheus``) are built the same way: the machine's Go toolchain, its own
module and build caches (``~/go``, ``~/.cache/go-build``: a fresh clone on the same machine
builds in seconds, a new machine in minutes), no cgo, and only the binaries kept in the
repository's ignored ``.gocache/bin`` under a versioned name. ``GoBuild`` runs the steps
under one deadline and turns every failure into ``GoBuildError`` with the tool's stderr.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".gocache"  # ignored by git
BIN = CACHE / "bin"
BUILD_TIMEOUT_S = 1800  # a first build on a loaded 2-core machine: modules + compile


class GoBuildError(RuntimeError):
    """No Go toolchain, or a step of the build failed or ran out of time."""


def go_tool() -> str | None:
    found = shutil.which("go")
    if found:
        return found
    return "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None


def go_env(**extra: str) -> dict[str, str]:
    # the machine's own module and build caches; only the binaries are ours
    return {**os.environ, "GOFLAGS": "-modcacherw", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0",
            **extra}


def binary_from_env(var: str, built: Path) -> Path | None:
    """The binary to run: the path in ``var`` when set (and executable), else ``built``."""
    given = os.environ.get(var)
    if given:
        path = Path(given)
        return path if path.is_file() and os.access(path, os.X_OK) else None
    return built if built.is_file() else None


class GoBuild:
    """The go commands of one build, sharing one deadline."""

    def __init__(self, what: str, *, timeout_s: float = BUILD_TIMEOUT_S) -> None:
        go = go_tool()
        if go is None:
            raise GoBuildError("the Go toolchain (go) is not installed")
        self.go = go
        self.what = what
        self.timeout_s = timeout_s
        self.started = time.monotonic()
        self.deadline = self.started + timeout_s

    def run(self, args: Sequence[str], cwd: Path, **env: str) -> str:
        """``go ARGS`` in ``cwd``; its stdout, or ``GoBuildError`` with the end of stderr."""
        left = self.deadline - time.monotonic()
        too_long = f"building {self.what} took over {self.timeout_s:.0f} s"
        if left <= 0:
            raise GoBuildError(too_long)
        argv = [self.go, *args]
        try:
            proc = subprocess.run(argv, cwd=cwd, env=go_env(**env),  # noqa: S603 - our argv
                                  capture_output=True, text=True, timeout=left, check=False)
        except subprocess.TimeoutExpired:
            raise GoBuildError(too_long) from None
        if proc.returncode != 0:
            raise GoBuildError(f"go {' '.join(args[:2])} failed: " + proc.stderr.strip()[-2000:])
        return proc.stdout

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started
