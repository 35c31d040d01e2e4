"""State: monoids, the FiBA aggregator, baselines, the RocksDB window store and changelog.

Beside the Python modules, the native core ``stores._native`` (Rust, built by ``setup.py``
from ``stores/native``) is used when it is installed, built from the crate's current sources
(``stores/native.json``) and ``FIBA_PURE_PYTHON`` is not ``1``: :func:`native` returns it and
:func:`build` says which core runs (``native`` or ``pure``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import warnings
from pathlib import Path
from types import ModuleType

PURE_PYTHON_SWITCH = "FIBA_PURE_PYTHON"
_HERE = Path(__file__).resolve().parent
NATIVE = "stores._native"
_NATIVE_INFO = _HERE / "native.json"
_native_module: ModuleType | None = None
_native_checked = False


def build() -> str:
    """``"native"`` when the native core loads (:func:`native`), else ``"pure"`` (the
    Python core alone)."""
    return "native" if native() is not None else "pure"


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
