"""The supported Python versions are said once and tested: pyproject's classifiers, the README's
requirements and ``make test`` (this suite on the oldest, ``test-newest-python`` on the newest)
name the same versions."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def classified_versions() -> list[tuple[int, int]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [
        re.fullmatch(r"Programming Language :: Python :: 3\.(\d+)", c)
        for c in project["classifiers"]
    ]
    return sorted((3, int(m.group(1))) for m in found if m)


def test_classifiers_readme_and_make_test_agree() -> None:
    versions = classified_versions()
    assert versions == [(3, 11), (3, 12), (3, 13)]
    oldest, newest = versions[0], versions[-1]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == f">={oldest[0]}.{oldest[1]}"
    readme = (ROOT / "README.md").read_text()
    assert "Requirements: Python 3.11, 3.12 or 3.13 " in readme
    makefile = (ROOT / "Makefile").read_text()
    assert f"$(HOME)/.pyenv/versions/3.{newest[1]}*/bin/python3.{newest[1]}" in makefile
    test_recipe = makefile.split("\ntest: ", 1)[1].split("\n\n", 1)[0]
    assert "test-newest-python" in test_recipe  # `make test` runs it
    # this suite runs on the oldest (the Makefile's default PYTHON is python3.11)
    assert "PYTHON ?= $(shell command -v python3.11 || command -v python3)" in makefile
    assert sys.version_info[:2] in versions
