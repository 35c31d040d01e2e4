"""Build hook: compile the hot path (``stores.COMPILED``) with mypyc when it can.

``pip install .`` and ``pip install -e .`` (``make install``) run it. mypyc compiles the same
typed Python source the pure-Python build runs, so there is one implementation; the extension
modules land beside their sources (in place for an editable install) with
``stores/compiled.json``, the SHA-256 of each source compiled, which ``stores`` checks before
loading them. When mypyc or a working C compiler is missing, or compiling fails, the install
goes on with the pure-Python modules and says why in one warning. ``FIBA_PURE_PYTHON=1`` at
install time skips compiling (and at run time skips compiled modules, see ``stores``).
"""

from __future__ import annotations

import hashlib
import json
import os
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
BUILD_COMMANDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}


def _warn(reason: str) -> None:
    print(f"fiba-stream: installing the pure-Python core ({reason})", file=sys.stderr)


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


setup(ext_modules=_mypyc_extensions(), cmdclass={"build_ext": BuildCompiledCore})
