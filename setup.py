"""Build hook: compile the hot path (``stores.COMPILED``) with mypyc, and the native core
(``stores._native``, the Rust crate in ``stores/native``) with cargo, when it can.

``pip install .`` and ``pip install -e .`` (``make install``) run it. mypyc compiles the same
typed Python source the pure-Python build runs, so there is one implementation; the extension
modules land beside their sources (in place for an editable install) with
``stores/compiled.json``, the SHA-256 of each source compiled, which ``stores`` checks before
loading them. When mypyc or a working C compiler is missing, or compiling fails, the install
goes on with the pure-Python modules and says why in one warning. ``FIBA_PURE_PYTHON=1`` at
install time skips compiling (and at run time skips compiled modules, see ``stores``).

The native core is built by setuptools-rust (release profile) into ``stores/_native*.so``
with ``stores/native.json``, the SHA-256 of the crate's sources it was built from. Without
cargo on PATH, without setuptools-rust, or when cargo fails, the install goes on without it
and says so in one line; ``stores`` then runs the Python FiBA.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
SOURCES = (
    "stores/monoids.py",
    "stores/fiba.py",
    "stores/window_suffixes.py",
    "stores/key_windows.py",
)  # = stores.COMPILED, as paths
BUILD_INFO = "stores/compiled.json"
NATIVE_CRATE = "stores/native"
NATIVE_INFO = "stores/native.json"
BUILD_COMMANDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}


def _warn(reason: str) -> None:
    print(f"fiba-stream: installing the pure-Python core ({reason})", file=sys.stderr)


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
    if os.environ.get("FIBA_PURE_PYTHON") == "1" or not BUILD_COMMANDS.intersection(sys.argv[1:]):
        return []  # (the pure-Python switch was reported once, above)
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


def _mypyc_extensions() -> list:
    """mypyc's extension modules for ``SOURCES`` (none: build the pure-Python core)."""
    if os.environ.get("FIBA_PURE_PYTHON") == "1":
        _warn("FIBA_PURE_PYTHON=1")
        return []
    if not BUILD_COMMANDS.intersection(sys.argv[1:]):
        return []  # metadata only (egg_info, sdist): no type check, no C generation
    try:
        from mypyc.build import mypycify
    except ImportError as error:
        _warn(f"no mypyc: {error}")
        return []
    cwd = os.getcwd()
    os.chdir(HERE)  # mypy reads [tool.mypy] from ./pyproject.toml; sources are relative
    try:
        extensions = mypycify(list(SOURCES), opt_level="3", group_name="stores._compiled")
    except (Exception, SystemExit) as error:  # mypy reports type errors with SystemExit
        _warn(f"mypyc failed: {error}")
        return []
    finally:
        os.chdir(cwd)
    for extension in extensions:
        extension.optional = True  # a compile error is a warning, not a failed install
    return extensions


class BuildCompiledCore(build_ext):
    """``build_ext`` that keeps all of the compiled modules or none (a partial build would
    load a module without its shared library), and records what it compiled."""

    def run(self) -> None:
        outputs = [Path(self.get_ext_fullpath(ext.name)) for ext in self.extensions]
        info = Path(self.build_lib if not self.inplace else HERE) / BUILD_INFO
        for path in [*outputs, info]:
            path.unlink(missing_ok=True)  # never keep a previous build's modules
        super().run()
        if not self.extensions:
            return
        if not all(path.exists() for path in outputs):
            for path in outputs:
                path.unlink(missing_ok=True)
            _warn("the C compiler failed on mypyc's output, see above")
            return
        hashes = {
            source.removesuffix(".py").replace("/", "."): hashlib.sha256(
                (HERE / source).read_bytes()
            ).hexdigest()
            for source in SOURCES
        }
        info.parent.mkdir(parents=True, exist_ok=True)
        info.write_text(json.dumps({"compiler": "mypyc", "sha256": hashes}, indent=1) + "\n")


RUST_EXTENSIONS = _rust_extensions()
setup(
    ext_modules=_mypyc_extensions(),
    cmdclass={"build_ext": BuildCompiledCore, **(_native_command() if RUST_EXTENSIONS else {})},
    **({"rust_extensions": RUST_EXTENSIONS} if RUST_EXTENSIONS else {}),
)
