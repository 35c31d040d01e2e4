"""The installed import names: a user's own ``agents.py`` hides ours (the collision, as the
README describes it), the README's workaround (a package of one's own) works, and the
benchmarks are not installed (``bench`` is one top-level name fewer).

Each case runs a fresh interpreter of this environment in a temporary folder, outside the
repository, so that only the installed packages are on the module search path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from app.cli import cli

USER_AGENTS = "AGENTS = ['mine']\n"
"""A user's own module ``agents``."""

USES_SLIDING_WINDOWS = (
    "from agents.sliding import SlidingWindows\nprint('imported', SlidingWindows.__name__)\n"
)


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_an_agents_module_of_ones_own_hides_ours(tmp_path: Path) -> None:
    (tmp_path / "agents.py").write_text(USER_AGENTS)
    (tmp_path / "clicks_app.py").write_text(USES_SLIDING_WINDOWS)
    result = run(["clicks_app.py"], tmp_path)
    assert result.returncode == 1
    assert "No module named 'agents.sliding'; 'agents' is not a package" in result.stderr


def test_the_readme_workaround_a_package_of_ones_own(tmp_path: Path) -> None:
    project = tmp_path / "myproject"
    project.mkdir()
    (project / "__init__.py").write_text("")
    (project / "agents.py").write_text(USER_AGENTS)
    (project / "app.py").write_text(
        USES_SLIDING_WINDOWS + "from myproject.agents import AGENTS\nprint('mine', AGENTS)\n"
    )
    result = run(["-m", "myproject.app"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["imported SlidingWindows", "mine ['mine']"]


def test_the_benchmarks_are_not_installed(tmp_path: Path) -> None:
    found = "import importlib.util as u; print([bool(u.find_spec(n)) for n in NAMES])"
    names = ["app", "agents", "stores", "spark_bridge", "bench"]
    result = run(["-c", found.replace("NAMES", repr(names))], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str([True, True, True, True, False])


def test_fiba_bench_without_the_benchmarks_says_where_they_run(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "bench", None)  # as where they are not installed
    for name in [n for n in sys.modules if n.startswith("bench.")]:  # imported by other tests
        monkeypatch.delitem(sys.modules, name)
    result = CliRunner().invoke(cli, ["bench", "--help"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "fiba: `fiba bench` runs the benchmarks of a checkout of the repository, which are not"
        " installed: in its root run `python -m bench ...` (or `make bench`)"
    )
