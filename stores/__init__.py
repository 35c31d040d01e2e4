"""State: monoids, the FiBA aggregator, baselines, the RocksDB window store and changelog.

The hot path, the modules in ``COMPILED``, may be compiled by mypyc at install time
(``setup.py``) from the same source; Python then imports the extension module instead of the
``.py`` file. Importing this package decides once, for the whole process, which build its
modules load: the pure-Python sources when ``FIBA_PURE_PYTHON=1``, or when a compiled module
was built from another version of its source than the one beside it (a warning then says to
reinstall), else whatever is installed. :func:`build` tells which one that is, and
:func:`load_pure` loads a pure-Python twin beside a compiled module.

Beside them, the native core ``stores._native`` (Rust, built by ``setup.py`` from
``stores/native``) is used when it is installed, built from the crate's current sources
(``stores/native.json``) and ``FIBA_PURE_PYTHON`` is not ``1``: :func:`native` returns it.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path
from types import ModuleType

COMPILED = ("stores.monoids", "stores.fiba", "stores.window_suffixes", "stores.key_windows")
"""The modules ``setup.py`` compiles (the monoids, the FiBA core, the per-key windows), each
after the ones it imports."""

PURE_PYTHON_SWITCH = "FIBA_PURE_PYTHON"
_HERE = Path(__file__).resolve().parent
_BUILD_INFO = _HERE / "compiled.json"
NATIVE = "stores._native"
_NATIVE_INFO = _HERE / "native.json"
_native_module: ModuleType | None = None
_native_checked = False


class _PureSources(importlib.abc.MetaPathFinder):
    """Finds the modules of ``COMPILED`` as their ``.py`` sources, ahead of the path finder
    (which would prefer an extension module)."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> object:
        if fullname not in COMPILED:
            return None
        source = _HERE / (fullname.rpartition(".")[2] + ".py")
        return importlib.util.spec_from_file_location(fullname, source)


def _stale_modules() -> list[str]:
    """Compiled modules whose source changed since they were built (all of them when the
    build left no record). Reads and hashes the sources only when a compiled module exists."""
    built = [
        name
        for name in COMPILED
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if (_HERE / (name.rpartition(".")[2] + suffix)).exists()
    ]
    if not built:
        return []
    try:
        hashes = json.loads(_BUILD_INFO.read_text())["sha256"]
    except (OSError, ValueError, KeyError):
        return built
    return [
        name
        for name in built
        if hashes.get(name)
        != hashlib.sha256((_HERE / (name.rpartition(".")[2] + ".py")).read_bytes()).hexdigest()
    ]


def _choose_build() -> None:
    if os.environ.get(PURE_PYTHON_SWITCH) == "1":
        sys.meta_path.insert(0, _PureSources())
        return
    stale = _stale_modules()
    if stale:
        warnings.warn(
            f"compiled {', '.join(stale)} built from another source: using the pure-Python "
            "modules (reinstall: make install, or pip install -e .)",
            RuntimeWarning,
            stacklevel=2,
        )
        sys.meta_path.insert(0, _PureSources())


def build() -> str:
    """``"compiled"`` when every module of ``COMPILED`` loads (or was loaded) from its
    extension module, ``"pure"`` when none does, ``"mixed"`` otherwise; followed by
    ``"+native"`` when the native core loads (:func:`native`). Finds the modules without
    executing them."""
    compiled = [
        isinstance(_loader(name), importlib.machinery.ExtensionFileLoader) for name in COMPILED
    ]
    mypyc = "compiled" if all(compiled) else "mixed" if any(compiled) else "pure"
    return mypyc + ("+native" if native() is not None else "")


def _native_hash() -> str:
    """SHA-256 of the native crate's sources, as ``setup.native_sources_hash`` computes it."""
    crate = _HERE / "native"
    digest = hashlib.sha256()
    for path in [crate / "Cargo.toml", *sorted((crate / "src").glob("*.rs"))]:
        digest.update(path.relative_to(crate).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def native() -> ModuleType | None:
    """The native core ``stores._native``, or None: under ``FIBA_PURE_PYTHON=1``, when it is
    not installed (no Rust toolchain at install time), or when it was built from other
    sources than the crate beside it (a warning then says to reinstall; an installed package
    without the crate's sources loads what was installed). Decided once per process."""
    global _native_module, _native_checked
    if _native_checked:
        return _native_module
    _native_checked = True
    if os.environ.get(PURE_PYTHON_SWITCH) == "1" or importlib.util.find_spec(NATIVE) is None:
        return None
    if (_HERE / "native" / "Cargo.toml").exists():
        try:
            built = json.loads(_NATIVE_INFO.read_text())["sha256"]
        except (OSError, ValueError, KeyError):
            built = None
        if built != _native_hash():
            warnings.warn(
                "stores._native was built from other Rust sources: not using it "
                "(reinstall: make install, or pip install -e .)",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
    _native_module = importlib.import_module(NATIVE)
    return _native_module


def load_pure(name: str) -> ModuleType:
    """The pure-Python source of ``name`` (one of ``COMPILED``) as a module of its own,
    ``pure:<name>``, whichever build ``name`` itself loads: both builds side by side in one
    process (the tests compare their results, the benchmarks their speed). What it imports of
    the modules before it in ``COMPILED`` is their pure twins, so it runs no compiled code of
    the hot path. Loaded once."""
    if name not in COMPILED:
        raise ValueError(f"{name} is not one of the compiled modules {COMPILED}")
    alias = f"pure:{name}"
    module = sys.modules.get(alias)
    if module is None:
        twins = {dep: load_pure(dep) for dep in COMPILED[: COMPILED.index(name)]}
        source = _HERE / (name.rpartition(".")[2] + ".py")
        spec = importlib.util.spec_from_file_location(alias, source)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[alias] = module  # dataclasses look their module up while it executes
        shadowed = {dep: sys.modules.get(dep) for dep in twins}
        sys.modules.update(twins)  # its imports of them find the twins
        try:
            spec.loader.exec_module(module)
        finally:
            for dep, loaded in shadowed.items():
                if loaded is None:
                    del sys.modules[dep]
                else:
                    sys.modules[dep] = loaded
    return module


def _loader(name: str) -> object:
    module = sys.modules.get(name)
    if module is not None:
        return module.__loader__
    spec = importlib.util.find_spec(name)
    return None if spec is None else spec.loader


_choose_build()
