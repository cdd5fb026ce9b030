"""A fresh clone has nothing beside it: no file of the suite, the benchmarks or the packages
may reach a path outside the repository.

Two checks. This static one reads every source file for the ways a path escapes (a
``Path(__file__)`` chain that climbs above the repository root, a sibling folder named
literally, an absolute path of a developer's machine); ``tests/conftest.py`` adds a run-time
one, an audit hook that fails any open or listing under ``../shared`` (the folder a
developer's checkout may have beside it, and a fresh clone does not) while the suite runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("tests", "benchmarks", "schemas", "collectors", "streams", "ledger", "workflows", "sim",
           "fabricwatch", "deploy")
EXTRA_FILES = ("Makefile", ".ci/run", "pyproject.toml")
SUFFIXES = {".py", ".sh", ".toml", ".cfg", ".ini", ""}

# Path(__file__)[.resolve()] followed by .parent… and/or .parents[N]…
_CHAIN = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?(?P<chain>(?:\.parent\b|\.parents\[\d+\])+)")
_STEP = re.compile(r"\.parent\b|\.parents\[(\d+)\]")
_LITERALS = (
    re.compile(r"""["'/]\.\./shared\b"""),
    re.compile(r"""["']shared["']\s*/\s*["']fixtures["']"""),
    re.compile(r"/work/(?:main|shared)\b"),
    re.compile(r"""\.parent\s*/\s*["']shared["']"""),
)


def _levels_up(chain: str) -> int:
    """How many folders above the file's own folder a .parent/.parents[N] chain lands."""
    # Path(__file__).parent and .parents[0] are the file's own folder (0 up); each later step
    # climbs from there
    up: int | None = None
    for m in _STEP.finditer(chain):
        n = int(m.group(1)) if m.group(1) is not None else 0
        up = n if up is None else up + n + 1
    return up or 0


def escapes(path: Path, text: str) -> list[str]:
    """The places in ``text`` (the file at ``path``) that reach outside the repository."""
    depth = len(path.relative_to(REPO).parts) - 1  # folders between the repo root and the file
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if "repo-guard:" in line:  # the run-time guard names the path it refuses
            continue
        for m in _CHAIN.finditer(line):
            if _levels_up(m.group("chain")) > depth:
                found.append(f"{path.relative_to(REPO)}:{lineno}: {m.group(0)} climbs out of the repository")
        for pattern in _LITERALS:
            if pattern.search(line):
                found.append(f"{path.relative_to(REPO)}:{lineno}: names a path outside the repository")
    return found


def _sources() -> list[Path]:
    files = [REPO / name for name in EXTRA_FILES if (REPO / name).is_file()]
    for top in SCANNED:
        for path in (REPO / top).rglob("*"):
            if (path.is_file() and path.suffix in SUFFIXES and "fixtures" not in path.parts
                    and path.resolve() != Path(__file__).resolve()):
                files.append(path)
    return files


def test_no_source_reaches_outside_the_repository() -> None:
    problems = [p for path in _sources()
                for p in escapes(path, path.read_text(errors="replace"))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("rel", "line", "bad"), [
    ("tests/unit/collectors/x.py", 'F = Path(__file__).resolve().parents[3].parent / "shared"', True),
    ("tests/unit/collectors/x.py", 'F = Path(__file__).resolve().parents[3] / "tests"', False),
    ("tests/unit/collectors/x.py", "F = Path(__file__).parent.parent.parent.parent.parent", True),
    ("tests/unit/collectors/x.py", "F = Path(__file__).parent.parent.parent.parent", False),
    ("tests/unit/collectors/x.py", "F = Path(__file__).parents[2].parent.parent", True),
    ("benchmarks/x.py", "R = Path(__file__).resolve().parents[2]", True),
    ("benchmarks/x.py", "R = Path(__file__).resolve().parents[1]", False),
    ("tests/x.py", 'C = Path("/work/shared/fixtures/a.conf")', True),
    ("tests/x.py", 'C = ROOT / ".." / "shared"', False),  # caught at run time by the audit hook
    ("tests/x.py", 'C = "../shared/fixtures/a"', True),
])
def test_the_scan_sees_each_way_out(rel: str, line: str, bad: bool) -> None:
    assert bool(escapes(REPO / rel, line)) is bad


def test_the_audit_hook_refuses_a_folder_beside_the_repository(tmp_path: Path) -> None:
    beside = REPO.parent / "shared" / "fixtures" / "SOURCES.md"
    with pytest.raises(PermissionError, match="outside the repository"):
        beside.open()
