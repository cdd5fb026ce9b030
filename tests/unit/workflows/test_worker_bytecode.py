"""The runbook worker writes its workflow modules' bytecode: the sandbox imports them afresh
for every workflow it starts, and without a .pyc (PYTHONDONTWRITEBYTECODE, common in
images) each of those imports compiles the source."""

from __future__ import annotations

import importlib._bootstrap_external as bootstrap_external
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

import pytest

from workflows.remediation.workflows import PortRemediation
from workflows.worker import WORKFLOWS, bytecode_current, workflow_module_files, write_bytecode


def _compiles(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources the normal loader compiles to load ``path`` (a sandbox import's work)."""
    compiled: list[str] = []
    real = bootstrap_external.SourceLoader.source_to_code

    def spy(self: object, data: bytes, where: str, *args: object, **kwargs: object) -> object:
        compiled.append(where)
        return real(self, data, where, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bootstrap_external.SourceLoader, "source_to_code", spy)
    importlib.machinery.SourceFileLoader("probe_module", str(path)).get_code("probe_module")
    return compiled


def test_written_bytecode_spares_the_compile(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    module = tmp_path / "probe_module.py"
    module.write_text(Path(str(sys.modules[PortRemediation.__module__].__file__)).read_text())
    assert _compiles(module, monkeypatch) == [str(module)]  # no cache: compiled, not written
    assert _compiles(module, monkeypatch) == [str(module)]
    assert write_bytecode([str(module)]) == []
    assert Path(importlib.util.cache_from_source(str(module))).is_file()
    assert _compiles(module, monkeypatch) == []


def test_a_changed_source_is_compiled_again(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    module = tmp_path / "probe_module.py"
    module.write_text("X = 1\n")
    write_bytecode([str(module)])
    module.write_text("X = 22\n")  # new size: the timestamp cache no longer matches
    assert _compiles(module, monkeypatch) == [str(module)]


def test_an_unwritable_cache_is_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                         ) -> None:
    module = tmp_path / "probe_module.py"
    module.write_text("X = 1\n")
    (tmp_path / "__pycache__").write_text("a file where the cache folder would be")
    assert write_bytecode([str(module)]) == [str(module)]
    assert "compiles it on every workflow run" in caplog.text


def test_every_workflow_module_is_listed() -> None:
    files = workflow_module_files()
    for cls in WORKFLOWS:
        assert sys.modules[cls.__module__].__file__ in files


def test_a_current_cache_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only image with the caches pip wrote: nothing to write, nothing to report."""
    module = tmp_path / "probe_module.py"
    module.write_text("X = 1\n")
    assert not bytecode_current(str(module))
    write_bytecode([str(module)])
    assert bytecode_current(str(module))

    def unwritable(*args: object, **kwargs: object) -> None:
        raise OSError("read-only file system")

    monkeypatch.setattr("py_compile.compile", unwritable)
    assert write_bytecode([str(module)]) == []


def test_a_hash_based_cache_counts_as_current(tmp_path: Path) -> None:
    import py_compile

    module = tmp_path / "probe_module.py"
    module.write_text("X = 1\n")
    py_compile.compile(str(module), cfile=importlib.util.cache_from_source(str(module)),
                       invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    assert bytecode_current(str(module))
    module.write_text("X = 2\n")
    assert not bytecode_current(str(module))
