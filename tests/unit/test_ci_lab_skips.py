"""In CI a skipped lab test fails the run; on a developer's machine it stays a skip.

Runs pytest in a child process on a throwaway suite that uses this repository's
``tests/conftest.py``, once with ``CI=true`` and once without."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

SUITE = '''
import pytest

@pytest.mark.lab
def test_needs_ibsim():
    pytest.skip("the ibsim binary is absent")

def test_not_lab():
    pytest.skip("nothing to do with the lab")
'''


def _run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    suite = tmp_path / "tests"
    suite.mkdir(exist_ok=True)
    shutil.copy(CONFTEST, suite / "conftest.py")
    shutil.copy(CONFTEST.with_name("session_services.py"), suite)  # the conftest imports it
    (suite / "test_lab_skip.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n  lab: needs ibsim\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-rfs", str(suite)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.mark.parametrize(("ci", "code", "summary"), [
    ("true", 1, "1 failed, 1 skipped"),
    (None, 0, "2 skipped"),
    ("false", 0, "2 skipped"),
])
def test_a_skipped_lab_test_fails_only_in_ci(tmp_path: Path, ci: str | None, code: int,
                                             summary: str) -> None:
    result = _run(tmp_path, ci)
    assert result.returncode == code, result.stdout + result.stderr
    assert summary in result.stdout
    if code:
        assert "lab test skipped in CI" in result.stdout
        assert "the ibsim binary is absent" in result.stdout
