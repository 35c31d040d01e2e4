"""Description of the machine a benchmark ran on: CPU model, cores, load, Python, date, code."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path


def cpu_model() -> str:
    """The CPU model name (from /proc/cpuinfo on Linux, else ``platform.processor()``)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def _git(*args: str) -> str:
    """Output of ``git ARGS`` run in the repository root (raises if git fails)."""
    root = Path(__file__).resolve().parent.parent
    return subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=10
    ).stdout.strip()


def code_version() -> str:
    """The git commit of the measured code, noting uncommitted changes under ``stores/``."""
    try:
        commit = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--", "stores")
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return f"{commit} (uncommitted changes in stores/)" if dirty else commit


def describe_machine() -> dict[str, str]:
    """Ordered facts about this machine and interpreter, for the report header."""
    return {
        "cpu": cpu_model(),
        "cores": str(os.cpu_count()),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(terse=True),
        "load average (1, 5, 15 min)": " ".join(f"{v:.2f}" for v in os.getloadavg()),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "interpreter": sys.executable,
        "code": code_version(),
    }
