"""Build hook: compile the native core (``stores._native``, the Rust crate in ``stores/native``)
with cargo, when it can.

``pip install .`` and ``pip install -e .`` (``make install``) run it: setuptools-rust builds
the crate (release profile) into ``stores/_native*.so`` with ``stores/native.json``, the
SHA-256 of the crate's sources it was built from, which ``stores`` checks before loading it.
Without cargo on PATH, without setuptools-rust, when cargo fails, or under
``FIBA_PURE_PYTHON=1``, the install goes on with the pure-Python core and says why in one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
NATIVE_CRATE = "stores/native"
NATIVE_INFO = "stores/native.json"
BUILD_COMMANDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}


def _warn_native(reason: str) -> None:
    print(f"fiba-stream: installing without the native core ({reason})", file=sys.stderr)


def native_sources_hash(root: Path) -> str:
    """SHA-256 over the native crate's manifest and Rust sources (what ``stores`` compares
    with ``stores/native.json`` before loading ``stores._native``)."""
    crate = root / NATIVE_CRATE
    digest = hashlib.sha256()
    for path in [crate / "Cargo.toml", *sorted((crate / "src").glob("*.rs"))]:
        digest.update(path.relative_to(crate).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _rust_extensions() -> list:
    """setuptools-rust's extension for the native core (none: install without it)."""
    if not BUILD_COMMANDS.intersection(sys.argv[1:]):
        return []  # metadata only (egg_info, sdist)
    if os.environ.get("FIBA_PURE_PYTHON") == "1":
        _warn_native("FIBA_PURE_PYTHON=1")
        return []
    if shutil.which(os.environ.get("CARGO", "cargo")) is None:
        _warn_native("no Rust toolchain: cargo is not on PATH")
        return []
    try:
        from setuptools_rust import Binding, RustExtension
    except ImportError as error:
        _warn_native(f"no setuptools-rust: {error}")
        return []
    return [
        RustExtension(
            "stores._native",
            path=f"{NATIVE_CRATE}/Cargo.toml",
            binding=Binding.PyO3,
            debug=False,
            optional=True,
        )
    ]


def _native_command() -> dict:
    """``build_rust`` that removes a previous native module first, reports a failed cargo
    build in one line, and records the sources it built (``stores/native.json``)."""
    try:
        from setuptools_rust.build import build_rust
    except ImportError:
        return {}

    class BuildNativeCore(build_rust):
        def run_for_extension(self, ext: object) -> None:
            lib = HERE if self.inplace else Path(self.get_finalized_command("build_ext").build_lib)
            info = lib / NATIVE_INFO
            for path in [*lib.glob("stores/_native*.so"), *lib.glob("stores/_native*.pyd"), info]:
                path.unlink(missing_ok=True)
            try:
                super().run_for_extension(ext)
            except Exception as error:
                _warn_native(f"cargo failed: {str(error).splitlines()[0] if str(error) else error}")
                return
            info.parent.mkdir(parents=True, exist_ok=True)
            info.write_text(json.dumps({"sha256": native_sources_hash(HERE)}) + "\n")

    return {"build_rust": BuildNativeCore}


RUST_EXTENSIONS = _rust_extensions()
setup(
    cmdclass=_native_command() if RUST_EXTENSIONS else {},
    **({"rust_extensions": RUST_EXTENSIONS} if RUST_EXTENSIONS else {}),
)
