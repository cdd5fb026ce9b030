"""The opensm log follower: rotation, truncation, restarts and half-written lines (real files)."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.live.tail_opensm import LogFollower


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


def test_reads_complete_lines_only_and_waits_for_the_newline(tmp_path: Path) -> None:
    log = tmp_path / "opensm.log"
    append(log, "one\ntw")
    f = LogFollower(log, tmp_path / "pos.json")
    assert f.read() == ["one"]
    assert f.read() == []
    append(log, "o\nthree\n")
    assert f.read() == ["two", "three"]
    f.close()


def test_rotation_by_rename_loses_nothing(tmp_path: Path) -> None:
    log = tmp_path / "opensm.log"
    append(log, "a\n")
    f = LogFollower(log, tmp_path / "pos.json")
    assert f.read() == ["a"]
    append(log, "b\n")
    os.rename(log, tmp_path / "opensm.log.1")
    append(log, "c\n")
    assert f.read() == ["b", "c"]
    f.close()


def test_truncation_in_place_restarts_at_zero(tmp_path: Path) -> None:
    log = tmp_path / "opensm.log"
    append(log, "a long first line\nsecond\n")
    f = LogFollower(log, tmp_path / "pos.json")
    assert len(f.read()) == 2
    log.write_text("x\n", encoding="utf-8")  # copytruncate / opensm -e
    assert f.read() == ["x"]
    f.close()


def test_restart_resumes_at_the_committed_position(tmp_path: Path) -> None:
    log, pos = tmp_path / "opensm.log", tmp_path / "pos.json"
    append(log, "a\nb\n")
    f = LogFollower(log, pos)
    assert f.read() == ["a", "b"]
    f.commit()
    append(log, "c\n")
    assert f.read() == ["c"]  # read but not committed: the restart reads it again
    f.close()
    g = LogFollower(log, pos)
    append(log, "d\n")
    assert g.read() == ["c", "d"]
    g.commit()
    g.close()
    h = LogFollower(log, pos)
    assert h.read() == []
    h.close()


def test_restart_after_a_rotation_finds_the_rotated_file(tmp_path: Path) -> None:
    log, pos = tmp_path / "opensm.log", tmp_path / "pos.json"
    append(log, "a\n")
    f = LogFollower(log, pos)
    assert f.read() == ["a"]
    f.commit()
    f.close()
    append(log, "b\n")  # written while the follower was down, then rotated away
    os.rename(log, tmp_path / "opensm.log.1")
    append(log, "c\n")
    g = LogFollower(log, pos)
    assert g.read() == ["b", "c"]
    assert g.lost == []
    g.close()


def test_a_rotated_file_that_is_gone_is_reported(tmp_path: Path) -> None:
    log, pos = tmp_path / "opensm.log", tmp_path / "pos.json"
    append(log, "a\n")
    f = LogFollower(log, pos)
    f.read()
    f.commit()
    f.close()
    log.unlink()
    append(log, "new\n")
    g = LogFollower(log, pos)
    assert g.read() == ["new"]
    assert g.lost and "not read" in g.lost[0]
    g.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.text(alphabet="abc xyz", min_size=0, max_size=12),
                          st.sampled_from(["write", "rotate", "restart"])), max_size=25))
def test_every_line_once_whatever_happens(tmp_path_factory: object, steps: list[tuple[str, str]]
                                          ) -> None:
    base = Path(tmp_path_factory.mktemp("f"))  # type: ignore[attr-defined]
    log, pos = base / "opensm.log", base / "pos.json"
    log.touch()
    written: list[str] = []
    seen: list[str] = []
    f = LogFollower(log, pos)
    assert f.read() == []  # following starts here
    rotations = 0
    for i, (text, op) in enumerate(steps):
        line = f"{i}:{text}"
        append(log, line + "\n")
        written.append(line)
        if op == "rotate":
            rotations += 1
            os.rename(log, base / f"opensm.log.{rotations:03d}")
            log.touch()
        seen += f.read()
        f.commit()
        if op == "restart":
            f.close()
            f = LogFollower(log, pos)
    try:
        seen += f.read()
    finally:
        f.close()
    assert seen == written
