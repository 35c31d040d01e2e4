"""The two builds: ``setup.py`` builds the native core ``stores._native`` with cargo when it
can; without a Rust toolchain, or under ``FIBA_PURE_PYTHON=1``, the install goes on with the
pure-Python core and says so in one line. ``stores.build()`` and ``fiba --version`` name the
build a process runs (``native`` or ``pure``)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import stores

ROOT = Path(stores.__file__).resolve().parent.parent


def _load_setup(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``setup.py`` as a module, its ``setup()`` call a no-op (so nothing is built)."""
    import setuptools

    monkeypatch.setattr(setuptools, "setup", lambda **_kwargs: None)
    spec = importlib.util.spec_from_file_location("fiba_setup_hook", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_cargo_the_hook_builds_no_native_core_and_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    hook = _load_setup(monkeypatch)
    monkeypatch.delenv("FIBA_PURE_PYTHON", raising=False)
    monkeypatch.delenv("CARGO", raising=False)
    monkeypatch.setattr(sys, "argv", ["setup.py", "editable_wheel"])
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no cargo on PATH
    capsys.readouterr()
    assert hook._rust_extensions() == []
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "fiba-stream: installing without the native core (no Rust toolchain: cargo is not on PATH)"
    ]


@pytest.mark.skipif(
    __import__("shutil").which("cargo") is None, reason="no Rust toolchain on this machine"
)
def test_with_cargo_the_hook_builds_the_native_crate(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _load_setup(monkeypatch)
    monkeypatch.delenv("FIBA_PURE_PYTHON", raising=False)
    monkeypatch.setattr(sys, "argv", ["setup.py", "editable_wheel"])
    (extension,) = hook._rust_extensions()
    assert extension.name == "stores._native" and extension.optional
    assert hook.native_sources_hash(ROOT) == stores._native_hash()


_HIDE_NATIVE = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "stores._native":
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, Hide())
import importlib.util
importlib.util.find_spec = (lambda f: lambda name, *a: None if name == "stores._native"
                            else f(name, *a))(importlib.util.find_spec)
import stores
from stores.fiba import FiBA
from stores.monoids import SUM
fiba = FiBA(SUM)
for t in range(100):
    fiba.insert(t, t)
fiba.bulk_evict(49)
print(stores.build(), stores.native(), fiba.query())
"""


def test_an_install_without_the_native_core_runs_the_python_fiba() -> None:
    env = {k: v for k, v in os.environ.items() if k != stores.PURE_PYTHON_SWITCH}
    out = subprocess.run(
        [sys.executable, "-c", _HIDE_NATIVE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    build, module, total = out.stdout.split()
    assert build == "pure" and module == "None" and total == str(sum(range(50, 100)))
    assert out.stderr == ""


def test_the_switch_turns_the_native_core_off() -> None:
    env = {**os.environ, stores.PURE_PYTHON_SWITCH: "1"}
    out = subprocess.run(
        [sys.executable, "-c", "import stores; print(stores.build(), stores.native())"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["pure", "None"]


def test_the_switch_at_install_time_builds_no_native_core_and_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hook = _load_setup(monkeypatch)
    monkeypatch.setenv(stores.PURE_PYTHON_SWITCH, "1")
    monkeypatch.setattr(sys, "argv", ["setup.py", "editable_wheel"])
    capsys.readouterr()
    assert hook._rust_extensions() == []
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["fiba-stream: installing without the native core (FIBA_PURE_PYTHON=1)"]


_PRINT_BUILD = "import stores; print(stores.build())"
"""What a fresh process loads (this one may run under another switch)."""


@pytest.mark.parametrize("pure", [False, True])
def test_fiba_version_names_the_build_loaded(pure: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != stores.PURE_PYTHON_SWITCH}
    if pure:
        env[stores.PURE_PYTHON_SWITCH] = "1"
    version, expected = (
        subprocess.run(
            [sys.executable, "-c", *code],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for code in (["from app.cli import main; main()", "--version"], [_PRINT_BUILD])
    )
    assert expected == "pure" if pure else expected in ("native", "pure")
    assert version.startswith("fiba, version ") and f"(hot path: {expected})" in version
